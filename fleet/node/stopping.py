"""When the zygote stops a step: its timeout passed, it was cancelled, or the zygote
shuts down. Stopping is always the same: SIGTERM (and SIGCONT, so a stopped step sees
it) to the step's process group, then SIGKILL once its grace is over.

A step whose launcher stops its own tasks (an MPI step's srun: fleet.node.srunstop) is
stopped through it instead: the launcher's ``term`` at the stop, its ``kill`` when the
grace is over, and SIGKILL to the group LAUNCHER_KILL_S later if it is still there.

Timers are deadlines in a heap, checked by the zygote's single-threaded poll loop
(:meth:`Stops.next_ms` bounds its wait, :meth:`Stops.due` acts on what is due): no
threads, no alarm signals. A step keeps the outcome it is being stopped for
(``timed_out`` or ``cancelled``; None at a shutdown), which its exit report carries
whatever its exit status: a step that catches SIGTERM and exits 0 still did not run
to its end.
"""

from __future__ import annotations

import heapq
import itertools
import math
import signal
import time
from typing import Callable, Protocol

TIMED_OUT = "timed_out"
CANCELLED = "cancelled"
# A step its zygote stopped while stopping (fleet down, the job's end, its agent gone):
# whatever its status (a shell that traps SIGTERM exits 0), it did not end by itself, so
# it is terminated, never succeeded; the coordinator makes that interrupted when the
# fleet stops or the job ends (its agent relabels it, or holds it as a doubt first:
# fleet.node.jobend), and a lost node's step as any terminated one.
WITH_NODE = "terminated"
WITH_NODE_REASON = "stopped with its node"
# A cancel's words in an exit's reason, by who cancelled (P.Kill.why): `fleet cancel` (""),
# or the drain before the allocation's end (which the coordinator then takes as interrupted).
STOPPED_BY = {"": "cancelled", "drain": "stopped by the drain"}
# Statuses 128 + these read as that signal's (a shell's or srun's for what killed its child).
_OTHER_SIGNALS = frozenset(int(s) for s in signal.Signals) - {signal.SIGTERM}
# After a launcher was told to kill its tasks: how long it has to do so and exit before
# its group gets SIGKILL (srun waits for Slurm to end the tasks: KillWait, 30 s by
# default, at most; a srun that hangs must not hold its zygote's shutdown for that long).
LAUNCHER_KILL_S = 5.0


class Stoppable(Protocol):
    """What stopping needs of the zygote's record of a step."""

    pid: int
    ending: str | None   # the outcome it is being stopped for
    why: str  # who cancelled it (P.Kill.why), with that outcome
    term_at: float | None  # monotonic time of its SIGTERM
    kill_at: float | None  # monotonic time its SIGKILL is due
    killed: bool


class Launcher(Protocol):
    """What stops a step through its launcher (fleet.node.srunstop)."""

    def handles(self, step: Stoppable) -> bool: ...
    def term(self, step: Stoppable) -> None: ...  # the tasks' SIGTERM
    def kill(self, step: Stoppable) -> None: ...  # the tasks' SIGKILL; the launcher then exits


