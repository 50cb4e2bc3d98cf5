"""Reservations planned ahead: a wide step's resources drained while its last
dependencies run, so it starts the moment it becomes ready (`--reserve-ahead N`).

Why. EASY backfill (fleet.core.reservations) reserves for a step only once it is
ready and has failed to start: on a fleet kept full by narrow steps, its cores are
then still busy with steps that started after its dependencies did, and it waits about
one of their durations. The cores it needs are known earlier. When every dependency it
still lacks is running and has an expected duration (fleet.core.durations), it is
expected ready at the latest of their expected ends. A reservation is planned then by
the same walk as an ordinary one (fleet.core.reservations) and kept only if the walk's
shadow is at most that time (it can start when ready); its shadow is then the expected
ready time. It drains what the step needs as the dependencies and their neighbours
end, and the step starts on the holds when it is ready. Backfill still borrows the
held resources (a step with an estimate that ends by the shadow), so little idles. A
plan that could not make it on time is not kept: it would hold cores for a step that
waits anyway, and push every later plan back. Ready wide steps go first: no plan is
made while a class of ready wide steps is blocked (a plan ahead would take the cores
they wait for; measured worse, benchmarks/README.md). Steps the order holds back once
ready (fleet.core.deferral) are never planned ahead.

Which steps (the rule, from the allocation, not the workload): a *wide* step, one
that needs at least half of the largest node's cores (the threshold `fleet simulate`
reports wide waits at); narrow steps find room in the holes others leave. Exclusive
steps (which run alone) have their own drain and are left out.

How many: at most N plans ahead stand at once (besides the ordinary reservations),
given to the candidates in order (priority, expected ready time, setup order). A
candidate is noted when its last dependency starts (a counter per wide waiting step
of its running dependencies, kept at each start and end of a dependency: O(its
dependents) per start or end, as the scheduler's own bookkeeping) and planned at the
next pass with room; a plan costs one walk of the running steps (as an ordinary one).
A pass costs O(1) more (O(classes) while candidates wait for room: whether a wide
class is blocked): plans ahead are looked at only when a dependency of theirs ended,
and their count is brought up to date only when the number of plans changed.

When the estimates are wrong: a plan stands while every dependency the step lacks
still runs and the shadow time has not passed. If a dependency ends without success
(a retry, a failure) the plan is dropped, and made again when the retry starts; if the
shadow passes with the step still waiting, the estimates were wrong: the plan is
dropped and that step is not planned ahead again (once ready it is an ordinary step,
with the ordinary reservations). A node lost, a step cancelled or blocked: dropped (as
an ordinary reservation). Once the step is ready a plan is an ordinary reservation in
every respect, except that it does not count against their number.

Deterministic: candidates are ordered by numbers and setup order, plans made by the
same walk as every reservation.
"""

from __future__ import annotations

import heapq
import math

from fleet.core import states as S
from fleet.core.reservations import MOST, Reservations, expected_s


