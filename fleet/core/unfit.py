"""The pending steps a lost node leaves with nowhere to run.

A step's width is decided once, from the whole allocation (Scheduler._resolve); when
a node is lost, a waiting or ready step whose demand no longer fits what is left is
reported unrunnable. Judging each pending step at every loss cost O(pending steps)
per lost node: at 1,000,000 steps and 10,000 nodes a rack's loss held the loop for
minutes. The answer depends only on the demand, so the scheduler keeps how many
pending steps hold each demand (`PendingDemands`, moved as steps change state) and a
loss asks once per distinct demand. Only when some demand no longer fits is the step
table walked (once per such loss, in submission order, so the decisions are the same
as a walk of every step); a demand is dropped from the table once no step holds it.

A step away from the pending set at the loss is not judged then: a parent waiting for
its children (SUSPENDED), one running (it goes on in stages, or is retried), one
another fleet runs (ELSEWHERE). Once a node has been lost, such a step that is ready
again is judged at the next pass (`again`, `judge`): its demand is asked of the
allocation once per demand while its shape stays the same, and one that no longer fits
is Unrunnable as a pending one is at the loss, its dependents blocked. (Before
2026-12-07 it was ready for ever: nothing started it, and the run never finished.)
"""

from __future__ import annotations

from fleet.core import states as S
from fleet.core.decisions import Unrunnable
from fleet.core.jobs import take_out
from fleet.core.resources import Capacity, Demand

PENDING = frozenset({S.WAITING, S.READY})


class PendingDemands:
    """How many waiting or ready steps hold each demand (an upper bound: a step replaced
    by a new generation may leave its count behind, which costs one width question)."""

    __slots__ = ("counts", "lost", "again", "_cap", "_why")

    def __init__(self) -> None:
        self.counts: dict[Demand, int] = {}
        self.lost: str | None = None  # the last node lost (for the words), None: none yet
        self.again: list = []  # steps ready again since the last pass, after a loss (`judge`)
        self._cap: Capacity | None = None  # the shape `_why` was asked of
        self._why: dict[Demand, str | None] = {}  # demand -> why `_cap` cannot give it (None: it can)

    def add(self, d: Demand) -> None:
        self.counts[d] = self.counts.get(d, 0) + 1

    def moved(self, d: Demand, old: str, new: str) -> None:
        """A step holding `d` went from state `old` to `new`."""
        if (old in PENDING) != (new in PENDING):
            if new in PENDING:
                self.counts[d] = self.counts.get(d, 0) + 1
            else:
                n = self.counts.get(d, 0) - 1
                if n > 0:
                    self.counts[d] = n
                else:
                    self.counts.pop(d, None)

    def back(self, job) -> None:
        """`job` is ready again from outside the pending set (resumed, going on, retried,
        reclaimed): judged at the next pass if a node was ever lost (else it fits still)."""
        if self.lost is not None:
            self.again.append(job)

    def refused(self, cap: Capacity, d: Demand) -> str | None:
        """Why `cap` cannot give `d` (None: it can); asked once per demand per shape."""
        if cap is not self._cap:
            self._cap, self._why = cap, {}
        if d not in self._why:
            w = cap.width(d.cores, d.cores, d.unit, d.gpus, d.memory, d.span, d.blocks)
            self._why[d] = w if isinstance(w, str) else None
        return self._why[d]

    def unfit(self, cap: Capacity) -> dict[Demand, str]:
        """The demands held by pending steps that `cap` can no longer give, with why."""
        out = {}
        for d in self.counts:
            w = cap.width(d.cores, d.cores, d.unit, d.gpus, d.memory, d.span, d.blocks)
            if isinstance(w, str):
                out[d] = w
        return out


def judge(sched, out: list) -> None:
    """Before a pass: the steps ready again since the last one (PendingDemands.back)
    whose demand the allocation can no longer give are Unrunnable, as at a loss
    (fleet.core.fencing), their dependents blocked. Not once drained (as there)."""
    pending = sched._pending
    again, pending.again = pending.again, []
    if sched.deadline.drained:
        return
    cap = sched.capacity()
    gone = [j for j in again if j.state == S.READY and j.demand is not None
            and pending.refused(cap, j.demand) is not None]
    if not gone:
        return
    take_out(sched._classes, gone, sched._quiet.changed)
    for job in gone:
        if job.state != S.READY:  # (blocked meanwhile by one before it: said once, as Blocked)
            continue
        sched._set(job, "impossible")
        out.append(Unrunnable(job.spec.id, f"after losing {pending.lost}: {pending.refused(cap, job.demand)}",
                              after_loss=True))
        sched._block_descendants(job, job.spec.id, out)
