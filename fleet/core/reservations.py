"""Fairness without waste: one reservation at a time, and EASY backfill around it.

Theory of operation. A greedy pass starts whatever fits, so a wide step (or one of
high priority) can wait for ever behind a stream of narrow ones that each fit into
what the last one freed. When such a step cannot start, and it is *eligible* - its
priority is higher than that of another kind of ready step, or it has been ready for
longer than `reserve_after` - the scheduler makes a reservation for it, as Slurm's
EASY backfill does for the head of its queue:

* The plan. Running steps are walked in order of their expected end (start +
  :func:`expected_s`), their resources added back to a projection of the nodes, until
  the step fits the projection. That end is the reservation's *shadow time*; the
  cores, GPUs and memory the step would take then, node by node, are reserved
  (resources freed by the walk are preferred, so that little of what is free now is
  kept idle).
* Holds. What is reserved and free is taken out of the pool at once (a *hold*); what
  is reserved and still busy is taken the moment the running step releases it. When
  everything reserved is held, the reserved step starts on exactly that. It starts
  earlier if it fits elsewhere (the holds are then given back).
* Backfill. Every other step places as before, on what is not held, so it never
  takes what the reserved step needs. A step whose own expected duration is known
  and ends by the shadow time may also use held resources (they are lent and taken
  back as it ends).

Steps without an estimate (the rule): a running step with no estimate is taken to end
after every step that has one (in start order); if the reserved step needs its
resources, the shadow time is unknown, and then no step borrows held resources. A
waiting step with no estimate never borrows held resources. So a step with no
estimate never delays the reservation beyond what it waits for anyway.

One reservation at a time (the first eligible step in the pass's order), kept until
its step starts, leaves the ready steps (cancelled), a node is lost, or its shadow
time passes with the step still short (the estimates were wrong): then it is planned
again. Everything is ordered by (end, start order) and node join order: deterministic.
Cost: a pass pays O(1) more per class, plus the hold bookkeeping of the reserved
nodes when a step ends on one; a plan walks the running steps once
(O(running + walked x log running + nodes)) and is made once per reservation.
"""

from __future__ import annotations

import heapq
import math

from fleet.core import states as S
from fleet.core import waits as W
from fleet.core.resources import Demand, NodeSpec, Placement, Pool, Slot

RESERVE_AFTER_S = 600.0  # the default: a ready step older than this gets a reservation


def expected_s(job) -> float | None:
    """How long the step is expected to run, or None if nobody said (its `estimate`).
    The one place the reservations learn a step's duration."""
    return job.spec.estimate


