"""The window keeps the order across demands (fleet.core.window).

Why. A step is handed ahead only behind a running step of its own demand, so when that
one ends its resources pass straight to it and never come back to the pool. A ready
step of another demand that comes before it in the pass's order, and that would start
on those resources if they came back, then never sees them free: the cores went from
one step of the later demand to the next until there were none left, or until the drain
(the reportscale audit: a later submission's 1-core steps, default memory, passed an
earlier one's 1-core steps with a memory figure for good, and no reservation was made:
those steps were of equal priority and younger than `--reserve-after`, which is right
when the next free core is theirs anyway, as it is with no window).

The rule. A class's first step is not handed ahead while a ready step of another class
comes before it in the order (priority, then fleet.core.ranks; submission order across
suites) and would start on what the class's soonest-ending open running step holds,
with what is free on its node (a step that runs alone, or spans nodes, does not count:
the pass and reservations see to those). That running step's resources then come back
to the pool when it ends, and the pass starts the earlier step there, as with no
window. Steps already queued are left where they are: they start first, one slot's
chain at most.

Cost. The first steps of the ready classes are kept in a heap in pass order, a lazy
one: an entry is pushed when a class's first step may have changed (Quiet.changed,
which is told of every step that comes first in its class) and checked when looked
at. Handing ahead a class looks at the first steps that come before its own, in order,
until one could take the slot, at most LOOKED_AT of them (O(k log k) for k of them; none
in the common case of one class, or of the earliest class being the one handed ahead).
So the rule keeps the order across at most LOOKED_AT earlier demands: an earlier step
with more than that many ready classes before it, none of which fits the slot, is not
seen, and may still be passed by steps handed ahead until it is reserved for
(`--reserve-after`).
"""

from __future__ import annotations

import heapq

from fleet.core.reservations import _fits_with

# The ready classes' first steps looked at, at most, before a class is handed ahead: those
# that come before it, in order. Each is checked against the slot every time the class is
# handed ahead, so without a bound a queue of wide steps of many demands ahead of a stream
# of one-core steps cost O(k log k) a hand-over (200 such classes: 5x the CPU of a
# simulation, benchmarks/README.md "The window's order across demands").
LOOKED_AT = 8


class WindowFair:
    """The order across demands (a part of fleet.core.window.Window)."""

    def _fair_init(self) -> None:
        self.firsts: list = []  # (class's first step's heap entry, class key): lazy
        self.pushed: dict = {}  # class key -> its entry pushed last

    def headed(self, cls) -> None:
        """`cls`'s first step may have changed (told by fleet.core.quiet, with the window on)."""
        if not cls.heap:
            return
        head = cls.heap[0]
        if self.pushed.get(cls.key) != head:
            self.pushed[cls.key] = head
            heapq.heappush(self.firsts, (head, cls.key))

    def _passes(self, cls, pred) -> str | None:
        """The id of a ready step of another class that comes before `cls`'s first step
        and would start on `pred`'s resources when it ends, or None."""
        firsts, classes, pool = self.firsts, self.sched._classes, self.sched.pool
        mine, key = cls.heap[0], cls.key
        kept: list = []
        seen: set = set()
        try:
            while firsts and firsts[0][0] < mine:
                entry = heapq.heappop(firsts)
                head, k = entry
                other = classes.get(k)
                if other is None or not other.heap:  # gone: pushed again when it comes back
                    if self.pushed.get(k) == head:
                        del self.pushed[k]
                    continue
                cur = other.heap[0]
                if cur != head:  # its first step started (a pass says nothing of it): the new one
                    if self.pushed.get(k) != cur:
                        self.pushed[k] = cur
                        heapq.heappush(firsts, (cur, k))
                    continue
                if k in seen:  # (pushed twice)
                    continue
                seen.add(k)
                kept.append(entry)
                if len(kept) > LOOKED_AT:  # (bounded: the module's doc)
                    return None
                d = other.demand
                if k != key and not other.exclusive and d is not None and not d.span and _fits_with(
                        pool, d, pred.placement):
                    return head[2]
        finally:
            for entry in kept:
                heapq.heappush(firsts, entry)
            if len(firsts) > 2 * len(classes) + 64:  # stale entries outnumber the live ones
                self._refirst()
        return None

    def _refirst(self) -> None:
        self.pushed = {k: c.heap[0] for k, c in self.sched._classes.items() if c.heap}
        self.firsts = [(h, k) for k, h in self.pushed.items()]
        heapq.heapify(self.firsts)
