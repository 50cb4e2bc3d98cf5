"""fleet: run a suite of steps inside one batch allocation, forked from resident,
pre-imported fork servers on every node.

For a step's own code: ``fleet.context()`` returns the running call step's
:class:`fleet.StepContext` from anywhere in its process. Both are loaded on first
use, so ``import fleet`` stays cheap.
"""

__version__ = "0.1.0"

__all__ = ["StepContext", "context"]


def __getattr__(name: str):
    # Lazy: the coordinator, the CLI and a zygote's preloads need neither.
    if name in __all__:
        from fleet.node import stepcontext
        return getattr(stepcontext, name)
    raise AttributeError(f"module 'fleet' has no attribute {name!r}")
