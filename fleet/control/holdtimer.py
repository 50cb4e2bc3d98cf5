"""The coordinator's wake-ups for steps the scheduler holds: those `--order defer-widest`
holds back (fleet.core.deferral), and a lost node's, until its own side has stopped
them (fleet.core.fencing).

A held step may start once its hold ends, but the scheduler decides only when handed an
event: with no step ending then, it would wait for the next event, its cores idle for as
long as the running steps have left. So the loop's wait is bounded by the first hold's
end (wait_ms), and when that time comes the scheduler gets a pass with nothing in it
(Exits(()), the event a bounded pass's rest is), with its time: deterministic, as every
event. Cost: one heap peek a loop turn, and none without that order.
"""

from __future__ import annotations

import math

from fleet.core.decisions import Exits
from fleet.core.deferral import wake_after
from fleet.core.fencing import Fenced


class HoldTimer:
    """One coordinator's wake-ups: `coord` is the coordinator (its scheduler, its _feed)."""

    def __init__(self, coord) -> None:
        self.coord = coord
        self.woken = 0.0  # the last wake-up's time (epoch seconds): holds ending by then were given their pass
        self.fenced: float | None = None  # the end of the lost node's hold last told (Fenced)

    def wait_ms(self, now: float, wait_ms: int) -> int:
        """The loop's wait (ms), no longer than to the first hold's end (rounded up: no spinning)."""
        fenced = self.coord.sched.fencing.due()
        for at in (wake_after(self.coord.sched, self.woken), None if fenced == self.fenced else fenced):
            if at is not None:
                wait_ms = max(0, min(wait_ms, math.ceil((at - now) * 1000)))
        return wait_ms

    def tick(self, now: float) -> None:
        """On every loop turn: a pass for the holds that have ended by now, and the lost
        nodes' steps whose hold has ended."""
        at = wake_after(self.coord.sched, self.woken)
        if at is not None and now >= at:
            self.woken = now
            self.coord._feed(Exits(()), now)
        fenced = self.coord.sched.fencing.due()
        if fenced is not None and now >= fenced and fenced != self.fenced:  # (once: it may wait in the core)
            self.fenced = fenced
            self.coord._feed(Fenced(), now)
