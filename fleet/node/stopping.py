"""When the zygote stops a step: its timeout passed, it was cancelled, or the zygote
shuts down. Stopping is always the same: SIGTERM (and SIGCONT, so a stopped step sees
it) to the step's process group, then SIGKILL once its grace is over.

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


class Stoppable(Protocol):
    """What stopping needs of the zygote's record of a step."""

    pid: int
    ending: str | None   # the outcome it is being stopped for
    term_at: float | None  # monotonic time of its SIGTERM
    kill_at: float | None  # monotonic time its SIGKILL is due
    killed: bool


class Stops:
    """The timers of one zygote's steps; ``signal_group(step, sig)`` signals a step's group,
    ``alive(step)`` says whether the step is still one of the zygote's."""

    def __init__(self, signal_group: Callable[[Stoppable, int], None], alive: Callable[[Stoppable], bool],
                 clock: Callable[[], float] = time.monotonic):
        self.signal_group = signal_group
        self.alive = alive
        self.clock = clock
        self._heap: list[tuple[float, int, str, Stoppable]] = []
        self._seq = itertools.count()

    def arm(self, step: Stoppable, timeout: float | None) -> None:
        """Start the step's timeout (None: it has none)."""
        if timeout is not None and timeout > 0:
            self._push(self.clock() + timeout, "timeout", step)

    def stop(self, step: Stoppable, grace: float, ending: str | None = None) -> None:
        """SIGTERM the step now (unless it already had one), SIGKILL after ``grace`` s
        (or sooner, if an earlier stop said so). ``ending``: the outcome to report, if
        none was set before (a timed-out step that is then cancelled stays timed out)."""
        now = self.clock()
        if step.ending is None and ending is not None:
            step.ending = ending
        if step.term_at is None:
            step.term_at = now
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
            if not self.alive(step) or step.killed:
                continue
            if what == "timeout":
                self.stop(step, grace_of(step), TIMED_OUT)
            elif step.kill_at is not None and step.kill_at <= at:
                step.killed = True
                self.signal_group(step, signal.SIGKILL)

    def next_ms(self) -> int | None:
        """Milliseconds until the next timer (at least 1), or None without one. Timers
        of steps gone are dropped here, so an idle zygote does not wake for them."""
        while self._heap and (not self.alive(self._heap[0][3]) or self._heap[0][3].killed):
            heapq.heappop(self._heap)
        if not self._heap:
            return None
        return max(1, math.ceil((self._heap[0][0] - self.clock()) * 1000))

    def _push(self, at: float, what: str, step: Stoppable) -> None:
        heapq.heappush(self._heap, (at, next(self._seq), what, step))


def ended_reason(ending: str, timeout: float | None, grace: float, killed: bool) -> str:
    """What an exit report says of a step stopped for ``ending``."""
    why = (f"timed out after {timeout:g} s" if ending == TIMED_OUT
           else WITH_NODE_REASON if ending == WITH_NODE else "cancelled")
    return why + (f"; SIGKILL after {grace:g} s grace" if killed else "; ended after SIGTERM")


def signal_name(sig: int) -> str:
    """SIGTERM for 15, and so on."""
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
