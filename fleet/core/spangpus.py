"""Placing a step that spans nodes and asks for GPUs (fleet.core.resources.Pool.place,
and a reservation's plan, fleet.core.shadow).

A rarer kind of step than the rest, and the only placement that scans the live nodes,
so it lives apart from the pool's per-step paths.

The rule: a node's GPUs go with its ranks. A node takes r of the step's R ranks only
if its free GPUs hold its share G*r/R of the step's G GPUs, and it gets that share
rounded (the largest shortfalls first; at least one each when G is at least the number
of nodes used). So every node with ranks of a step that has a GPU per node or more gets
GPUs, and a node without free GPUs takes none of its ranks. (Before 2026-12-06 all the
GPUs could go to one node and the ranks on the others got none.)
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Hashable, Iterable, Iterator

if TYPE_CHECKING:
    from fleet.core.resources import Demand, Placement, Pool, _Node


def rank_cap(room: int, free_gpus: int, ranks: int, gpus: int) -> int:
    """The most of a step's `ranks` a node with room for `room` ranks and `free_gpus`
    free GPUs may take: those whose share of the step's `gpus` its GPUs hold."""
    return min(room, free_gpus * ranks // gpus)


def split(nodes: Iterable[tuple[Hashable, int, int]], ranks: int, gpus: int) -> dict | None:
    """{node: (ranks, GPUs)} of a spanning step with `ranks` ranks and `gpus` GPUs, from
    `nodes` (key, room in ranks, free GPUs) taken in the order given, each to its
    rank_cap; None if they do not hold all the ranks. Deterministic."""
    take: dict = {}
    left = ranks
    for key, room, free in nodes:
        r = min(rank_cap(room, free, ranks, gpus), left)
        if r > 0:
            take[key] = r
            left -= r
            if not left:
                break
    if left:
        return None
    # Each node's share is G*r/R; one GPU each first when there are GPUs enough, then
    # the rest one at a time to the node furthest below its share (earlier on ties). A
    # node is given one only while below its share, so never more than ceil(share),
    # which its free GPUs hold (rank_cap).
    keys = list(take)
    got = [1 if gpus >= len(keys) else 0 for _ in keys]
    short = [(-(gpus * take[k] - got[i] * ranks), i) for i, k in enumerate(keys)]
    heapq.heapify(short)
    for _ in range(gpus - sum(got)):
        _, i = heapq.heappop(short)
        got[i] += 1
        heapq.heappush(short, (-(gpus * take[keys[i]] - got[i] * ranks), i))
    return {k: (take[k], got[i]) for i, k in enumerate(keys)}


def place_span_gpus(pool: Pool, d: Demand) -> Placement | None:
    """A spanning step with GPUs: its ranks (`unit` cores each) on the nodes that hold
    the most of them with their share of its GPUs (split), most free GPUs next, join
    order on ties, so it touches few nodes. Scans the live nodes: for this rarer kind
    of step only."""
    from fleet.core.ppnblocks import kept, place
    unit = d.unit
    ranks = d.cores // unit

    def room(node: _Node) -> int:
        """Ranks the node holds with its free cores and memory."""
        t = (len(node.free_cores) // unit) * unit
        while t > 0 and node.free_mem < node.mem_for(t, d):
            t -= unit
        return t // unit

    parts = split(_in_order(pool, d, ranks, room), ranks, d.gpus)
    if parts is None:
        return None
    if d.blocks and not kept(r for r, _ in parts.values()):  # (a PALS step: fleet.core.ppnblocks)
        return place(pool, d)
    nodes = pool._nodes
    return tuple(pool._take(nodes[i], r * unit, g, nodes[i].mem_for(r * unit, d)) for i, (r, g) in sorted(parts.items()))


_B = 1 << 30  # above any node's ranks held, GPUs or index: the order's key packed in one int


def _in_order(pool: Pool, d: Demand, ranks: int, room) -> Iterator[tuple[int, int, int]]:
    """(node index, ranks it holds, free GPUs) of the live nodes with free GPUs, the most
    ranks held beside their GPU share first (rank_cap), most free GPUs next, join order
    on ties: the order of a sort by that key, made lazily. A node's exact room (its
    memory loop) is found only when its bound (free cores alone, which memory can only
    lower) comes first, so a placement on 10,000 nodes computes it for the few it takes,
    not for every node; the key is one int a node (ranks held, GPUs, index packed), the
    heap's entries no tuples."""
    unit, gpus, nodes = d.unit, d.gpus, pool._nodes
    heap = [((_B - min(c, g * ranks // gpus)) << 62) | ((_B - g) << 31) | n.idx  # (rank_cap, spelled out)
            for n in nodes if n.alive and n.free_gpus
            for c in [len(n.free_cores) // unit] if c
            for g in [len(n.free_gpus)]]
    heapq.heapify(heap)
    rooms: dict[int, int] = {}  # a node's exact room once found: its entry in the heap is then exact
    mask = (1 << 31) - 1
    while heap:
        k = heapq.heappop(heap)
        i, g = k & mask, _B - ((k >> 31) & mask)
        r = rooms.get(i)
        if r is not None:
            yield i, r, g
        else:
            r = rooms[i] = room(nodes[i])
            heapq.heappush(heap, ((_B - rank_cap(r, g, ranks, gpus)) << 62) | ((_B - g) << 31) | i)
