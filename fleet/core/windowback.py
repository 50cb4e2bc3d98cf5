"""Taking a step handed ahead back from its node (fleet.core.window), so that it is not
stuck behind a running step while cores free elsewhere first.

A queued step waits for its predecessor, whose end may be unknown (no estimate, no
earlier run) or later than expected. When a pass leaves cores of its demand free (a
step ended with nothing queued behind it, a node joined) and no ready step of that
demand waits for them, the queued step whose predecessor is expected to end LAST
(unknown: last of all; ties in queue order) is taken back: a Withdraw, which its node
answers by dropping it unstarted (Dropped: it is ready again, its attempt unused, an
Unqueued, and the next pass starts it on the free cores) or not at all, when it has
started it already because its predecessor ended first (its reports say so, and it runs
where it was queued). The node decides which, so the step runs once either way.

Bounds, so that this stays cheap at 10,000 nodes and cannot go back and forth:
- taken back only as many at a time (asked, not yet answered) per demand as the free
  cores (and GPUs) hold steps of it, and only where the pool can place one now
  (Pool.fits); a pass with no free core costs nothing;
- the queued steps that may be taken back are a heap per demand (`_Lazy`), keyed by
  their predecessor's expected end, so a pass pops what it takes back, not a scan; the
  heaps are kept only from the first pass that could take one back (a run's tail) until
  nothing is queued: before, a queued step costs a count per demand;
- a step taken back once is not taken back again, nor queued again behind a running
  step whose end is unknown (it waits in the ready set for free cores instead).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fleet.core.windowpick import _Lazy


@dataclass(frozen=True)
class Withdraw:
    """Take this queued attempt back from its node unless the node has started it (its
    predecessor ended first): dropped there, it is ready again (Unqueued)."""

    step: str
    attempt: int
    reason: str


class WindowBack:
    """The window's taking back of queued steps (a part of fleet.core.window.Window)."""

    def _back_init(self) -> None:
        self.loose: dict = {}  # demand -> _Lazy of the queued steps that may be taken back
        self.recalled: dict[str, str] = {}  # taken back, the node's answer still to come -> why
        self.recalling: dict = {}  # demand -> how many of it are in `recalled`
        self.once: set[str] = set()  # taken back: not again, nor behind an unknown end
        self.kept: set[str] = set()  # queued again after being taken back: never taken back
        self.queued_of: dict = {}  # demand -> how many steps of it are queued
        # `loose` is kept only from the first pass that finds cores of a queued demand free
        # with no ready step of it (the tail of a run), until nothing is queued: before,
        # a step queued costs a count, not a heap entry (the million-step benchmark's path).
        self.tracking = False

    def _loosen(self, job, pred) -> None:
        """`job` was queued behind `pred`: it may be taken back (unless it was once)."""
        sid = job.spec.id
        self.queued_of[job.demand] = self.queued_of.get(job.demand, 0) + 1
        self._ordered(job)  # its place in the order (fleet.core.windoworder)
        if sid in self.once:
            self.once.discard(sid)
            self.kept.add(sid)
            return
        if self.tracking:
            self._put(job, pred)

    def _put(self, job, pred) -> None:
        loose = self.loose.get(job.demand)
        if loose is None:
            loose = self.loose[job.demand] = _Lazy()
        self._n += 1
        loose.put((-self.ends.get(pred.spec.id, math.inf), self._n), job.spec.id, job)

    def _let_go(self, job) -> None:
        """`job` is no longer queued (it began, or left the window)."""
        sid = job.spec.id
        left = self.queued_of[job.demand] - 1
        if left:
            self.queued_of[job.demand] = left
        else:
            del self.queued_of[job.demand]
        self._unordered(job, not left)
        if self.kept:
            self.kept.discard(sid)
        loose = self.loose.get(job.demand) if self.loose else None
        if loose is not None and loose.drop(sid) and not loose:
            del self.loose[job.demand]
        if self.recalled and self.recalled.pop(sid, None) is not None:
            counts = self.yielding if sid in self.yielded else self.recalling  # (fleet.core.windoworder)
            left = counts[job.demand] - 1
            if left:
                counts[job.demand] = left
            else:
                del counts[job.demand]
        if self.tracking and not self.queued_of:
            self.tracking = False
            self.loose.clear()

    def _track(self) -> None:
        """Begin keeping `loose`: every queued step that may be taken back, in queue order."""
        self.tracking = True
        for sid, pred in self.behind.items():
            if sid not in self.kept and sid not in self.next:  # (a chain's tail only: fleet.core.windowchain)
                self._put(self.next[pred.spec.id], pred)

    def _behind_ok(self, job, pred) -> bool:
        """Whether `job` may be queued behind `pred`: expected to end before the drain
        point counted from `pred`'s expected end (unknown: it is not known to), and not
        behind an unknown end once it has been taken back."""
        end = self.ends.get(pred.spec.id, math.inf)
        if end == math.inf and job.spec.id in self.once:
            return False
        return self.sched.deadline.in_time(job.spec, end, self.sched._now)

    def _recall(self, out: list) -> None:
        """After a pass: take back queued steps where cores of their demand are free and no
        ready step of that demand waits for them (see the module's docstring)."""
        sched = self.sched
        pool = sched.pool
        if not pool.free_cores:
            return
        if not self.tracking:
            if not any((d,) not in sched._classes and pool.fits(d) for d in self.queued_of):
                return
            self._track()
        for demand in list(self.loose):
            if (demand,) in sched._classes or not pool.fits(demand):
                continue  # its ready steps come first (the pass had no room for them), or no room
            room = pool.free_cores // demand.cores
            if demand.gpus:
                room = min(room, pool.free_gpus // demand.gpus)
            room -= self.recalling.get(demand, 0)
            loose = self.loose[demand]
            while room > 0 and loose:
                _, job = loose.pop()
                if job.spec.id in self.recalled:  # taken back for the order already (fleet.core.windoworder)
                    continue
                pred = self.behind[job.spec.id]
                if not pool.has(pred.placement[0].node):  # lost, held (fleet.core.fencing): unqueued at its end
                    continue
                why = (f"taken back from {pred.placement[0].node}: cores came free elsewhere before "
                       f"{pred.spec.id!r} ended")
                self.recalled[job.spec.id] = why
                self._no_more(job)
                self.recalling[demand] = self.recalling.get(demand, 0) + 1
                out.append(Withdraw(job.spec.id, job.attempt, why))
                room -= 1
            if not loose:
                del self.loose[demand]
