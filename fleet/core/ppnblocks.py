"""The placement rule of a launcher that puts ranks in blocks of one ranks-per-node
count over its hosts (PALS mpiexec's --ppn): every node of a step's placement but one
holds the same number of ranks, and that one fewer. A rule the scheduler is given as
data (fleet.core.scheduler.Scheduler's `mpi_blocks`, the profile's `mpi = "pals"`):
an MPI step's demand then carries it (Demand.blocks), and the pool places it so.

Before 2026-12-07 the pool placed such a step as any other, on the nodes with the most
free cores first: on nodes of 64, 32 and 32 cores a step of 128 ranks was placed 64 +
32 + 32, which PALS cannot launch (fleet.site.mpi.render_pals), at every attempt.

Pure and cheap: what follows costs the distinct room counts, or one sort of the nodes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Hashable, Iterable, Mapping

from fleet.core.spangpus import rank_cap

if TYPE_CHECKING:
    from fleet.core.resources import Demand, Placement, Pool


def kept(counts: Iterable[int]) -> bool:
    """Whether ranks per node `counts` keep the rule (in any order)."""
    c = sorted(counts, reverse=True)
    return all(x == c[0] for x in c[:-1])


def most(rooms: Mapping[int, int]) -> int:
    """The most ranks a placement keeping the rule holds on nodes of these rooms (room
    in ranks -> how many nodes have it). With ppn p, the nodes of room p or more hold p
    each and one node of less room what it has; p is best at a room's own value."""
    best, at_least, smaller = 0, 0, sorted((r for r in rooms if r > 0), reverse=True)
    for i, r in enumerate(smaller):
        at_least += rooms[r]
        best = max(best, r * at_least + (smaller[i + 1] if i + 1 < len(smaller) else 0))
    return best


def split(rooms: Iterable[tuple[Hashable, int]], ranks: int) -> list[tuple[Hashable, int]] | None:
    """[(node, ranks)] of `ranks` ranks keeping the rule, from nodes (key, room in
    ranks), or None if they cannot hold them so. The largest ppn that does (fewest
    nodes), on the nodes with the most room, earlier ones on ties; a remainder on the
    next node (ppn blocks fill it last). Deterministic."""
    order = sorted(((k, r) for k, r in rooms if r > 0), key=lambda kr: -kr[1])  # (stable: given order on ties)
    for i, (_, room) in enumerate(order):
        nxt = order[i + 1][1] if i + 1 < len(order) else 0
        if nxt == room:
            continue  # (a room is tried with every node that has it counted)
        p, n = min(room, ranks), i + 1
        if ranks <= p * n:
            c = -(-ranks // p)
            return [(k, p) for k, _ in order[:c - 1]] + [(order[c - 1][0], ranks - p * (c - 1))]
        if ranks - p * n <= nxt:
            return [(k, p) for k, _ in order[:n]] + [(order[n][0], ranks - p * n)]
    return None


def recount(by: dict[int, int], old: int, new: int) -> None:
    """A node's room went from `old` to `new` in the histogram `by` (room -> nodes)."""
    if old == new:
        return
    if old:
        if by[old] == 1:
            del by[old]
        else:
            by[old] -= 1
    if new:
        by[new] = by.get(new, 0) + 1


def short(d: Demand, by_cores: Mapping[int, int], by_pair: Mapping[tuple[int, int], int]) -> bool:
    """Whether the nodes cannot hold d's ranks in blocks now, known from the pool's
    histograms (fleet.core.resources.Pool._span_short): the whole units each node holds
    with its memory share (cores -> nodes), with GPUs the (cores, free GPUs) pairs,
    each then holding its ranks' share of the GPUs (spangpus.rank_cap). Exactly when
    place() below finds nothing."""
    ranks = d.cores // d.unit
    rooms: dict[int, int] = {}
    if d.gpus:
        for (t, g), k in by_pair.items():
            r = rank_cap(t // d.unit, g, ranks, d.gpus)
            rooms[r] = rooms.get(r, 0) + k
    else:
        for t, k in by_cores.items():
            rooms[t // d.unit] = rooms.get(t // d.unit, 0) + k
    return most(rooms) < ranks


def place(pool: Pool, d: Demand) -> Placement | None:
    """d's placement keeping the rule, where the pool's own (most free cores first) does
    not: from every live node's room (with GPUs, its ranks' share of them), split().
    Scans the live nodes: only for a step of a PALS fleet whose usual placement breaks
    the rule (unequal free cores), never more than once a placement, as short() knows
    beforehand when it would find none."""
    from fleet.core.spangpus import split as share_gpus
    unit, ranks = d.unit, d.cores // d.unit
    nodes = pool._nodes
    rooms = []
    for n in nodes:
        t = (len(n.free_cores) // unit) * unit if n.alive else 0
        while t > 0 and n.free_mem < n.mem_for(t, d):
            t -= unit
        g = len(n.free_gpus)
        r = rank_cap(t // unit, g, ranks, d.gpus) if d.gpus else t // unit
        if r > 0:
            rooms.append((n.idx, r, g))
    parts = split(((i, r) for i, r, _ in rooms), ranks)
    if parts is None:
        return None
    free = {i: g for i, _, g in rooms}
    # (share_gpus gives each node its ranks: they are within its GPUs' rank_cap)
    got = share_gpus(((i, r, free[i]) for i, r in parts), ranks, d.gpus) if d.gpus else {i: (r, 0) for i, r in parts}
    return tuple(pool._take(nodes[i], r * unit, g, nodes[i].mem_for(r * unit, d)) for i, (r, g) in sorted(got.items()))


def width(units: Mapping[tuple[int, int, int], int], w: int, min_cores: int, unit: int, gpus: int,
          memory: int | None) -> int | str:
    """The widest of widths `w` down to `min_cores` whose ranks nodes of these shapes
    ((cores, GPUs, memory) -> nodes: fleet.core.resources.Capacity) hold in blocks, or
    why none: what a node holds shrinks with the width (its share of the memory and the
    GPUs), so no width between what they hold and `w` can be held either."""
    first = w // unit
    while True:
        ranks = w // unit
        rooms: dict[int, int] = {}
        for (c, g, m), count in units.items():
            r = c // unit if not memory else min(c // unit, (m * w // memory) // unit)
            r = rank_cap(r, g, ranks, gpus) if gpus else r
            rooms[r] = rooms.get(r, 0) + count
        held = most(rooms)
        if held >= ranks:
            return w
        if held * unit < min_cores or held == 0:
            least = -(-min_cores // unit)
            return (f"needs {'at least ' if least < first else ''}{least} ranks placed as PALS mpiexec places "
                    f"them, in blocks of one count per node (--ppn: every node but one holding as many ranks "
                    f"as the others, that one fewer); the nodes hold {held} so")
        w = held * unit
