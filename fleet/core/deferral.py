"""Holding back the few biggest wide steps that are not critical ("defer-widest").

Why. On a fleet whose cores are all busy for hours with wide (spanning) steps, those
steps queue behind each other. Started greedily, a spanning step with the most cores x
estimate takes, for hours, the cores that several smaller wide steps becoming ready a
little later then wait for. The wait that matters is the typical one (a percentile):
if the few biggest steps that are not on a near-critical chain wait instead, the rest
start at once, and the makespan, set by the critical chains, does not move.

The rule (order "defer-widest" of fleet.core.ranks, on top of
"critical-then-smallest"). When a submission is entered, of its spanning steps, the
DEFER_SHARE with the most cores x expected duration up to SOON_S (estimate, else a
recorded duration; ties to setup order), leaving out those whose upward rank is at
least the critical cut, are *deferred* (a submission with fewer than 1 / DEFER_SHARE
spanning steps defers none). A deferred step, once ready, is not started before it
has been ready DEFER_S (reservations and the rest of the scheduler then treat it as
any other step). The hold is checked in the scheduler's passes, which follow events
(a step ends, a submission, a node joins): on a busy fleet within seconds of its end;
a held step starts at once when nothing else is running. In its class of demand
it queues after the others (its work is larger), so it holds up none of them.

Deterministic (the choice is made from the submission alone; the hold from the
step's ready time and the event's time). Cost: one sort of a submission's spanning
steps when it is entered, one set lookup per pass for a class whose first step is
deferred.
"""

from __future__ import annotations

from typing import Mapping

from fleet.core import durations
from fleet.core import waits as W

DEFER_SHARE = 0.09  # of a submission's spanning steps (a p90 wait is about the other 91 %)
DEFER_S = 2400.0    # how long a deferred step is held after it becomes ready
SOON_S = 1800.0     # a step's work is counted over its first SOON_S: the cores it holds while others queue


def _held_soon(step, recorded) -> float:
    """Cores x the part of its expected duration within SOON_S: what a step takes from
    the steps queued now (a 4-hour step on few cores holds few of their cores)."""
    return step.cores * min(durations.expected_s(step, recorded) or 0.0, SOON_S)


class Deferral:
    """The deferred steps and how long each is held."""

    def __init__(self, share: float = DEFER_SHARE, hold_s: float = DEFER_S) -> None:
        self.share, self.hold_s = share, hold_s
        self.steps: set[str] = set()

    def learn(self, steps, rank: Mapping[str, float], cut: float,
              recorded: Mapping[str, float] | None) -> None:
        """A submission's steps and their upward ranks: choose its deferred steps."""
        wide = [s for s in steps if s.span]
        big = sorted(((-_held_soon(s, recorded), n, s.id)
                      for n, s in enumerate(wide) if rank.get(s.id, 0.0) < cut), key=lambda t: t[:2])
        self.steps.update(sid for area, _, sid in big[:int(self.share * len(wide))] if area < 0)

    def holds(self, job, now: float, running: int) -> bool:
        """Whether this ready step is held back now (never while nothing runs: no step
        would end to bring the next pass)."""
        return (running > 0 and job.spec.id in self.steps and job.ready_at is not None
                and now < job.ready_at + self.hold_s)

    def why(self, job) -> W.WaitReason:
        """The reason a held step waits."""
        return W.WaitReason(W.OTHER, detail=f"deferred (one of the widest steps not on a critical chain) "
                                            f"until {job.ready_at + self.hold_s:g} s")