def _mem_for(spec: NodeSpec, cores: int, d: Demand) -> int:
    """The memory a node gives `cores` of d (as fleet.core.resources places it)."""
    if d.memory is None:
        return spec.memory * cores // len(spec.cores) if spec.cores else 0
    return -(-d.memory * cores // d.cores)


class _Plan:
    """The one reservation: who, until when, what on which node, and what is held."""

    __slots__ = ("job", "key", "order", "shadow", "want", "need", "held", "short", "total_cores")

    def __init__(self, job, key, shadow: float | None, want: dict[str, tuple[int, int, int]], total: int):
        self.job, self.key, self.order = job, key, (job.prio, job.seq)
        self.shadow = shadow  # None: unknown (a running step it waits for has no estimate)
        self.want = want      # node -> (cores, gpus, memory) the step takes there
        self.need = {n: list(v) for n, v in want.items()}  # what is still to be held
        self.held: dict[str, list[Slot]] = {n: [] for n in want}
        self.short = len(want)  # nodes whose hold is not complete
        self.total_cores = total


class Reservations:
    """The scheduler's reservation (at most one) and the index of running steps' ends."""

    def __init__(self, reserve_after: float | None = RESERVE_AFTER_S):
        self.enabled = reserve_after is not None
        self.reserve_after = reserve_after if reserve_after is not None else math.inf
        self.plan: _Plan | None = None
        self.lowest = 0  # the lowest priority (largest number) among the last pass's heads
        self._ends: list[tuple[float, int, str]] = []  # (expected end, start number, step)
        self._live: dict[str, tuple[int, object]] = {}  # running step -> (start number, job)
        self._starts = 0

    # -- the running steps ---------------------------------------------------------------
    def started(self, job, now: float) -> None:
        """A step started: index its expected end."""
        if not self.enabled:
            return
        self._starts += 1
        e = expected_s(job)
        heapq.heappush(self._ends, (now + e if e is not None else math.inf, self._starts, job.spec.id))
        self._live[job.spec.id] = (self._starts, job)
        if len(self._ends) > 2 * len(self._live) + 64:
            self._compact()

    def stopped(self, job, pool: Pool) -> None:
        """A step ended and its placement went back to the pool: hold what the
        reservation still needs of it."""
        if not self.enabled:
            return
        self._live.pop(job.spec.id, None)
        p = self.plan
        if p is not None and p.short:
            for slot in job.placement:
                if slot.node in p.need:
                    self._top_up(p, slot.node, pool)

    # -- the pass --------------------------------------------------------------------------
    def begin(self, pool: Pool, now: float, heads) -> None:
        """Before a pass: drop a reservation that no longer stands; note the priorities."""
        p = self.plan
        # Dropped (and planned again when its step next fails) if its step is no longer
        # ready, a node was lost, or it is still short past its time or with nothing
        # left running to release what it lacks (the estimates were wrong).
        if p is not None and (p.job.state != S.READY or pool.total_cores != p.total_cores
                              or (p.short and (not self._live or (p.shadow is not None and now > p.shadow)))):
            self.drop(pool)
        self.lowest = max((h[0][0] for h in heads), default=0)

    def revisit(self, cls, now: float, jobs) -> bool:
        """Whether a class that is blocked must be tried anyway: it holds the reserved
        step (or does not yet say it waits for it), or no reservation stands and its first
        step has become old enough for one (age, unlike a release, does not make a
        blocked class be tried again; a step of higher priority is tried, and gets its
        reservation, when it first fails)."""
        if not self.enabled or cls.exclusive:
            return False
        p = self.plan
        head = jobs[cls.heap[0][2]]
        if p is not None:  # and once more each, to say they are held back by it
            return cls.key == p.key or head.why is None or head.why.cause != W.RESERVED
        ready_at = head.ready_at
        return ready_at is not None and now - ready_at >= self.reserve_after

    def place(self, job, key, pool: Pool, now: float, alone: bool = False) -> Placement | None:
        """Place a step: the reserved one on its holds once complete (else anywhere it
        fits, giving the holds back), a short one on borrowed holds, others as ever.
        A step that runs alone (it comes first, and the fleet drains for it) ends the
        reservation: the holds would otherwise keep it from ever starting."""
        p = self.plan
        if alone and p is not None:
            self.drop(pool)
            p = None
        if p is None:
            return pool.place(job.demand)
        if key == p.key:
            p.job = job  # the first of its kind: the same demand, and ahead of it in order
            if not p.short:
                self.plan = None
                return tuple(_merged(n, p.held[n]) for n in p.want)
            got = pool.place(job.demand)
            if got is not None:
                self.drop(pool)
            return got
        got = pool.place(job.demand)
        if got is None and self._ends_by_shadow(job, p, now) and self._could_borrow(job.demand, p, pool):
            got = self._borrow(job.demand, p, pool)
        return got

    def held_back(self, job, key, pool: Pool, now: float) -> W.WaitReason | None:
        """After a step failed to place: make a reservation for it if it is eligible
        and none stands; the reason it waits if held resources are what it lacks."""
        if not self.enabled or job.exclusive:
            return None
        p = self.plan
        if p is None:
            if self._eligible(job, now):
                self.plan = self._make(job, key, pool)
            return None
        if key == p.key:
            return job.why  # the reserved step waits for what it waited for when planned
        d = job.demand
        held_c = sum(len(s.cores) for v in p.held.values() for s in v) if p.held else 0
        if d.cores <= pool.free_cores + held_c:
            return W.WaitReason(W.RESERVED, d.cores, d.gpus, d.memory, pool.free_cores, pool.free_gpus,
                                detail=p.job.spec.id)
        return None

    def drop(self, pool: Pool) -> None:
        """Give every hold back and forget the reservation."""
        p, self.plan = self.plan, None
        if p is not None:
            for slots in p.held.values():
                pool.release(tuple(slots))

    # -- inside --------------------------------------------------------------------------
    def _eligible(self, job, now: float) -> bool:
        if job.prio < self.lowest:
            return True
        return job.ready_at is not None and now - job.ready_at >= self.reserve_after

    def _ends_by_shadow(self, job, p: _Plan, now: float) -> bool:
        e = expected_s(job)
        return p.shadow is not None and e is not None and now + e <= p.shadow

    @staticmethod
    def _could_borrow(d: Demand, p: _Plan, pool: Pool) -> bool:
        held_c = sum(len(s.cores) for v in p.held.values() for s in v)
        return held_c > 0 and d.cores <= pool.free_cores + held_c

    def _borrow(self, d: Demand, p: _Plan, pool: Pool) -> Placement | None:
        """Lend the holds to a step that ends by the shadow time; hold again what is left."""
        for n, slots in p.held.items():
            pool.release(tuple(slots))
            p.held[n] = []
            p.need[n] = list(p.want[n])
        p.short = len(p.want)
        got = pool.place(d)
        for n in p.want:
            self._top_up(p, n, pool)
        return got

    def _top_up(self, p: _Plan, node: str, pool: Pool) -> None:
        need = p.need[node]
        if not any(need) or not pool.has(node):
            return
        fc, fg, fm = pool.free_on(node)
        c, g, m = min(need[0], fc), min(need[1], fg), min(need[2], fm)
        if c or g or m:
            p.held[node].append(pool.take_on(node, c, g, m))
            need[0], need[1], need[2] = need[0] - c, need[1] - g, need[2] - m
            if not any(need):
                p.short -= 1

    def _make(self, job, key, pool: Pool) -> _Plan | None:
        """Plan the reservation (see the module's docstring) and take the first holds."""
        found = _walk(job.demand, pool, self._running_by_end(), self._job_at)
        if found is None:
            return None
        shadow, want = found
        p = _Plan(job, key, shadow, want, pool.total_cores)
        for n in want:
            self._top_up(p, n, pool)
        return p

    def _compact(self) -> None:
        """Drop the index entries of steps that ended (once they outnumber the live)."""
        live = self._live
        self._ends = [e for e in self._ends if live.get(e[2], (0,))[0] == e[1]]
        heapq.heapify(self._ends)

    def _running_by_end(self) -> list[tuple[float, int, str]]:
        if len(self._ends) > 2 * len(self._live) + 64:
            self._compact()
        return self._ends

    def _job_at(self, sid: str, no: int):
        """The running job an index entry names, or None if the entry is stale."""
        got = self._live.get(sid)
        return got[1] if got is not None and got[0] == no else None


def _merged(node: str, slots: list[Slot]) -> Slot:
    return Slot(node, tuple(sorted(c for s in slots for c in s.cores)),
                tuple(sorted(g for s in slots for g in s.gpus)), sum(s.memory for s in slots))


def _walk(d: Demand, pool: Pool, ends: list, job_at) -> tuple[float | None, dict] | None:
    """The shadow time and per-node amounts of d's reservation, or None if it would
    not fit even once every running step has ended."""
    specs = {n.name: n for n in pool.nodes()}
    order = {name: i for i, name in enumerate(specs)}
    proj = {name: list(pool.free_on(name)) for name in specs} if d.span else {}
    freed: dict[str, int] = {}
    room = _Room(d, specs, proj) if d.span else None
    heap = list(ends)  # a copy: popped in end order without disturbing the index
    while heap:
        end, no, sid = heapq.heappop(heap)
        job = job_at(sid, no)
        if job is None:
            continue
        for slot in job.placement:
            if slot.node not in specs:
                continue
            p = proj.get(slot.node)
            if p is None:
                p = proj[slot.node] = list(pool.free_on(slot.node))
            if room:
                room.drop(slot.node)
            p[0] += len(slot.cores)
            p[1] += len(slot.gpus)
            p[2] += slot.memory
            freed[slot.node] = freed.get(slot.node, 0) + len(slot.cores)
            if room:
                room.add(slot.node)
            elif _fits_one(d, specs[slot.node], p):
                return _shadow(end), {slot.node: (d.cores, d.gpus, _mem_for(specs[slot.node], d.cores, d))}
        if room and room.enough():
            want = room.choose(freed, order)
            if want is not None:
                return _shadow(end), want
    return None


def _shadow(end: float) -> float | None:
    return None if end == math.inf else end


def _fits_one(d: Demand, spec: NodeSpec, p: list[int]) -> bool:
    return p[0] >= d.cores and p[1] >= d.gpus and p[2] >= _mem_for(spec, d.cores, d)


class _Room:
    """For a spanning demand: the whole units (with their memory share) and GPUs the
    projected nodes hold, kept as totals while the walk adds to the projection."""

    def __init__(self, d: Demand, specs: dict[str, NodeSpec], proj: dict[str, list[int]]):
        self.d, self.specs, self.proj = d, specs, proj
        self.units: dict[str, int] = {}
        self.cores = self.gpus = 0
        for name in specs:
            self.add(name)

    def _usable(self, name: str) -> int:
        d, p, spec = self.d, self.proj[name], self.specs[name]
        t = (p[0] // d.unit) * d.unit
        while t > 0 and p[2] < _mem_for(spec, t, d):
            t -= d.unit
        return t

    def add(self, name: str) -> None:
        t = self._usable(name)
        self.units[name] = t
        self.cores += t
        self.gpus += self.proj[name][1] if t else 0

    def drop(self, name: str) -> None:
        t = self.units.pop(name, 0)
        self.cores -= t
        self.gpus -= self.proj[name][1] if t else 0

    def enough(self) -> bool:
        return self.cores >= self.d.cores and self.gpus >= self.d.gpus

    def choose(self, freed: dict[str, int], order: dict[str, int]) -> dict | None:
        """Per node (cores, GPUs, memory): GPUs first from the nodes with the most, then
        cores from the nodes the walk freed most on, then the most room; join order."""
        d = self.d
        cand = [n for n, t in self.units.items() if t]
        cand.sort(key=lambda n: (-self.proj[n][1] if d.gpus else 0, -freed.get(n, 0), -self.units[n], order[n]))
        need, gleft, want = d.cores, d.gpus, {}
        for n in cand:
            if need == 0:
                break
            t = min(self.units[n], need)
            g = min(self.proj[n][1], gleft)
            need, gleft = need - t, gleft - g
            want[n] = (t, g, _mem_for(self.specs[n], t, d))
        return want if need == 0 and gleft == 0 else None
