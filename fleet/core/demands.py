"""A step's demand, decided once per kind of step and shared.

The scheduler decides each step's width from the whole allocation when the step is
entered (Scheduler._resolve) and keys its hot tables by the resulting Demand: the
classes of ready steps, the pending counts (fleet.core.unfit), best fit's index
(fleet.core.resources), the window's queues (fleet.core.window). A suite holds few
distinct demands among many steps, so:

- the width is asked of the allocation once per kind of step (its cores, minimum,
  rank unit, GPUs, memory, span) while the allocation's shape stays the same (a new
  Capacity, after a join or a loss, asks again): the answer depends on nothing else;
- equal demands are one object, so a table lookup finds its key by identity instead
  of comparing five fields; the hash is kept on the Demand (resources.Demand).

Both are caches: a demand made elsewhere (a test, an older caller) is equal, and
hashes equally, to the shared one, so the decisions are the same either way.
"""

from __future__ import annotations

from fleet.core.resources import Capacity, Demand

LIMIT = 4096  # kinds kept at most (a suite of that many distinct kinds starts again from empty)


class Demands:
    """Widths asked of one allocation's shape, and one Demand per distinct value."""

    __slots__ = ("_cap", "_of", "_one", "_blocks")

    def __init__(self, mpi_blocks: bool = False) -> None:
        self._blocks = mpi_blocks  # MPI steps' ranks go in blocks of one count per node (fleet.core.ppnblocks)
        self._cap: Capacity | None = None
        self._of: dict[tuple, Demand | str] = {}  # kind of step -> its demand, or why it can never run
        self._one: dict[Demand, Demand] = {}      # a demand -> the shared equal one

    def of(self, cap: Capacity, spec) -> Demand | str:
        """The demand of a step of `spec` on an allocation of shape `cap`, or (a string)
        why it can never run there: what Capacity.width says, made a Demand."""
        if cap is not self._cap:
            self._cap = cap
            self._of.clear()
        unit = spec.threads if spec.mpi else 1
        blocks = self._blocks and spec.mpi and spec.span
        kind = (spec.cores, spec.min_cores, unit, spec.gpus, spec.memory, spec.span, blocks)
        got = self._of.get(kind)
        if got is None:
            w = cap.width(*kind)
            got = w if isinstance(w, str) else self.shared(
                Demand(cores=w, gpus=spec.gpus, memory=spec.memory, span=spec.span, unit=unit, blocks=blocks))
            if len(self._of) >= LIMIT:
                self._of.clear()
            self._of[kind] = got
        return got

    def shared(self, d: Demand) -> Demand:
        """The one Demand equal to `d` (d itself the first time)."""
        one = self._one.get(d)
        if one is None:
            if len(self._one) >= LIMIT:
                self._one.clear()
            one = self._one[d] = d
        return one
