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
"""

from __future__ import annotations

from fleet.core import states as S
from fleet.core.resources import Capacity, Demand

PENDING = frozenset({S.WAITING, S.READY})


class PendingDemands:
    """How many waiting or ready steps hold each demand (an upper bound: a step replaced
    by a new generation may leave its count behind, which costs one width question)."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: dict[Demand, int] = {}

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

    def unfit(self, cap: Capacity) -> dict[Demand, str]:
        """The demands held by pending steps that `cap` can no longer give, with why."""
        out = {}
        for d in self.counts:
            w = cap.width(d.cores, d.cores, d.unit, d.gpus, d.memory, d.span, d.blocks)
            if isinstance(w, str):
                out[d] = w
        return out
