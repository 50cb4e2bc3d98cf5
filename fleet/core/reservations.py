"""Fairness without waste: a few reservations at a time, and EASY backfill around them.

Theory of operation. A greedy pass starts whatever fits, so a wide step (or one of
high priority) can wait for ever behind a stream of narrow ones that each fit into
what the last one freed. So when a step that cannot start is *passed over* - another
step starts (or a node's window takes it ahead) that comes after it in order, or, once
it has been ready for `reserve_after`, one that takes what is free while it cannot
start on that - and it is *eligible* - its priority is higher than some ready step's,
or it has been ready for at least `reserve_after` - the scheduler makes a reservation
for it, as Slurm's EASY backfill does for the head of its queue. Exactly who, and who
first: fleet.core.passover (a narrow step that waits only because every core is busy
takes the next free core anyway, and never holds the reservation a wide one needs).

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

At most MOST reservations stand at once (1, as Slurm's EASY; the code takes a small
bounded number, each planned after the older ones: what an older one is still owed on
a node goes to it first, in the projection as in the holds; 8 and 32 measured no
better on the Aurora-sized what-if, and slower). They go to eligible steps passed over,
as fleet.core.passover says, in the order (priority, longest wait - earliest `ready_at`
-, setup order): one before the last reservation's step in that order takes its place
(among wide steps of one priority, whichever is first in setup order would otherwise
take it from one that has waited far longer: on the Aurora what-if that cost p90 wait
and makespan). Each
is kept until its step starts, leaves the ready steps (cancelled), a node is lost, a
step that runs alone comes first, or its shadow time passes with the step still short
(the estimates were wrong): then it is planned again when its step is next passed over
(or, once passed over, next fails to start). A plan whose shadow time is already past
when it is made (every running step it waits for has overrun its estimate) is *overdue*:
no time is left to pass, so it stands as one of unknown time does (nothing borrows from
it: nothing ends by a past time). Planned again it would be the same plan at every pass,
and the window would hand a step to its node and take it back at every pass (the
corefuzz audit).
Everything is ordered by (end, start order), plan order and node join order:
deterministic. Within one class of demand steps still start in order (a pass tries
only each class's first step): a long step at the head of its class keeps a short one
of the same demand behind it from borrowing.
Cost: a pass pays O(1) more per class, a start what fleet.core.passover says, plus the
hold bookkeeping of the reserved nodes when a step ends on one; a plan walks the
running steps once (O(running + walked x log running + nodes)) and is made once per
reservation.
"""

from __future__ import annotations

import heapq
import math

from fleet.core import durations
from fleet.core import states as S
from fleet.core import waits as W
from fleet.core.passover import Candidates
from fleet.core.resources import Demand, Placement, Pool, Slot
from fleet.core.shadow import mem_for, walk

RESERVE_AFTER_S = 600.0  # the default: a ready step older than this gets a reservation
MOST = 1  # reservations standing at once: 1 is Slurm's EASY (8 and 32 measured no better, and slower)


def expected_s(job, recorded=None) -> float | None:
    """How long the step is expected to run, or None if nobody said: its `estimate`,
    else an earlier run's duration (fleet.core.durations, the one accessor)."""
    return durations.expected_s(job.spec, recorded)


def _order(job) -> tuple:
    """Who a reservation goes to first: higher priority, then the longest wait (earliest
    ready), then setup order."""
    return (job.prio, job.ready_at if job.ready_at is not None else math.inf, job.seq)


class _Plan:
    """The one reservation: who, until when, what on which node, and what is held."""

    __slots__ = ("job", "key", "order", "shadow", "want", "need", "held", "held_cores", "short", "total_cores",
                 "overdue")

    def __init__(self, job, key, shadow: float | None, want: dict[str, tuple[int, int, int]], total: int,
                 now: float):
        self.job, self.key, self.order = job, key, _order(job)
        self.shadow = shadow  # None: unknown (a running step it waits for has no estimate)
        # Past already when made: what it waits for has overrun its estimate, so no time is
        # left to pass (it stands as one of unknown time does; see Reservations._stands).
        self.overdue = shadow is not None and shadow < now
        self.want = want      # node -> (cores, gpus, memory) the step takes there
        self.need = {n: list(v) for n, v in want.items()}  # what is still to be held
        self.held: dict[str, list[Slot]] = {n: [] for n in want}
        self.held_cores = 0
        self.short = len(want)  # nodes whose hold is not complete
        self.total_cores = total


