"""What `fleet status` shows of the ready steps that have not started, as squeue's
Reason column does: why each waits, bounded whatever the number of ready steps.

Ready steps sit in classes of identical demand (fleet.core.scheduler), and a class's
steps wait for the same thing as its first step: so the view is the first step of each
class, in the order the next pass tries them, with its last Wait and how many steps of
the same demand wait behind it. Cost: O(classes), never O(ready steps). Beside them,
the standing reservations (fleet.core.reservations) and the first steps the
allocation's end held back (fleet.core.deadline), which have left their classes.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from fleet.core import waits as W


@dataclass(frozen=True)
class Head:
    """The first ready step of a class of demand, and why it has not started."""

    step: str
    reason: str | None  # the text of its last Wait; None: not tried since it came first
    cause: str | None  # fleet.core.waits' cause of that Wait
    behind: int  # ready steps of the same demand behind it
    ready_s: float | None  # how long it has been ready


@dataclass(frozen=True)
class Reserved:
    """A standing reservation: resources held for one step until it can start."""

    step: str
    held_cores: int  # held so far (the rest are still running other steps)
    cores: int  # what the step takes
    expected_start: float | None  # from running steps' estimates; None: one has none


def heads(classes: dict, jobs: dict, pool, now: float, limit: int, shut: W.WaitReason | None = None) -> list[Head]:
    """The first step of each ready class, in pass order (priority, then the order's
    key), at most `limit`. A first step not tried since it came first (a step ahead of
    it was handed to a node, and its class, blocked, is skipped until something it
    could use frees) is given what it lacks now, as its pass would say. `shut`: why
    nothing starts any more (the drain: fleet.core.deadline.Deadline.shut), given to
    each instead (what it waited for before does not hold it: nodes idle after the drain
    showed it short of memory, before 2026-12-07)."""
    firsts = heapq.nsmallest(limit, (c.heap[0] for c in classes.values() if c.heap))
    out = []
    for _, _, sid in firsts:
        job = jobs[sid]
        cls = classes[("exclusive",) if job.exclusive else (job.demand,)]
        why: W.WaitReason | None = shut or job.why
        if shut is None and ((why is None and cls.blocked_at is not None)
                             or (why is not None and why.cause in (W.CORES, W.GPUS))):
            # (a Wait's free count is the one at its try: a release too small to let the
            # step fit is never tried, so it froze there; said as it is now, as its pass would)
            why = W.short_of(pool, job.demand)
        out.append(Head(sid, why.text() if why is not None else None, why.cause if why is not None else None,
                        len(cls.heap) - 1, round(now - job.ready_at, 3) if job.ready_at is not None else None))
    return out


def reserved(plans: dict) -> list[Reserved]:
    """The standing reservations, oldest first."""
    return [Reserved(p.job.spec.id, p.held_cores, p.total_cores, p.shadow) for p in plans.values()]
