"""A log of node indices read from absolute positions, whose old entries are dropped.

The pool logs every node whose free resources grew (`releases`) or changed at all
(`_changed`), and its readers remember how far they have read: a blocked class of
demand remembers the releases it has already seen; each kind of demand's index of the
nodes that can hold it remembers the changes it has taken in. Kept whole, the two logs
gain an entry per step and per release for the fleet's whole life (about 16 bytes a
step each), so a long fleet's logs outgrow everything else the core keeps per node.

Positions are absolute (`end()`), so dropping old entries moves no reader. A reader
that has fallen behind the entries still kept gets None from `since()` and does what
it already does when too far behind: re-tries its demand, or rebuilds its index from
every node. Dropping keeps at least `keep` entries, and callers pass a `keep` above the
number of nodes, so a reader that is at most that far behind (the readers' own
rebuild threshold) always finds its entries.
"""

from __future__ import annotations


class NodeLog(list):
    """Node indices in the order logged; `base` is the position of the first kept."""

    __slots__ = ("base",)

    def __init__(self) -> None:
        super().__init__()
        self.base = 0

    def end(self) -> int:
        """The position the next entry will have."""
        return self.base + len(self)

    def since(self, pos: int) -> list[int] | None:
        """The entries from position `pos` on; None if some of them were dropped."""
        if pos < self.base:
            return None
        return self[pos - self.base:]

    def trim(self, keep: int) -> None:
        """Drop all but the last `keep` entries."""
        drop = len(self) - keep
        if drop > 0:
            del self[:drop]
            self.base += drop
