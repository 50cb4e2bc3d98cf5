"""fleet: run a suite of steps inside one batch allocation, forked from resident,
pre-imported fork servers on every node.

For a step's own code: ``fleet.context()`` returns the running call step's
:class:`fleet.StepContext` from anywhere in its process. For a program that drives
a fleet: ``fleet.connect(run_dir)`` returns a :class:`fleet.Fleet` client (submit,
wait, status, cancel, down; see docs/python-api.md). A call step that submitted
children (``ctx.submit``) raises ``fleet.WaitForChildren()`` to wait for them without
holding resources; ``fleet.Next("stage")``, ``fleet.Restart()`` and
``fleet.Broken("reason")`` are httk's multi-stage protocol (docs/suite-reference.md).
``fleet.SuiteError`` is what a suite checked in this process raises (a step's
``ctx.submit``); ``fleet.SubmitError``, a ``fleet.FleetError`` and no SuiteError, is a
fleet's refusal of ``Fleet.submit`` (docs/python-api.md). All are loaded on first use,
so ``import fleet`` stays cheap.
"""

__version__ = "0.1.0"

__all__ = ["StepContext", "context", "connect", "Fleet", "Submission", "SubmitError", "FleetError",
           "WaitForChildren", "Next", "Restart", "Broken", "SuiteError"]

_STEP = ("StepContext", "context")
_PROTOCOL = ("WaitForChildren", "Next", "Restart", "Broken")


def __getattr__(name: str):
    # Lazy: the coordinator, the CLI and a zygote's preloads need none of these, and a
    # step's child must not import ZeroMQ for fleet.context().
    if name in _STEP:
        from fleet.node import stepcontext
        return getattr(stepcontext, name)
    if name in _PROTOCOL:
        from fleet.node import protocol
        return getattr(protocol, name)
    if name == "SuiteError":
        from fleet.core.problems import SuiteError
        return SuiteError
    if name in __all__:
        from fleet.control import api
        return getattr(api, name)
    raise AttributeError(f"module 'fleet' has no attribute {name!r}")