class Lookahead(Reservations):
    """Reservations, plus at most `ahead` planned for wide steps about to become ready."""

    def __init__(self, reserve_after: float | None, ahead: int, jobs: dict, pool, most: int = MOST,
                 deferred=frozenset()):
        super().__init__(reserve_after, most)
        self._deferred = deferred  # steps the order holds back once ready (fleet.core.deferral): never planned
        self._pool = pool  # the scheduler's (the wide threshold follows its nodes)
        self.ahead = ahead
        self._most = most  # the ordinary reservations' limit (self.most adds the plans ahead)
        self._jobs = jobs  # the scheduler's steps by id (to read a candidate's dependencies)
        self._running_deps: dict[str, int] = {}  # wide waiting step -> how many of its deps run
        self._due: list[tuple] = []  # (priority, expected ready, setup order, step): candidates
        self.planned: dict[tuple, object] = {}  # ("ahead", step), then class key -> a plan made ahead
        self.spoilt: set[str] = set()  # steps whose plan's shadow passed while they waited
        self._wide = (-1, 0)  # (pool's total cores when computed, the wide threshold)
        self._check: dict[tuple, None] = {}  # plans ahead whose step lost a running dependency (in order)
        self._seen = 0  # len(self.plans) when the plans ahead were last pruned

    # -- the dependencies' starts and ends ----------------------------------------------------
    def started(self, job, now: float, placed: bool = False) -> None:
        """A step started: note the wide waiting steps whose last dependency it was."""
        super().started(job, now, placed)
        for dj in job.dependents:
            if dj.state != S.WAITING or not self._worthy(dj) or self._jobs.get(dj.spec.id) is not dj:
                continue
            n = self._running_deps[dj.spec.id] = self._running_deps.get(dj.spec.id, 0) + 1
            if n == dj.unmet and dj.spec.id not in self.spoilt:
                ready = self._expected_ready(dj, now)
                if ready is not None:
                    heapq.heappush(self._due, (dj.prio, ready, dj.seq, dj.spec.id))

    def stopped(self, job, pool) -> None:
        """A step ended: its dependents lack one running dependency less."""
        super().stopped(job, pool)
        for dj in job.dependents:
            n = self._running_deps.get(dj.spec.id)
            if ("ahead", dj.spec.id) in self.planned:
                self._check[("ahead", dj.spec.id)] = None  # it may be ready at the next pass
            if n is not None:
                if n > 1:
                    self._running_deps[dj.spec.id] = n - 1
                else:
                    del self._running_deps[dj.spec.id]

    # -- the pass ----------------------------------------------------------------------------
    def begin(self, pool, now: float, classes: dict) -> None:
        """Drop what no longer stands (the base's rule, and this module's for steps not
        yet ready), then plan ahead for the first candidates while there is room and no
        ready wide step is waiting (a plan ahead would take the cores it waits for)."""
        for key in self._check:
            p = self.planned.get(key)
            if p is not None and self.plans.get(key) is p and p.job.state == S.READY:
                self._ready(key, p, pool)
        self._check.clear()
        super().begin(pool, now, classes)
        self._prune()
        if self.enabled:
            while self._due and len(self.planned) < self.ahead and not self._wide_waits(classes):
                _, ready, _, sid = heapq.heappop(self._due)
                self._plan(self._jobs.get(sid), ready, pool, now)
            self._prune()

    def held_back(self, job, key, pool, now: float):
        """As the base (its count of ordinary reservations first brought up to date)."""
        self._prune()
        return super().held_back(job, key, pool, now)

    def _passing(self, job, key, pool, now: float, taking=()) -> bool:
        """As the base (its count of ordinary reservations first brought up to date)."""
        self._prune()
        return super()._passing(job, key, pool, now, taking)

    def _stands(self, p, pool, now: float) -> bool:
        if self.planned.get(p.key) is not p or p.job.state != S.WAITING:
            return super()._stands(p, pool, now)
        if p.shadow is not None and now > p.shadow:
            self.spoilt.add(p.job.spec.id)  # the estimates were wrong: not planned ahead again
            return False
        return (pool.total_cores == p.total_cores and not p.job.cancelled
                and self._running_deps.get(p.job.spec.id, 0) == p.job.unmet > 0)

    # -- inside --------------------------------------------------------------------------------
    def _plan(self, job, ready: float, pool, now: float) -> None:
        if (job is None or job.state != S.WAITING or job.spec.id in self.spoilt or ready < now
                or self._running_deps.get(job.spec.id, 0) != job.unmet):
            return  # no longer a candidate (ready, ended, a dependency not running, overdue)
        key = ("ahead", job.spec.id)  # its class's key once it is ready (_ready)
        p = self._make(job, key, pool, now)
        if p is None:
            return
        if p.shadow is None:  # a running step it waits for has no estimate: nothing could borrow
            p.shadow = math.inf
        if p.shadow > ready:  # it would wait anyway: holding for it would only push later plans back
            self.plans[key] = p
            self.drop(pool, key)
            return
        p.shadow = ready
        p.overdue = False  # (its time is the step's readiness, not yet past: _plan skips an overdue one)
        p.order = (-math.inf, p.shadow, job.seq)  # never the one an ordinary reservation displaces
        self.plans[key] = p
        self.planned[key] = p

    def _ready(self, key, p, pool) -> None:
        """The step planned for is ready: its plan becomes its class's reservation (the
        scheduler tries the class, and places its first step on the holds); if the class
        has one already, that one goes first and this plan is given back."""
        del self.planned[key]
        ckey = (p.job.demand,)
        if ckey in self.plans:
            self.drop(pool, key)
            return
        del self.plans[key]
        p.key = ckey
        self.plans[ckey] = p
        self.planned[ckey] = p

    def drop(self, pool, key) -> None:
        """As the base; a plan ahead is forgotten with it."""
        super().drop(pool, key)
        self._prune()

    def _prune(self) -> None:
        """Forget the plans ahead that started (or were dropped); the ordinary limit stays.
        Only when the number of plans changed: a start on a plan takes it out of `plans`."""
        if len(self.plans) == self._seen:
            return
        for key, p in list(self.planned.items()):
            if self.plans.get(key) is not p:
                del self.planned[key]
        self.most = self._most + len(self.planned)
        self._seen = len(self.plans)

    def _expected_ready(self, job, now: float) -> float | None:
        """The latest expected end of the step's running dependencies (None: one has no estimate)."""
        ready = now
        for d in job.deps:
            dep = self._jobs.get(d)
            if dep is None or dep.state != S.RUNNING:
                continue
            e = expected_s(dep, self.recorded)
            if e is None or dep.started_at is None:
                return None
            ready = max(ready, dep.started_at + e)
        return ready

    def _wide_waits(self, classes) -> bool:
        """Whether a ready wide step could not start (its class is blocked): it goes first."""
        return any(c.blocked_at is not None and c.heap and not c.exclusive and c.demand.cores >= self._wide[1]
                   for c in classes.values())

    def _worthy(self, job) -> bool:
        """Wide: at least half of the largest node's cores."""
        d = job.demand
        if d is None or job.exclusive or job.spec.id in self._deferred:
            return False
        total = self._pool.total_cores
        if self._wide[0] != total:  # a node joined or was lost since
            self._wide = (total, max(2, max((len(s.cores) for s in self._pool.nodes()), default=2) // 2))
        return d.cores >= self._wide[1]


def ahead(sched, n: int):
    """Give a scheduler, before its first event, at most `n` reservations planned ahead
    (0: none; nothing without reservations); returns it."""
    res = sched._res
    if n > 0 and res.enabled:
        deferral = getattr(getattr(sched, "ranks", None), "deferral", None)
        new = Lookahead(res.reserve_after, n, sched._jobs, sched.pool, res.most,
                        deferral.steps if deferral is not None else frozenset())
        new.recorded, new.queued, new.jobs = res.recorded, res.queued, res.jobs
        sched._res = new
    return sched