class Stops:
    """The timers of one zygote's steps; ``signal_group(step, sig)`` signals a step's group,
    ``alive(step)`` says whether the step is still one of the zygote's; ``launcher``
    stops the steps it handles."""

    def __init__(self, signal_group: Callable[[Stoppable, int], None], alive: Callable[[Stoppable], bool],
                 clock: Callable[[], float] = time.monotonic, launcher: Launcher | None = None):
        self.signal_group = signal_group
        self.alive = alive
        self.clock = clock
        self.launcher = launcher
        self._heap: list[tuple[float, int, str, Stoppable]] = []
        self._seq = itertools.count()

    def arm(self, step: Stoppable, timeout: float | None) -> None:
        """Start the step's timeout (None: it has none)."""
        if timeout is not None and timeout > 0:
            self._push(self.clock() + timeout, "timeout", step)

    def stop(self, step: Stoppable, grace: float, ending: str | None = None, why: str = "") -> None:
        """SIGTERM the step now (unless it already had one), SIGKILL after ``grace`` s
        (or sooner, if an earlier stop said so). ``ending``: the outcome to report, if
        none was set before (a timed-out step that is then cancelled stays timed out),
        and ``why``: who cancelled it (P.Kill.why)."""
        now = self.clock()
        if step.ending is None and ending is not None:
            step.ending, step.why = ending, why
        if step.term_at is None:
            step.term_at = now
            if self._through_launcher(step):
                self.launcher.term(step)
            else:
                self.signal_group(step, signal.SIGTERM)
                self.signal_group(step, signal.SIGCONT)
        kill_at = now + max(0.0, grace)
        if step.kill_at is None or kill_at < step.kill_at:
            step.kill_at = kill_at
            self._push(kill_at, "kill", step)

    def due(self, grace_of: Callable[[Stoppable], float]) -> None:
        """Act on every timer due now: a timeout stops its step (with the grace
        ``grace_of`` gives), a grace that is over SIGKILLs."""
        now = self.clock()
        while self._heap and self._heap[0][0] <= now:
            at, _, what, step = heapq.heappop(self._heap)
            if not self.alive(step) or (step.killed and what != "last"):
                continue
            if what == "timeout":
                self.stop(step, grace_of(step), TIMED_OUT)
            elif what == "last":  # its launcher did not end it
                self.signal_group(step, signal.SIGKILL)
            elif step.kill_at is not None and step.kill_at <= at:
                step.killed = True
                if self._through_launcher(step):
                    self.launcher.kill(step)
                    self._push(now + LAUNCHER_KILL_S, "last", step)
                else:
                    self.signal_group(step, signal.SIGKILL)

    def pending(self) -> bool:
        """Whether a step its launcher was told to kill may still need SIGKILL."""
        return any(what == "last" and self.alive(step) for _, _, what, step in self._heap)

    def next_ms(self) -> int | None:
        """Milliseconds until the next timer (at least 1), or None without one. Timers
        of steps gone are dropped here, so an idle zygote does not wake for them."""
        while self._heap and (not self.alive(self._heap[0][3])
                              or (self._heap[0][3].killed and self._heap[0][2] != "last")):
            heapq.heappop(self._heap)
        if not self._heap:
            return None
        return max(1, math.ceil((self._heap[0][0] - self.clock()) * 1000))

    def _through_launcher(self, step: Stoppable) -> bool:
        return self.launcher is not None and self.launcher.handles(step)

    def _push(self, at: float, what: str, step: Stoppable) -> None:
        heapq.heappush(self._heap, (at, next(self._seq), what, step))


def given_grace(step: Stoppable, own: float) -> float:
    """The grace the step had between its SIGTERM and its SIGKILL: its `own`, or less
    if a stop cut it (the drain's, before the allocation's end: fleet.core.deadline)."""
    if step.term_at is None or step.kill_at is None:
        return own
    return min(own, round(max(0.0, step.kill_at - step.term_at), 1))


def ended_reason(ending: str, timeout: float | None, grace: float, killed: bool, by: str = "",
                 sig: int | None = None, rc: int | None = None) -> str:
    """What an exit report says of a step stopped for ``ending`` (``by``: who cancelled it,
    P.Kill.why), and how it ended: its SIGKILL after the grace, or the end of its SIGTERM;
    a signal that is not fleet's (``sig``, or ``rc`` as 128 + a signal: a shell's, srun's
    for its ranks) is said as that signal's (the batch system's warning reached it first)."""
    why = (f"timed out after {timeout:g} s" if ending == TIMED_OUT
           else WITH_NODE_REASON if ending == WITH_NODE else STOPPED_BY.get(by, "cancelled"))
    if killed:
        return f"{why}; SIGKILL after {grace:g} s grace"
    if sig is not None and sig != signal.SIGTERM:
        return f"{why}; killed by {signal_name(sig)}"
    if rc is not None and rc - 128 in _OTHER_SIGNALS:
        return f"{why}; exit status {rc} ({signal_name(rc - 128)})"
    return f"{why}; ended after SIGTERM"


def signal_name(sig: int) -> str:
    """SIGTERM for 15, and so on."""
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