class Reservations:
    """The scheduler's reservations (at most `most`, in the order they were made) and
    the index of running steps' ends."""

    def __init__(self, reserve_after: float | None = RESERVE_AFTER_S, most: int = MOST):
        self.enabled = reserve_after is not None
        self.reserve_after = reserve_after if reserve_after is not None else math.inf
        self.most = most
        self.plans: dict[tuple, _Plan] = {}  # class key -> its reservation, oldest first
        self.held_cores = 0  # held by every reservation together
        self.waiting = Candidates()  # who a reservation may go to (fleet.core.passover)
        self.jobs: dict = {}  # the scheduler's steps by id (shared)
        self._classes: dict = {}  # its classes of ready steps (as of the last pass)
        self.pool: Pool | None = None  # the scheduler's (for the window's hand-ahead)
        self._begun: list = []  # steps a node's window began since the last pass (they pass over too)
        self.lowest = 0  # the lowest priority (largest number) among the ready classes' first steps
        self.heads_lowest = None  # the scheduler's way to that without a walk of every class (fleet.core.quiet)
        self._told: dict[tuple, int] = {}  # class key -> held_cores when its first step was last tried
        self._ends: list[tuple[float, int, str]] = []  # (expected end, start number, step)
        self._live: dict[str, tuple[int, object]] = {}  # running step -> (start number, job)
        self._starts = 0
        self.recorded: dict[str, float] = {}  # earlier runs' durations (the scheduler's deadline shares its own)
        self.queued: dict = {}  # running step -> the step queued behind it on its node (the scheduler's window)
        self._planning: tuple | None = None  # the order key of the step being planned for
        self._nodes: tuple = (-1, {}, {})  # (pool.total_cores, specs by name, join order) when last seen

    # -- the running steps ---------------------------------------------------------------
    def started(self, job, now: float, placed: bool = False) -> None:
        """A step started: index its expected end. Not `placed` by a pass (a node's
        window began it): the candidates it passed over are looked at before the next
        pass (once the step it followed has stopped)."""
        if not self.enabled:
            return
        self._starts += 1
        e = durations.expected_s(job.spec, self.recorded)  # (expected_s, a call less per start)
        heapq.heappush(self._ends, (now + e if e is not None else math.inf, self._starts, job.spec.id))
        self._live[job.spec.id] = (self._starts, job)
        if len(self._ends) > 2 * len(self._live) + 64:
            self._compact()
        if self.waiting.of and not job.exclusive:
            key = (job.demand,)
            self.waiting.starting(job, key)
            if not placed and self.waiting.of:
                self._begun.append(job)

    def stopped(self, job, pool: Pool) -> None:
        """A step ended and its placement went back to the pool: hold what the
        reservations still need of it, the oldest first."""
        if not self.enabled:
            return
        self._live.pop(job.spec.id, None)
        for p in self.plans.values():
            if p.short:
                for slot in job.placement:
                    if slot.node in p.need:
                        self._top_up(p, slot.node, pool)

    # -- the pass --------------------------------------------------------------------------
    def begin(self, pool: Pool, now: float, classes: dict) -> None:
        """Before a pass: drop the reservations that no longer stand. One is dropped
        (and planned again when its step is next passed over) if its step is no longer
        ready, a node was lost, or it is still short past its time or with nothing left
        running to release what it lacks (the estimates were wrong)."""
        self.pool, self._classes = pool, classes
        self.waiting.passno += 1
        if self.enabled:
            self.lowest = (self.heads_lowest() if self.heads_lowest is not None else
                           max((c.heap[0][0] for c in classes.values() if c.heap), default=0))
        for key, p in list(self.plans.items()):
            if not self._stands(p, pool, now):
                self.drop(pool, key)
        if self._begun:
            for job in self._begun:
                if job.state == S.RUNNING and self.waiting.of:
                    self._passing(job, (job.demand,), pool, now, job.placement)
            self._begun.clear()

    def _stands(self, p: _Plan, pool: Pool, now: float) -> bool:
        """Whether a reservation still stands (see begin; fleet.core.lookahead adds to it)."""
        # A plan past its time when made (a step it waits for overran its estimate) is not
        # dropped for its time: planned again, it would be the same plan, at every pass, and
        # the window would hand a step to its node and take it back each time (the corefuzz
        # audit: a Queue and its Withdraw at every Dropped, for as long as the step overran).
        return not (p.job.state != S.READY or pool.total_cores != p.total_cores
                    or (p.short and (not self._live or (p.shadow is not None and now > p.shadow
                                                        and not p.overdue))))

    def revisit(self, cls, now: float, jobs) -> bool:
        """Whether a class that is blocked must be tried anyway: it holds a reserved
        step; or reservations stand and it does not yet say it is held back by them.
        (A blocked class need not be tried to get a reservation: its first step became a
        candidate when it failed, and gets one when it is passed over.)"""
        if not self.enabled or cls.exclusive:
            return False
        if cls.key in self.plans:
            return True
        if not self.plans or cls.demand.span:  # (spanning classes are left to the releases: trying one can scan every node)
            return False
        head = jobs[cls.heap[0][2]]
        return self._told.get(cls.key) != self.held_cores and (head.why is None or head.why.cause != W.RESERVED)

    def place(self, job, key, pool: Pool, now: float, alone: bool = False) -> Placement | None:
        """Place a step: a reserved one on its holds once complete (else anywhere it
        fits, giving the holds back), a short one on borrowed holds, others as ever.
        A step that runs alone (it comes first, and the fleet drains for it) ends the
        reservations: the holds would otherwise keep it from ever starting."""
        if alone:
            for k in list(self.plans):
                self.drop(pool, k)
            return pool.place(job.demand)
        p = self.plans.get(key)
        if p is None and self.waiting.of and pool.fits(job.demand):
            self._passing(job, key, pool, now)  # before it takes what is free: a reservation may keep it off
        if not self.plans:
            return pool.place(job.demand)
        if p is not None:
            p.job = job  # the first of its kind: the same demand, and ahead of it in order
            if not p.short:
                del self.plans[key]
                self.held_cores -= p.held_cores
                return tuple(_merged(n, p.held[n]) for n in p.want)
            got = pool.place(job.demand)
            if got is not None:
                self.drop(pool, key)
            return got
        got = pool.place(job.demand)
        if got is None and self.held_cores and job.demand.cores <= pool.free_cores + self.held_cores:
            e = expected_s(job, self.recorded)
            for p in self.plans.values() if e is not None else ():
                if p.held_cores and p.shadow is not None and now + e <= p.shadow:
                    got = self._borrow(job.demand, p, pool)
                    if got is not None:
                        break
        return got

    def held_back(self, job, key, pool: Pool, now: float) -> W.WaitReason | None:
        """After a step failed to place: it is a candidate for a reservation (it gets
        one when it is passed over: fleet.core.passover); the reason it waits if held
        resources are what it lacks."""
        if not self.enabled or job.exclusive:
            return None
        p = self.plans.get(key)
        if p is not None:
            return job.why  # a reserved step waits for what it waited for when planned
        self.waiting.note(job, key)
        if self.waiting.starving(job, key) and self._eligible(job, now) and self._room_for(job, pool):
            p = self._make(job, key, pool, now)  # passed over before: it takes its turn as it fails (EASY's head)
            if p is not None:
                self.plans[key] = p
            return None
        if not self.plans:
            return None
        self._told[key] = self.held_cores
        d = job.demand
        if d.cores <= pool.free_cores + self.held_cores:
            first = next(iter(self.plans.values()))
            return W.WaitReason(W.RESERVED, d.cores, d.gpus, d.memory, pool.free_cores, pool.free_gpus,
                                detail=first.job.spec.id)
        return None

    def nodes(self) -> set[str]:
        """The nodes the standing reservations take (nothing is queued on them)."""
        return {n for p in self.plans.values() for n in p.want}

    def drop(self, pool: Pool, key) -> None:
        """Give a reservation's holds back and forget it."""
        p = self.plans.pop(key, None)
        if p is not None:
            self.held_cores -= p.held_cores
            for slots in p.held.values():
                pool.release(tuple(slots))

    # -- inside --------------------------------------------------------------------------
    def handing(self, job, now: float) -> bool:
        """A node's window is about to hand `job` ahead of time (fleet.core.window): it
        takes the resources as a start does, and passes candidates over as one does.
        True if a reservation was made for one (none is queued on its nodes)."""
        if not self.waiting.of or job.exclusive or self.pool is None:
            return False
        return self._passing(job, (job.demand,), self.pool, now, job.placement)

    def _passing(self, job, key, pool: Pool, now: float, taking: Placement = ()) -> bool:
        """`job` (of class `key`) starts: reserve for the first eligible candidate it
        passes over (fleet.core.passover), if there is room for one or that one comes
        before the last standing one in order (which then gives way). True if made.
        `taking`: what it takes that the pool does not hold (a node's window's step:
        its predecessor's), counted as free, as a pass counts what a step is about to take."""
        last = None
        if len(self.plans) >= self.most:
            last = max(self.plans.items(), key=lambda kv: kv[1].order)
        fits = pool.fits if not taking else (lambda d: _fits_with(pool, d, taking))
        found = self.waiting.passed_over(job, key, max(job.prio, self.lowest), now, self.reserve_after, fits,
                                         self.plans.__contains__, self._head,
                                         last[1].order if last is not None else None)
        if found is None:
            return False
        if last is not None:
            self.drop(pool, last[0])
        p = self._make(found[0], found[1], pool, now)
        if p is not None:
            self.plans[found[1]] = p
        return p is not None

    def _eligible(self, job, now: float) -> bool:
        return job.prio < self.lowest or (job.ready_at is not None and now - job.ready_at >= self.reserve_after)

    def _room_for(self, job, pool: Pool) -> bool:
        """Room for a reservation, or this step comes before the last one in order (which gives way)."""
        if len(self.plans) < self.most:
            return True
        key, last = max(self.plans.items(), key=lambda kv: kv[1].order)
        if _order(job) < last.order:
            self.drop(pool, key)
            return True
        return False

    def _head(self, key):
        """The first step of ready class `key` now, or None."""
        cls = self._classes.get(key)
        return self.jobs.get(cls.heap[0][2]) if cls is not None and cls.heap else None

    def _borrow(self, d: Demand, p: _Plan, pool: Pool) -> Placement | None:
        """Lend the holds to a step that ends by the shadow time; hold again what is left."""
        for n, slots in p.held.items():
            pool.release(tuple(slots))
            p.held[n] = []
            p.need[n] = list(p.want[n])
        self.held_cores -= p.held_cores
        p.short, p.held_cores = len(p.want), 0
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
            p.held_cores += c
            self.held_cores += c
            need[0], need[1], need[2] = need[0] - c, need[1] - g, need[2] - m
            if not any(need):
                p.short -= 1

    def _make(self, job, key, pool: Pool, now: float) -> _Plan | None:
        """Plan the reservation (see the module's docstring; the walk: fleet.core.shadow)
        and take the first holds."""
        owed: dict[str, list[int]] = {}  # what the older reservations still need, node by node
        for q in self.plans.values():
            for n, v in q.need.items():
                o = owed.setdefault(n, [0, 0, 0])
                o[0], o[1], o[2] = o[0] + v[0], o[1] + v[1], o[2] + v[2]
        if self._nodes[0] != pool.total_cores:  # a node joined or was lost since
            specs = {n.name: n for n in pool.nodes()}
            self._nodes = (pool.total_cores, specs, {name: i for i, name in enumerate(specs)})
        # (for _queued_end; a step planned for ahead, not ready yet, has no place in the order: all count)
        self._planning = (job.prio, job.qkey, job.spec.id) if job.state == S.READY else None
        found = walk(job.demand, pool, self._running_by_end(), self._job_at, owed, self._nodes[1], self._nodes[2],
                      self._queued_end)
        if found is None:
            return None
        shadow, want = found
        p = _Plan(job, key, shadow, want, pool.total_cores, now)
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

    def _queued_end(self, sid: str, end: float):
        """When the resources of running step `sid` (expected to end at `end`) come back:
        None if at its end; else (the end of the last step queued behind it, that step:
        a chain's, fleet.core.windowchain, each after the one before). Only the queued
        steps that come before the step planned for count: the window takes the others
        back for it (fleet.core.windoworder.reserved)."""
        queued, key = self.queued, self._planning
        succ = queued.get(sid)
        last = None
        while succ is not None and (key is None or not key < (succ.prio, succ.qkey, succ.spec.id)):
            e = expected_s(succ, self.recorded)
            end = end + e if e is not None else math.inf
            last, succ = succ, queued.get(succ.spec.id)
        return None if last is None else (end, last)

    def _job_at(self, sid: str, no: int):
        """The running job an index entry names, or None if the entry is stale."""
        got = self._live.get(sid)
        return got[1] if got is not None and got[0] == no else None


def _fits_with(pool: Pool, d: Demand, taking: Placement) -> bool:
    """Whether d would place on what is free plus `taking` (a spanning demand: in total)."""
    if pool.fits(d):
        return True
    if d.span:
        return (d.cores <= pool.free_cores + sum(len(s.cores) for s in taking)
                and d.gpus <= pool.free_gpus + sum(len(s.gpus) for s in taking))
    for s in taking:
        spec = pool.spec_of(s.node)
        if spec is not None:
            c, g, m = pool.free_on(s.node)
            if c + len(s.cores) >= d.cores and g + len(s.gpus) >= d.gpus and m + s.memory >= mem_for(spec, d.cores, d):
                return True
    return False


def _merged(node: str, slots: list[Slot]) -> Slot:
    return Slot(node, tuple(sorted(c for s in slots for c in s.cores)),
                tuple(sorted(g for s in slots for g in s.gpus)), sum(s.memory for s in slots))
