"""A reservation's plan: when the resources a step needs are expected back, and where
(fleet.core.reservations, whose docstring describes the plan; fleet.core.lookahead's
plans ahead use the same walk).

The running steps are walked in order of their expected end, their resources added
back to a projection of the nodes, until the demand fits the projection: that end is
the shadow time. Deterministic: (end, start order), then node join order.
"""

from __future__ import annotations

import heapq
import math

from fleet.core import ppnblocks
from fleet.core.resources import Demand, NodeSpec, Pool
from fleet.core.spangpus import rank_cap, split


def mem_for(spec: NodeSpec, cores: int, d: Demand) -> int:
    """The memory a node gives `cores` of d (as fleet.core.resources places it)."""
    if d.memory is None:
        return spec.memory * cores // len(spec.cores) if spec.cores else 0
    return -(-d.memory * cores // d.cores)


def walk(d: Demand, pool: Pool, ends: list, job_at, owed: dict, specs: dict, order: dict, queued_end=None):
    """The shadow time and per-node amounts of d's reservation, or None if it would
    not fit even once every running step has ended. What older reservations are still
    owed on a node goes to them first (`owed`). `specs`: each live node's NodeSpec by
    name; `order`: its join order. The index `ends` is walked in place (no copy: a plan
    costs what it walks) and its live entries are put back. `queued_end(sid, end)`: a
    running step with a step queued behind it on its node (fleet.core.window) gives its
    resources to that one, so they come back only when that one ends."""

    def now_free(name: str) -> list[int]:
        c, g, m = pool.free_on(name)
        o = owed.get(name)
        return [c - o[0], g - o[1], m - o[2]] if o else [c, g, m]

    # A spanning demand starts from every node with at least a unit free now; the others
    # (most of a busy fleet) add nothing until the walk frees something on them, and
    # enter the projection then, as a one-node demand's nodes all do.
    free_on = pool.free_on
    proj = {name: now_free(name) for name in specs if free_on(name)[0] >= d.unit} if d.span else {}
    popped: list = []
    try:
        return _walk_ends(d, ends, job_at, specs, order, now_free, popped, proj, queued_end or (lambda sid, end: None))
    finally:
        for e in popped:
            heapq.heappush(ends, e)


def _walk_ends(d: Demand, ends: list, job_at, specs: dict, order: dict, now_free, popped: list, proj: dict,
               queued_end):
    freed: dict[str, int] = {}
    room = _Room(d, specs, proj) if d.span else None
    tries = 0
    later: list = []  # (end, start number, step, job): queued steps, ending on their predecessors' resources
    while ends or later:
        if later and (not ends or later[0][:3] < ends[0]):
            end, _, _, job = heapq.heappop(later)
        else:
            end, no, sid = e = heapq.heappop(ends)
            job = job_at(sid, no)
            if job is None:
                continue  # a step that ended: its entry is dropped for good
            popped.append(e)
            chained = queued_end(sid, end)
            if chained is not None:  # its resources pass to the step queued behind it
                heapq.heappush(later, (chained[0], no, sid, chained[1]))
                continue
        for slot in job.placement:
            if slot.node not in specs:
                continue
            p = proj.get(slot.node)
            if p is None:
                p = proj[slot.node] = now_free(slot.node)
            if room:
                room.drop(slot.node)
            p[0] += len(slot.cores)
            p[1] += len(slot.gpus)
            p[2] += slot.memory
            freed[slot.node] = freed.get(slot.node, 0) + len(slot.cores)
            if room:
                room.add(slot.node)
            elif _fits_one(d, specs[slot.node], p):
                return _shadow(end), {slot.node: (d.cores, d.gpus, mem_for(specs[slot.node], d.cores, d))}
        if room and room.enough() and tries < _TRIES:
            tries += 1
            want = room.choose(freed, order)
            if want is not None:
                return _shadow(end), want
    return None


_TRIES = 16  # placements tried on the projection per plan (each sorts the nodes)


def _shadow(end: float) -> float | None:
    return None if end == math.inf else end


def _fits_one(d: Demand, spec: NodeSpec, p: list[int]) -> bool:
    return p[0] >= d.cores and p[1] >= d.gpus and p[2] >= mem_for(spec, d.cores, d)


class _Room:
    """For a spanning demand: the whole units (with their memory share) and GPUs the
    projected nodes hold, kept as totals while the walk adds to the projection."""

    def __init__(self, d: Demand, specs: dict[str, NodeSpec], proj: dict[str, list[int]]):
        self.d, self.specs, self.proj = d, specs, proj
        self.units: dict[str, int] = {}
        self.cores = self.gpus = 0
        # With GPUs, the ranks each node holds beside its share of the GPUs (spangpus.rank_cap)
        # and their sum: enough exactly when choose's split succeeds, so that a walk ends
        # where a plan exists (totals alone let choose fail, and the walk run to its end).
        self.ranks = d.cores // d.unit
        self.caps: dict[str, int] = {}
        self.held = 0
        for name in proj:
            self.add(name)

    def _usable(self, name: str) -> int:
        d, p, spec = self.d, self.proj[name], self.specs[name]
        t = (max(0, p[0]) // d.unit) * d.unit
        while t > 0 and p[2] < mem_for(spec, t, d):
            t -= d.unit
        return t

    def add(self, name: str) -> None:
        t = self._usable(name)
        self.units[name] = t
        self.cores += t
        g = max(0, self.proj[name][1]) if t else 0
        self.gpus += g
        if self.d.gpus and g:
            cap = self.caps[name] = rank_cap(t // self.d.unit, g, self.ranks, self.d.gpus)
            self.held += cap

    def drop(self, name: str) -> None:
        t = self.units.pop(name, 0)
        self.cores -= t
        self.gpus -= max(0, self.proj[name][1]) if t else 0
        self.held -= self.caps.pop(name, 0)

    def enough(self) -> bool:
        if self.d.gpus:
            return self.held >= self.ranks
        return self.cores >= self.d.cores

    def choose(self, freed: dict[str, int], order: dict[str, int]) -> dict | None:
        """Per node (cores, GPUs, memory), as the pool places a spanning step: with GPUs,
        each node's ranks with its share of them (fleet.core.spangpus.split), from the
        nodes the walk freed most on, then those that hold the most ranks so; without,
        cores from the nodes the walk freed most on, then those with the most room; join
        order breaks ties."""
        d, proj, units = self.d, self.proj, self.units
        cand = [n for n, t in units.items() if t]
        if d.gpus:
            ranks = d.cores // d.unit
            cand = [n for n in cand if proj[n][1] > 0]
            cand.sort(key=lambda n: (-freed.get(n, 0), -rank_cap(units[n] // d.unit, proj[n][1], ranks, d.gpus),
                                     -proj[n][1], order[n]))
            parts = split(((n, units[n] // d.unit, proj[n][1]) for n in cand), ranks, d.gpus)
            if parts is not None and d.blocks and not ppnblocks.kept(r for r, _ in parts.values()):
                caps = ppnblocks.split(((n, rank_cap(units[n] // d.unit, proj[n][1], ranks, d.gpus)) for n in cand),
                                       ranks)
                parts = None if caps is None else split(((n, r, proj[n][1]) for n, r in caps), ranks, d.gpus)
            if parts is None:
                return None
            return {n: (r * d.unit, g, mem_for(self.specs[n], r * d.unit, d)) for n, (r, g) in parts.items()}
        take: dict[str, int] = {}
        need = d.cores
        cand.sort(key=lambda n: (-freed.get(n, 0), -units[n], order[n]))
        for n in cand:
            if need == 0:
                break
            extra = min(units[n], need)
            take[n] = extra
            need -= extra
        if need:
            return None
        if d.blocks and not ppnblocks.kept(take.values()):  # (a PALS step's ranks: fleet.core.ppnblocks)
            got = ppnblocks.split(((n, units[n] // d.unit) for n in cand), d.cores // d.unit)
            if got is None:
                return None
            take = {n: r * d.unit for n, r in got}
        return {n: (t, 0, mem_for(self.specs[n], t, d)) for n, t in take.items()}
