"""Placing a step that spans nodes and asks for GPUs (fleet.core.resources.Pool.place).

A rarer kind of step than the rest, and the only placement that scans the live nodes,
so it lives apart from the pool's per-step paths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleet.core.resources import Demand, Placement, Pool, _Node


def place_span_gpus(pool: Pool, d: Demand) -> Placement | None:
    """A spanning step with GPUs takes them from nodes that hold some of its cores:
    first the nodes with the most free GPUs, one rank (`unit` cores) on each, until
    its GPUs are covered (never more nodes than it has ranks); then each of those
    nodes is topped up toward its share of the cores (in proportion to its GPUs);
    the cores still missing come from those nodes, then from the others with the
    most free cores. Scans the live nodes: for this rarer kind of step only."""
    unit = d.unit

    def room(node: _Node, now: int) -> int:
        """Cores (whole units) the node can add to `now` with its free cores and memory."""
        t = (len(node.free_cores) // unit) * unit
        while t > now and node.free_mem < node.mem_for(t, d):
            t -= unit
        return t - now

    live = [n for n in pool._nodes if n.alive and len(n.free_cores) >= unit]
    take: dict[int, int] = {}
    gpus: dict[int, int] = {}
    left = d.gpus
    for node in sorted((n for n in live if n.free_gpus),
                       key=lambda n: (-len(n.free_gpus), -len(n.free_cores), n.idx)):
        if left == 0 or len(take) == d.cores // unit:
            break
        if room(node, 0) < unit:
            continue
        take[node.idx], gpus[node.idx] = unit, min(len(node.free_gpus), left)
        left -= gpus[node.idx]
    if left:
        return None
    need = d.cores - unit * len(take)
    for i in list(take):
        share = -(-d.cores * gpus[i] // d.gpus)   # its part of the cores, rounded up...
        share = -(-share // unit) * unit             # ...to whole ranks
        extra = min(max(0, share - take[i]), room(pool._nodes[i], take[i]), need)
        take[i] += extra
        need -= extra
    for node in sorted(live, key=lambda n: (n.idx not in take, -len(n.free_cores), n.idx)):
        if need == 0:
            break
        extra = min(room(node, take.get(node.idx, 0)), need)
        if extra > 0:
            take[node.idx] = take.get(node.idx, 0) + extra
            need -= extra
    if need:
        return None
    return tuple(pool._take(pool._nodes[i], t, gpus.get(i, 0), pool._nodes[i].mem_for(t, d))
                 for i, t in sorted(take.items()))
