"""What a new submission does with steps the scheduler already knows.

A live fleet (`fleet up`) takes several submissions; each may bring steps an earlier
one brought. Deps first, each known step is:

- kept: it is still to run (waiting, ready or running) as submitted, or as the other
  shard that brought it submitted it (this one waits for it as foreign), or another
  fleet runs it; or it succeeded and its marker still says done;
- renewed: a new generation replaces the waiting, ready or finished one (its attempts
  count from 1 again), or one held as another shard's that this submission runs;
- queued after: it is running, and the new definition runs when that attempt ends.

A step runs anew when its definition changed, when it ended without success, when its
marker no longer says done (or `--force`), or when one of its deps will run (make's
rule): what runs makes its dependents run, so no marker is trusted past it.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Iterator, Mapping

from fleet.core import states as S
from fleet.core.decisions import Blocked, Decision, Exits, Skipped, StepExited, Submitted
from fleet.core.graph import _kahn
from fleet.core.jobs import Job, take_out
from fleet.core.ranks import SETUP_ORDER
from fleet.core.suite import LEGACY_IDENTITY as _ALL  # (what it does, and how it is scheduled)

NEW, KEEP, RENEW, AFTER = "new", "keep", "renew", "after"


def resubmission(ev: Submitted, jobs: Mapping) -> tuple[dict[str, str], set[str]]:
    """What the submission does with each of its steps (NEW, KEEP, RENEW or AFTER), and
    which of the new or renewed ones it skips as done. `jobs` maps the ids the scheduler
    knows to records with `state` and `spec`."""
    return run(planned(ev, jobs, 0, itertools.count(1)))


def run(gen):
    """Exhaust a generator of this module; what it returns."""
    while True:
        try:
            next(gen)
        except StopIteration as e:
            return e.value


def planned(ev: Submitted, jobs: Mapping, chunk: int, work) -> Iterator[None]:
    """resubmission(), pausing (a bare yield) after every `chunk` counts of `work`."""
    steps: dict = {}
    deps: dict = {}
    for s in ev.steps:  # paused too: a million steps take a second or more to table
        if chunk and next(work) % chunk == 0:
            yield
        steps[s.id] = s
        deps[s.id] = tuple(ev.deps.get(s.id, s.deps))
    if ev.order and len(ev.order) == len(deps):
        order = list(ev.order)  # any order with deps first gives the same plan
    else:
        order, _ = _kahn(deps)
    if len(order) < len(deps):  # a cycle (refused before here): the rest in setup order
        placed = set(order)
        order += [k for k in deps if k not in placed]
    plan: dict[str, str] = {}
    skip: set[str] = set()
    runs: set[str] = set()  # will run (again) in this fleet
    for sid in order:
        if chunk and next(work) % chunk == 0:
            yield
        old = jobs.get(sid)
        dep_runs = any(d in runs for d in deps[sid]) if deps[sid] else False  # (most steps: no deps, no generator)
        done = sid in ev.done and not dep_runs
        if old is None:
            what = NEW
        elif old.state in S.FINAL:
            same = old.spec.same_as(steps[sid])
            what = KEEP if old.state in S.GOOD and done and same else RENEW
        elif old.state == S.ELSEWHERE:
            what = RENEW if sid in ev.takes else KEEP  # another fleet runs it (or another shard, here: takes)
        elif sid in ev.foreign or (not dep_runs and old.spec.same_as(steps[sid], _ALL)):
            what = KEEP  # still to run here as submitted (priority and all), or by the shard that brought it
        else:
            what = AFTER if old.state in (S.RUNNING, S.QUEUED) else RENEW  # queued: on a node already
        plan[sid] = what
        if what in (NEW, RENEW) and done:
            skip.add(sid)
        elif what != KEEP or old.state not in S.FINAL:
            runs.add(sid)
    return plan, skip


class Entry:
    """A chunked submission being entered (see EnterMore).

    Events that come meanwhile are held until it is in, in order, but for the exits of
    steps it owes nothing (`apart`): once its plan is made, a submission that renews or
    queues after no known step lets the ends of steps that are neither its own, nor its
    steps' deps, nor its parent be handled between its parts, as long as nothing is held
    before them. A million-step submission so does not stop the rest of the fleet from
    starting steps for the half minute it takes to enter."""

    __slots__ = ("gen", "now", "out", "entered", "total", "chunked", "apart", "latest")

    def __init__(self, now: float, total: int, chunked: bool):
        self.gen = None
        self.now = now
        self.out: list[Decision] = []
        self.entered = 0
        self.total = total
        self.chunked = chunked
        self.apart: tuple[Mapping, set] | None = None  # (its plan, the known steps it needs)
        self.latest = now  # the time of the last event handled between its parts

    def passes(self, event) -> bool:
        """Whether `event` (an exit, or a loop turn's) may be handled before the rest is in."""
        if self.apart is None:
            return False
        exits = (event,) if isinstance(event, StepExited) else event.exits if isinstance(event, Exits) else None
        if exits is None:
            return False
        plan, needs = self.apart
        return not any(e.step in plan or e.step in needs for e in exits)


def apart(ev: Submitted, plan: Mapping, chunk: int, work) -> Iterator[None]:
    """Entry.apart for a submission with this plan (None if it renews or queues after a
    known step), pausing as planned() does."""
    needs: set = {ev.parent} if ev.parent else set()
    for s in ev.steps:
        if chunk and next(work) % chunk == 0:
            yield
        if plan[s.id] in (RENEW, AFTER):
            return None
        for d in ev.deps.get(s.id, s.deps):
            if d not in plan:
                needs.add(d)
    return plan, needs


class Entries:
    """How the Scheduler takes a submission in (a mixin: the scheduler's own records).

    Every loop here counts its steps and, for a chunked submission (Submitted.chunk),
    pauses every `chunk` of them: the scheduler resumes it at the next EnterMore. The
    work and its order are those of an unchunked submission, so are the decisions."""

    # The order of ready steps of equal priority (fleet.core.ranks): setup order (a
    # stateless default shared by all) unless a scheduler is given its own.
    ranks = SETUP_ORDER
    # Ready jobs replaced by a new generation, taken out of their classes together when
    # the new ones are entered (fleet.core.jobs.take_out): one at a time was quadratic.
    _stale: list | None = None

    def _submitting(self, ev: Submitted, out: list, entry) -> Iterator[None]:
        chunk, work = ev.chunk, itertools.count(1)
        yield from self.ranks.learn(ev.steps, ev.deps, self.deadline.recorded, chunk)  # O(steps + deps)
        plan, skip = yield from planned(ev, self._jobs, chunk, work)
        if chunk:
            entry.apart = yield from apart(ev, plan, chunk, work)
        new: list = []
        for spec in ev.steps:
            if chunk and next(work) % chunk == 0:
                yield
            entry.entered += 1
            deps = tuple(ev.deps.get(spec.id, spec.deps))
            what = plan[spec.id]
            if what == KEEP:
                if self._jobs[spec.id].state in S.GOOD:
                    out.append(Skipped(spec.id))  # done: this submission counts it so too
            elif what == AFTER:
                self._after[spec.id] = (spec, deps, ev.serial)
            elif what == NEW:
                new.append(self._add(spec, deps, ev.serial))
            else:
                new.append(self._renew(self._jobs[spec.id], spec, deps, ev.serial, new))
        yield from self._entering(new, skip, ev.foreign, ev.done, out, chunk, work)

    def _let_through(self, entry: Entry, out: list) -> None:
        """Handle the held exits at the front that `entry` owes nothing (those that came
        while it was still being planned), in order, up to the first it does."""
        held = self._held
        while held and entry.passes(held[0][0]):
            event, then = held.popleft()
            entry.latest = max(entry.latest, then)
            out += self._handle(event, then)

    def _renew(self, old, spec, deps: tuple[str, ...], serial: bool, new: list):
        """A new generation of a known step that is not running: it replaces the old one
        (attempts count from 1 again) and keeps the old one's dependents. A dependent that
        counted the old one as a success waits again; one already queued goes back to
        waiting (it is renewed too, as it was, and appended to `new`)."""
        self._forget(old)
        if old.state in S.FINAL and self._families:
            self._anew(spec.id)  # (fleet.core.phases)
        job = self._add(spec, deps, serial)
        job.generation = old.generation + 1
        job.dependents = list(self._dependents(old))
        if old.state in S.GOOD:
            for dj in job.dependents:
                if dj.state == S.WAITING:
                    dj.unmet += 1
                elif dj.state == S.READY:
                    again = self._renew(dj, dj.spec, dj.deps, False, new)
                    again.exclusive, again.prio = dj.exclusive, dj.prio
                    again.attempt, again.generation = dj.attempt, dj.generation
                    new.append(again)
        return job

    def _forget(self, old) -> None:
        """Drop a job's record (a new generation takes its id)."""
        if old.state == S.READY:
            if self._stale is None:
                self._stale = []
            self._stale.append(old)
        if old.demand is not None:
            self._pending.moved(old.demand, old.state, "forgotten")  # fleet.core.unfit
        if old in self._unresolved:
            self._unresolved.remove(old)
        self._counts[old.state] -= 1
        if old.state == S.READY and self.deadline.held_now:  # (held back by the allocation's end, till now)
            self.deadline.left_ready(old)
        if self.moved is not None:  # its id is waiting again, as the new generation (_add)
            self.moved(old.spec.id, old.state, S.WAITING)
        if old.state not in S.FINAL:
            self._open -= 1

    def _block_descendants(self, job: Job, because: str, out: list[Decision]) -> None:
        todo = deque(self._dependents(job))
        while todo:
            dj = todo.popleft()
            if dj.state != S.WAITING:
                continue
            self._set(dj, "dep_failed")
            if dj in self._unresolved:
                self._unresolved.remove(dj)
            out.append(Blocked(dj.spec.id, because))
            todo.extend(self._dependents(dj))

    def _dependents(self, job):
        """The job's dependents that are current (not replaced by a later generation)."""
        return (dj for dj in job.dependents if self._jobs.get(dj.spec.id) is dj)

    def _enter(self, new: list, skip: set, foreign: frozenset, done: frozenset, out: list) -> None:
        """Link new jobs to their deps, skip those done, and resolve or block the rest."""
        run(self._entering(new, skip, foreign, done, out, 0, None))

    def _linking(self, new: list, done: frozenset, chunk: int, work) -> Iterator[None]:
        """Link new jobs to their deps (counting those not done yet), pausing as _entering does."""
        for job in new:
            if chunk and next(work) % chunk == 0:
                yield
            for d in job.deps:
                dep = self._jobs.get(d)
                if dep is None:
                    if d in done:
                        continue
                    raise ValueError(f"step {job.spec.id!r} depends on unknown step {d!r}")
                if dep.dependents:
                    dep.dependents.append(job)
                else:
                    dep.dependents = [job]  # a job starts with a shared () (fleet.core.jobs)
                if dep.state not in S.GOOD:
                    job.unmet += 1

    def _entering(self, new: list, skip: set, foreign: frozenset, done: frozenset, out: list, chunk: int,
                  work) -> Iterator[None]:
        """_enter(), pausing after every `chunk` counts of `work`."""
        if self._stale:  # before any new generation is queued: its heap entry may equal the old one's
            take_out(self._classes, self._stale, self._quiet.changed)
            self._stale = None
        kept, woken = [], []
        for j in new:  # one renewed twice counts once
            if chunk and next(work) % chunk == 0:
                yield
            if self._jobs.get(j.spec.id) is j:
                kept.append(j)
        new = kept
        yield from self._linking(new, done, chunk, work)
        for job in new:  # setup order; markers first so dependents see them
            if chunk and next(work) % chunk == 0:
                yield
            if job.spec.id in foreign and job.spec.id not in skip:
                self._set(job, "foreign")
                continue
            if job.spec.id in skip:
                self._set(job, "already_done")
                out.append(Skipped(job.spec.id))
                for dj in self._dependents(job):
                    dj.unmet -= 1
                    if not dj.unmet:
                        woken.append(dj)
        if woken:  # an earlier generation's waiting step whose last dep is skipped now: resolved too
            fresh = {id(j) for j in new}
            woken = [dj for dj in woken if id(dj) not in fresh]
        failed_deps = []
        have_nodes = bool(self.pool.nodes())  # once, not per step: resolving changes no node
        for job in itertools.chain(new, woken):
            if chunk and next(work) % chunk == 0:
                yield
            if job.state != S.WAITING:
                continue
            bad = next((d for d in job.deps if d in self._jobs and self._jobs[d].state in S.FINAL - S.GOOD),
                       None) if job.deps else None
            if bad is not None:
                failed_deps.append((job, bad))
            elif have_nodes:
                self._resolve(job, out)
            else:
                self._unresolved.append(job)
        for job, bad in failed_deps:
            if job.state == S.WAITING:
                self._set(job, "dep_failed")
                out.append(Blocked(job.spec.id, bad))
                self._block_descendants(job, bad, out)
