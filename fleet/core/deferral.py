"""Holding back the few biggest wide steps that are not critical ("defer-widest").

Why. On a fleet whose cores are all busy for hours with wide (spanning) steps, those
steps queue behind each other. Started greedily, a spanning step with the most cores x
duration takes, for hours, the cores that several smaller wide steps becoming ready a
little later then wait for. The wait that matters is the typical one (a percentile):
if the few biggest steps that are not on a near-critical chain wait instead, the rest
start at once, and the makespan, set by the critical chains, does not move.

The rule (order "defer-widest" of fleet.core.ranks, on top of
"critical-then-smallest"), with one time scale taken from the submission itself, not
a constant: its *typical* wide step, the median expected duration (estimate, else a
recorded duration) of its spanning steps. When a submission is entered, of its
spanning steps, the DEFER_SHARE with the most cores x expected duration up to the
typical one (what a step takes from the steps queued while it runs: a 4-hour step on
few cores holds few of their cores), ties to setup order, leaving out those whose
upward rank is at least the critical cut, are *deferred* (a submission with fewer than
1 / DEFER_SHARE spanning steps defers none). A deferred step, once ready, is not
started before it has been ready the typical duration: about one turn of the wide
steps' cores, in which the smaller wide steps ready by then take them. After that it
is an ordinary step (reservations then treat it as any other). A suite whose wide
steps take 60 s holds one at most 60 s; the Aurora what-if's (median 1,757 s) about
as long as the old fixed 2,400 s, with the same p90 (benchmarks/README.md). A hold
only while a smaller wide step is ready and waiting was measured and is worse (p90
1,224 s, not 783 s): the hold pays off by keeping cores for the wide steps becoming
ready next, which no state of the ready queue shows.

The hold is checked in the scheduler's passes, which follow events (a step ends, a
submission, a node joins), and its end is a timer of its own: each hold the pass
imposes is noted (a heap of ends), and the shell asks `wake_after(sched, t)` for the
first end after the last wake-up it gave, and at that time hands the scheduler a pass
with nothing in it (Exits(()), as for a bounded pass's rest): the live coordinator's
loop waits no longer than that (fleet.control.holdtimer), `fleet simulate` has it in
its heap of times (fleet.core.simulate). Until 2026-12-06 there was no timer: a held
step waited for the next event after its hold, which on a fleet of long steps left its
cores idle for as long as the running steps had left. A held step starts at once when
nothing else is running. A held step holds up no other step: for the pass it is set
aside, and the steps queued behind it in its class of demand are tried (it is often
first there: its class is keyed by whole work, the choice by work up to the typical
duration).

Deterministic (the choice is made from the submission alone; the hold from the
step's ready time and the event's time; the wake-up is an event with its time). Cost:
one sort of a submission's spanning steps when it is entered, one set lookup per pass
for a class whose first step is deferred, a heap push per hold.
"""

from __future__ import annotations

import heapq
from statistics import median
from typing import Mapping

from fleet.core import durations
from fleet.core import waits as W

DEFER_SHARE = 0.09  # of a submission's spanning steps (a p90 wait is about the other 91 %)


class Deferral:
    """The deferred steps and how long each may be held."""

    def __init__(self, share: float = DEFER_SHARE, hold_s: float | None = None) -> None:
        """`hold_s`: one fixed hold for every deferred step (tests); None: its
        submission's typical spanning step's expected duration."""
        self.share, self.hold_s = share, hold_s
        self.steps: set[str] = set()
        self.typical: dict[str, float] = {}  # a deferred step's submission's median spanning duration
        self._ends: list[tuple[float, str]] = []  # (when a hold ends, step): the shell's wake-ups
        self._timed: set[tuple[float, str]] = set()  # (each hold once; a retry is held anew)

    def learn(self, steps, rank: Mapping[str, float], cut: float,
              recorded: Mapping[str, float] | None) -> None:
        """A submission's steps and their upward ranks: choose its deferred steps."""
        wide = [(s, durations.expected_s(s, recorded) or 0.0) for s in steps if s.span]
        typical = median(d for _, d in wide) if wide else 0.0
        big = sorted(((-s.cores * min(d, typical), n, s.id)
                      for n, (s, d) in enumerate(wide) if rank.get(s.id, 0.0) < cut), key=lambda t: t[:2])
        for area, _, sid in big[:int(self.share * len(wide))]:
            if area < 0:
                self.steps.add(sid)
                self.typical[sid] = typical

    def until(self, job) -> float:
        """When a deferred ready step becomes an ordinary one."""
        hold = self.hold_s if self.hold_s is not None else self.typical.get(job.spec.id, 0.0)
        return job.ready_at + hold

    def holds(self, job, now: float, running: int) -> bool:
        """Whether this ready step is held back now (never while nothing runs: no step
        would end to bring the next pass)."""
        return (running > 0 and job.spec.id in self.steps and job.ready_at is not None
                and now < self.until(job))

    def why(self, job) -> W.WaitReason:
        """The reason a held step waits: how long it is held from when it became ready
        (`fleet status` shows how long it has been). Not the time left, nor the end as a
        time: the words would change at every pass, each a Wait said again."""
        hold = self.until(job) - job.ready_at
        return W.WaitReason(W.OTHER, detail=f"deferred for {_seconds(hold)} from when it became ready "
                                            f"(one of the widest steps not on a critical chain)")

    def timed(self, job) -> None:
        """Note the end of a hold the pass imposes, for the shell's wake-up."""
        end = (self.until(job), job.spec.id)
        if end not in self._timed:
            self._timed.add(end)
            heapq.heappush(self._ends, end)

    def next_end(self, after: float) -> float | None:
        """The first end of a hold later than `after` (those up to it are dropped: the
        shell gave the pass at or after them), or None."""
        while self._ends and self._ends[0][0] <= after:
            self._timed.discard(heapq.heappop(self._ends))
        return self._ends[0][0] if self._ends else None


def _seconds(s: float) -> str:
    """A hold in words: "40 s", "29 min 17 s", "2 h 5 min"."""
    s = round(s)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
    return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")


def wake_after(sched, after: float) -> float | None:
    """When the shell is to give `sched` a pass (Exits(())) for a hold that ends, the
    first such time after `after` (its last wake-up); None: no hold to end."""
    deferral = sched.ranks.deferral
    return None if deferral is None else deferral.next_end(after)


def held(sched, job, cls, heads: list, now: float, aside: list, out: list) -> bool:
    """In the scheduler's pass: True if the order holds this step (the first of its
    class) back now. It then waits, and leaves its class until the pass ends (onto
    `aside`, which the scheduler puts back): the class's next step is tried."""
    deferral = sched.ranks.deferral
    if not deferral.holds(job, now, len(sched._running)):
        return False
    sched._wait(job, deferral.why(job), len(cls.heap) - 1, out)
    deferral.timed(job)
    aside.append((cls, heapq.heappop(cls.heap)))
    sched._quiet.changed(cls)
    if cls.heap:
        heapq.heappush(heads, (cls.heap[0], cls.key))
    return True
