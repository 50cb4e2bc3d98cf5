"""The coordinator's wall clock against its monotonic clock, for the ages `fleet status`
shows.

The coordinator stamps what it decides with time.time() (records, the scheduler's
times), and `fleet status` showed how long it had been up and how long each step had
run as now less such a stamp. When the host's clock stepped (NTP's first sync, an
administrator's date), a fleet up for 7 s showed "up 2h00m", and its running steps as
long. Its uptime is now its own monotonic time, and an age is a wall stamp's distance
from now by the monotonic clock: each beat (fleet.control.liveness) looks at the wall
clock's distance from the monotonic one, and a change of more than STEP_S is a step,
kept (STEPS_KEPT at most) so that a stamp taken before it is read on the clock it was
taken by (a stamp up to a beat older than the look that saw the step may be on either
side of it: read on the newer if it can be).
"""

from __future__ import annotations

import time

STEP_S = 0.5  # NTP slews at most 500 ppm: 10 ms over a 20 s beat; more is a step
STEPS_KEPT = 16


class WallClock:
    """Where the wall clock stood against the monotonic one, since the coordinator began."""

    def __init__(self, beat_s: float = 1.0) -> None:
        self.slack = beat_s  # how late a look may see a step
        self.began = time.monotonic()
        # (monotonic time from which, wall less monotonic), oldest first
        self.spans = [(self.began, time.time() - self.began)]

    def look(self, wall: float, mono: float) -> None:
        """(Each beat) the two clocks now: a step since the last look is kept, as at `mono`."""
        off = wall - mono
        if abs(off - self.spans[-1][1]) > STEP_S:
            self.spans.append((mono, off))
            del self.spans[:-STEPS_KEPT]

    def up_s(self, mono: float | None = None) -> float:
        """Seconds since the coordinator began, by the monotonic clock."""
        return (time.monotonic() if mono is None else mono) - self.began

    def age(self, stamp: float, wall: float, mono: float) -> float:
        """Seconds from the wall-clock `stamp` to now (`wall`, `mono`), by the monotonic
        clock: the stamp read on the span of the wall clock it falls in, the latest first
        (a stamp that would fall in a span's future is of an earlier one)."""
        spans = self.spans
        if len(spans) == 1:  # (never stepped: the wall clock's own difference)
            return max(0.0, wall - stamp)
        end = mono
        for began, off in reversed(spans):
            at = stamp - off
            if began - self.slack <= at <= end:
                return max(0.0, mono - at)
            end = began
        return max(0.0, mono - (stamp - spans[0][1]))
