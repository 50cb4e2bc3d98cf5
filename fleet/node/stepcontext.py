"""The step context: what a ``call`` step knows about itself, and ``fleet.context()``.

Import-light on purpose: ``import fleet; fleet.context()`` loads only this.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepContext:
    """What a ``call`` step knows about itself: passed as ``ctx`` to a function that
    has a parameter of that name, and returned by :func:`context` anywhere in the
    step's process.

    id, attempt: the step and which attempt this is (1 for the first).
    workdir: the step's directory, already the current directory.
    run_dir: the run directory of the fleet.
    cores, gpus: ids this step was given (the process is pinned to ``cores``; the
        GPU variables are set to ``gpus``). memory: its share, in bytes.
    placement: ((node, cores, gpus, memory), ...) for every node it spans.
    inputs, outputs: the paths the step declared (absolute). args: its arguments.
    log: the log file that fds 1 and 2 (and sys.stdout/sys.stderr) write to.
    threads: the thread count its environment and thread pools were given.
    """

    id: str
    attempt: int
    workdir: str
    run_dir: str
    cores: tuple
    gpus: tuple
    memory: int
    placement: tuple
    inputs: tuple
    outputs: tuple
    args: dict
    log: str
    threads: int = 1


_current: StepContext | None = None


def context() -> StepContext:
    """The running step's context, from anywhere in a ``call`` step's process.

    Raises RuntimeError outside one (in the coordinator, in a command step, in a
    process the step started with subprocess: each is a process of its own).
    """
    if _current is None:
        raise RuntimeError(
            "fleet.context() is only available in the process of a running call step "
            "(a command step reads FLEET_STEP, FLEET_ATTEMPT and FLEET_RUN_DIR from its environment)")
    return _current


def enter(ctx: StepContext) -> None:
    """Make ``ctx`` the one :func:`context` returns (the child does this once)."""
    global _current
    _current = ctx
