"""The pure scheduling core: events in, decisions out.

No I/O and no clock: `handle(event, now)` takes one event and the time it happened
and returns the decisions it leads to. The live coordinator, `fleet simulate` and
the tests all drive this same object, so the same events give the same decisions.

A scheduling pass walks the ready steps in a stable order (priority, then setup
order, or fleet.core.ranks) and starts each that fits. Ready steps are grouped into
classes of identical demand: when the first of a class does not fit, none of the
class does, so a pass costs O(classes + starts), not O(ready steps), and steps still
waiting on dependencies are never looked at. A blocked class is tried again only
after a node it could fit on has released something (see Pool.could_fit_since).

The events and decisions live in fleet.core.decisions and are re-exported here, so
`from fleet.core.scheduler import Start, Wait, ...` keeps working.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque

from fleet.core import fencing, made, queueview, unfit, viewfill
from fleet.core import states as S
from fleet.core import waits as W
from fleet.core.units import counted
from fleet.core.generations import Entries, Entry as _Entry
from fleet.core.demands import Demands
from fleet.core.deadline import AllocationEnds, Deadline, DrainNow, held_only, too_late
from fleet.core.deferral import held
from fleet.core.fencing import Fenced, Fencing
from fleet.core.decisions import (PASS_STARTS, Blocked, Cancel, Decision, Elsewhere, EnterMore, Entering, Event,
                                  Finished, Exits, GoOn, Ignored, JobView, Kill, NodeJoined, NodeLost, Reclaim, Retry,
                                  Settled, Skipped, Start, StepExited, Submitted, Unrunnable, Wait, submission)
from fleet.core.jobs import DemandClass as _Class, Job as _Job
from fleet.core.outside import Outside
from fleet.core.phases import Phases
from fleet.core.quiet import Quiet
from fleet.core.reservations import RESERVE_AFTER_S, Reservations
from fleet.core.resources import Capacity, Pool
from fleet.core.suite import StepSpec
from fleet.core.unfit import PENDING, PendingDemands
from fleet.core.window import Begin, Queue, Unqueued, Window, Withdraw

__all__ = ["Scheduler", "JobView", "Event", "Decision", "NodeJoined", "NodeLost", "Submitted", "EnterMore", "StepExited",
           "Elsewhere", "Settled", "Reclaim", "Cancel", "Start", "Wait", "Retry", "Finished", "Blocked", "Unrunnable",
           "Skipped", "Entering", "Ignored", "Kill", "submission", "Queue", "Begin", "Unqueued", "Withdraw",
           "Exits", "Fenced"]


class Scheduler(Entries, Phases, Outside):
    """Decides what runs where and when. Feed it events; act on its decisions."""

    pass_starts = PASS_STARTS  # starts in one pass at most (fleet.core.decisions.GoOn)

    def __init__(self, reserve_after: float | None = RESERVE_AFTER_S, window: int | None = 0,
                 depth: int = 1, mpi_blocks: bool = False) -> None:
        """`reserve_after`: seconds a ready step waits before it gets a reservation
        (fleet.core.reservations); None: no reservations at all (greedy backfill).
        `window`: steps each node may be handed ahead of time (fleet.core.window;
        None: as many as it has cores, 0: none); `depth`: of them, how many may wait
        behind one running step (fleet.core.windowchain); `mpi_blocks`: MPI ranks in blocks (fleet.core.ppnblocks)."""
        self.pool = Pool()
        self._res = Reservations(reserve_after)
        self._now = 0.0
        self.handled = 0  # events applied (not held): what the shell may have missed changes since
        self.window = Window(self, window, depth)
        self._jobs: dict[str, _Job] = {}
        self._classes: dict[tuple, _Class] = {}
        self._running: dict[str, _Job] = {}
        self._on_node: dict[str, set[str]] = {}
        self._exclusive_running: _Job | None = None
        self._unresolved: list[_Job] = []
        self._open = 0  # jobs not yet in a final state
        self._seq = 0
        self._counts: dict[str, int] = {}
        self.moved = None  # observer: (step, old state, new state) at each change (fleet.control.submissions)
        self._capacity: Capacity | None = None
        self._pending = PendingDemands()  # demands of waiting and ready steps (fleet.core.unfit)
        self._quiet = Quiet(self)  # the classes a pass need not look at (fleet.core.quiet)
        self._demands = Demands(mpi_blocks)  # each kind of step's, shared (fleet.core.demands)
        # A changed (or rerun) definition of a running step, with its deps and whether
        # it runs serially: it replaces the running one when that ends.
        self._after: dict[str, tuple[StepSpec, tuple[str, ...], bool]] = {}
        self._entry: _Entry | None = None  # a chunked submission part way in
        self._held: deque[tuple[Event, float]] = deque()  # events that came meanwhile
        self.deadline = Deadline()  # the allocation's end and its drain (fleet.core.deadline)
        self.fencing = Fencing()  # lost nodes whose steps wait for their own stop (fleet.core.fencing)
        self._res.recorded, self._res.queued, self._res.jobs = self.deadline.recorded, self.window.next, self._jobs
        self._phases_init()  # steps that submit steps, wait for them, go on in stages

    # -- public ---------------------------------------------------------------------
    def handle(self, event: Event, now: float) -> list[Decision]:
        """Apply one event at time `now`; return the decisions that follow."""
        entry = self._entry
        if entry is not None and not isinstance(event, EnterMore):
            if self._held or not entry.passes(event):
                self._held.append((event, now))  # after the submission part way in (EnterMore)
                return []
            entry.latest = max(entry.latest, now)  # an exit it owes nothing: handled now
        return self._handle(event, now)

    def _handle(self, event: Event, now: float) -> list[Decision]:
        out: list[Decision] = []
        self.handled += 1
        self._now = now  # when steps made ready by this event became ready
        if isinstance(event, (Submitted, EnterMore)):
            self._go_on(event, now, out)
            return out
        if isinstance(event, (StepExited, Exits)):  # Exits: a loop turn's, in order, then one pass
            for ev in event.exits:
                self._exited(ev, now, out)
        elif isinstance(event, Fenced):
            fencing.settle(self, now, out)
        elif isinstance(event, NodeJoined):
            fencing.settle(self, now, out, event.node.name)  # (held still: its old steps end first)
            fencing.rejoining(self, event.node.name)  # (held for another node: their part here is gone)
            self.pool.add(event.node)
            self._on_node.setdefault(event.node.name, set())
            self._capacity = None
        elif isinstance(event, NodeLost):
            self._lost(event, now, out)
        elif isinstance(event, (Elsewhere, Settled, Reclaim)):
            self._elsewhere(event, out)
        elif isinstance(event, Cancel):
            self._cancel(event, out)
        elif isinstance(event, AllocationEnds):
            self.deadline.ends(event)
        elif isinstance(event, DrainNow):  # (steps handed to a node, not started: dropped there)
            fencing.settle(self, now, out, every=True)  # (nothing starts again: no step runs twice)
            self.deadline.drain(event, self._running.values(), self.window.next.values(), now)
        else:
            raise TypeError(f"not a scheduler event: {event!r}")
        if self.deadline.to_stop:  # the drain's Kills, a bounded number an event (then GoOn)
            self.deadline.stops(out, now)
        self._schedule(now, out)
        return out

    def _go_on(self, event, now: float, out: list[Decision]) -> None:
        """Enter a submission, or its next part; once it is all in, its scheduling pass
        and then the events held meanwhile, in order."""
        if isinstance(event, Submitted):
            self._link_children(event)
            entry = self._entry = _Entry(now, len(event.steps), event.chunk > 0)
            self.deadline.learn(event.durations)
            entry.gen = self._submitting(event, entry.out, entry)
        elif self._entry is None:
            out.append(Ignored("no submission is being entered"))
            return
        entry = self._entry
        try:
            next(entry.gen)
        except StopIteration:
            pass
        else:
            out += entry.out
            entry.out.clear()
            # Linking and resolving follow the last step's placing: all in only at the end.
            out.append(Entering(min(entry.entered, entry.total - 1), entry.total))
            self._let_through(entry, out)
            return
        self._entry = None
        out += entry.out
        if entry.chunked:
            out.append(Entering(entry.total, entry.total))
        self._schedule(entry.latest, out)
        while self._held and self._entry is None:
            out += self.handle(*self._held.popleft())

    def reserve_after(self, seconds: float | None) -> None:
        """Before the first event: how long a ready step waits for a reservation (None: none; core.reservations)."""
        self._res = Reservations(seconds)
        self._res.recorded, self._res.queued, self._res.jobs = self.deadline.recorded, self.window.next, self._jobs

    def entering(self) -> bool:  # whether a chunked submission is part way in (EnterMore goes on with it)
        return self._entry is not None

    def held_only(self) -> bool:  # no step left can start before the drain point (fleet.core.deadline)
        return held_only(self)

    def finished(self) -> bool:
        """True when every submitted step is in a final state."""
        return self._open == 0

    def counts(self) -> dict[str, int]:
        """How many steps are in each state (states with none left out)."""
        return {k: v for k, v in self._counts.items() if v}

    def view(self, step: str) -> JobView:
        """A read-only view of one step."""
        return viewfill.view(self._jobs[step])  # (fleet.core.viewfill: without the frozen __init__)

    def deps_of(self, step: str) -> tuple:  # explicit and by input files, as submitted
        return tuple(self._jobs[step].deps)

    def generation(self, step: str) -> int:
        """The step's generation (what a start records), without a whole view."""
        return self._jobs[step].generation

    def spec_of(self, step: str):
        """The definition the scheduler has for the step now (None: not known)."""
        j = self._jobs.get(step)
        return None if j is None else j.spec

    def placed(self, step: str) -> viewfill.Placed | None:
        """(attempt, placement) of a running step, else None: what a report is checked against."""
        j = self._jobs.get(step)
        return viewfill.Placed(j.attempt, j.placement) if j is not None and j.state == S.RUNNING else None

    def queued(self, step: str) -> viewfill.Placed | None:
        """(attempt, placement) of a step handed ahead to its node (core.window), else None: for early reports."""
        j = self._jobs.get(step)
        return viewfill.Placed(j.attempt, j.placement) if j is not None and j.state == S.QUEUED else None

    def views(self) -> list[JobView]:
        """Every submitted step, in submission order."""
        return [self.view(s) for s in self._jobs]

    def running(self, limit: int | None = None) -> list[JobView]:
        """Running steps in start order (the first `limit` of them)."""
        return [self.view(s) for s in self.running_ids(limit)]

    def running_ids(self, limit: int | None = None):
        """The running steps' ids in start order (the first `limit`), without a view each."""
        return self._running if limit is None else itertools.islice(self._running, limit)

    def queued_on_nodes(self, limit: int) -> list[tuple[str, str, str]]:
        """The first `limit` steps handed ahead to their nodes, in the order they were
        queued: (step, node, the running step it starts after) (fleet.core.window)."""
        return [(sid, pred.placement[0].node, pred.spec.id)
                for sid, pred in itertools.islice(self.window.behind.items(), limit)]

    def running_count(self) -> int:
        """How many steps run now."""
        return len(self._running)

    def running_on(self, node: str) -> list[JobView]:
        """The steps with a part on `node`, in submission order."""
        return [self.view(s) for s in sorted(self._on_node.get(node, ()), key=lambda s: self._jobs[s].seq)]

    def waiting_heads(self, now: float, limit: int) -> list[queueview.Head]:
        """Why ready steps wait: the first of each class of demand, in pass order, at most `limit` (core.queueview)."""
        return queueview.heads(self._classes, self._jobs, self.pool, now, limit, self.deadline.shut())

    def reservations(self) -> list[queueview.Reserved]:
        """The standing reservations, oldest first (fleet.core.reservations)."""
        return queueview.reserved(self._res.plans)

    def state(self, step: str) -> str:
        """The step's state (fleet.core.states)."""
        return self._jobs[step].state

    def state_of(self, step: str) -> str | None:
        """The step's state, or None for a step this scheduler does not have: for callers
        asking of every step of a big submission, most of them new (no KeyError raised)."""
        job = self._jobs.get(step)
        return None if job is None else job.state

    def capacity(self) -> Capacity:
        """The whole allocation's shape, which step widths are decided from."""
        if self._capacity is None:
            self._capacity = Capacity.of(self.pool.nodes())
        return self._capacity

    # -- transitions -------------------------------------------------------------------
    def _set(self, job: _Job, what: str) -> None:
        old = job.state
        new = job.state = S.TRANSITIONS.get((old, what)) or S.advance(old, what)  # (advance raises)
        self._counts[old] = self._counts.get(old, 0) - 1
        self._counts[new] = self._counts.get(new, 0) + 1
        if old == S.READY and self.deadline.held_now:  # (a step held back leaves: cancelled, taken elsewhere)
            self.deadline.left_ready(job)
        if self.moved is not None:
            self.moved(job.spec.id, old, new)
        if job.demand is not None and (old in PENDING) is not (new in PENDING):  # else no count moves
            self._pending.moved(job.demand, old, new)
        if new in S.FINAL:
            self._open -= 1
            if self._parent_of:  # (a child's parent may go on: fleet.core.phases)
                self._ended(job)

    def _add(self, spec: StepSpec, deps: tuple[str, ...], serial: bool) -> _Job:
        job = _Job(spec, deps)
        if serial:
            job.exclusive, job.prio = True, 0
        # Setup order within a suite, earlier submissions first across suites.
        job.seq = self._seq
        self._seq += 1
        self._jobs[spec.id] = job
        if self._parent_of:
            self._added(job)  # a child: counted in its parent, queued ahead (fleet.core.phases)
        self._counts[S.WAITING] = self._counts.get(S.WAITING, 0) + 1
        self._open += 1
        return job

    def _resolve(self, job: _Job, out: list[Decision]) -> None:
        """Decide the step's width once, from the whole allocation."""
        d = self._demands.of(self.capacity(), job.spec)  # once per kind of step (fleet.core.demands)
        if isinstance(d, str):
            self._set(job, "impossible")
            out.append(Unrunnable(job.spec.id, d))
            self._block_descendants(job, job.spec.id, out)
            return
        job.demand = d
        self._pending.add(d)
        if job.unmet == 0:
            self._make_ready(job)

    def _make_ready(self, job: _Job) -> None:
        self._set(job, "deps_met")
        self._enqueue(job)

    def _enqueue(self, job: _Job, since: float | None = None) -> None:
        """Into its class of ready steps, ready since ``since`` (None: now)."""
        key = ("exclusive",) if job.exclusive else (job.demand,)
        job.ready_at = self._now if since is None else since
        cls = self._classes.get(key)
        if cls is None:
            cls = self._classes[key] = _Class(key, job.demand, job.exclusive)
        heapq.heappush(cls.heap, (job.prio, self.ranks.key(job), job.spec.id))
        if cls.heap[0][2] is job.spec.id:  # its first step changed (fleet.core.quiet)
            self._quiet.changed(cls)

    def _exited(self, ev: StepExited, now: float, out: list[Decision]) -> None:
        job = self._jobs.get(ev.step)
        if job is not None and job.state == S.QUEUED and job.attempt == ev.attempt:
            return self.window.dropped(job, ev.outcome, ev.reason, out)  # its node never started it
        if job is None or job.state != S.RUNNING or job.attempt != ev.attempt:
            return out.append(Ignored(f"exit of {ev.step!r} attempt {ev.attempt}: not running"
                                      + (f" (now {job.state}, attempt {job.attempt})" if job else " (unknown step)")))
        if self.window.began and self.window.unbegun(job, ev.outcome, ev.reason, out):
            return  # promoted in this batch, and its node never started it
        goes_on = ev.outcome in S.AT_ONCE or ev.went_on  # (as its node saw it: it dropped what was queued behind)
        if self.deadline.interrupts(job, ev.outcome):  # stopped by the drain: no attempt
            self._stop_running(job, goes_on)
            self._set(job, "interrupted")
            return
        if ev.outcome not in S.EXIT_OUTCOMES:
            raise ValueError(f"unknown outcome {ev.outcome!r}")
        went_on = job.cancelled and ev.outcome in S.CONTROL  # (its exit record says it goes on: Finished.ran)
        self._stop_running(job, goes_on)
        if job.cancelled and ev.outcome != S.SUCCEEDED:  # lost, failed on its SIGTERM, or going on: cancelled still
            said = went_on or ev.outcome == S.LOST  # (its node lost before it stopped: the reason says both)
            ev = StepExited(ev.step, ev.attempt, S.CANCELLED, f"cancelled ({ev.reason})" if said else ev.reason)
        if job.spec.id in self._after:
            self._next_generation(job, ev, out)
            return
        if ev.outcome in S.CONTROL:  # wait, next, restart, broken: fleet.core.phases
            self._control(job, ev, out)
            return
        if ev.outcome in S.NOT_RETRIED or ev.final:  # never retried
            self._set(job, "stopped" if ev.outcome == S.STOPPED else ev.outcome)
            out.append(Finished(job.spec.id, job.attempt, ev.outcome, ev.reason, ran=not went_on))
            self._block_descendants(job, job.spec.id, out)
            return
        if ev.outcome == S.SUCCEEDED:  # (with children still to end: after them, fleet.core.phases)
            if not (self._families and self._succeeds_later(job)):
                self._set(job, S.SUCCEEDED)
                self._released(job, out, ev.reason)
            return
        if job.attempt - job.unsure <= job.spec.retries:  # (fleet.core.unsure: not those)
            self._set(job, "retry")
            job.attempt += 1
            out.append(Finished(job.spec.id, job.attempt - 1, ev.outcome, ev.reason, goes_on=True))
            out.append(Retry(job.spec.id, job.attempt, f"attempt {job.attempt - 1} {ev.outcome}"))
            self._enqueue(job)
            self._pending.back(job)
            return
        self._set(job, ev.outcome)
        out.append(Finished(job.spec.id, job.attempt, ev.outcome, ev.reason))
        self._block_descendants(job, job.spec.id, out)

    def _next_generation(self, job: _Job, ev: StepExited, out: list[Decision]) -> None:
        """A running step that a later submission changed (or reran) ended: its outcome
        is reported, but neither retried nor passed to its dependents; the submitted
        definition runs next, as a new generation. (Should that one be blocked at once,
        only its Blocked is said, so no submission counts the step's end twice.)"""
        spec, deps, serial = self._after.pop(job.spec.id)
        if not any(d in self._jobs and self._jobs[d].state in S.FINAL - S.GOOD for d in deps):
            out.append(Finished(job.spec.id, job.attempt, ev.outcome, ev.reason, goes_on=True))
        new: list[_Job] = []
        new.append(self._renew(job, spec, deps, serial, new))
        self._enter(new, set(), frozenset(), frozenset(), out)

    def _stop_running(self, job: _Job, goes_on: bool = False) -> None:
        if not self.window.stop(job, goes_on):  # else a queued step takes its resources
            self.pool.release(job.placement)
        self._res.stopped(job, self.pool)
        del self._running[job.spec.id]
        for slot in job.placement:
            on = self._on_node.get(slot.node)
            if on is not None:
                on.discard(job.spec.id)
        if self._exclusive_running is job:
            self._exclusive_running = None
        job.placement = ()  # (its slots went back to the pool: a finished step holds none, ~350 B each)

    def _lost(self, ev: NodeLost, now: float, out: list[Decision]) -> None:
        if self.pool.has(ev.node):  # (the words of a step found unfit later: fleet.core.unfit.judge)
            self._pending.lost = ev.node
        fencing.lost(self, ev, now, out)  # (held until its own side has stopped them: fleet.core.fencing)

    # -- the pass --------------------------------------------------------------------------
    def _schedule(self, now: float, out: list[Decision]) -> None:
        if not self._jobs:  # nothing ever submitted: a pass decides nothing (a fleet's joins; simulate's 1,000,000)
            return
        if self._later:  # parents that succeeded before their children, now final (fleet.core.phases)
            self._succeed_later(out)
        if self._pending.again:  # ready again after a loss: does it still fit? (fleet.core.unfit)
            unfit.judge(self, out)
        aside: list[tuple[_Class, tuple]] = []  # held steps taken off their classes for this pass (deferral.held)
        whole = self._pass(now, out, aside)
        for cls, entry in aside:  # back in their classes (one a start emptied was dropped: made again)
            heapq.heappush(self._classes.setdefault(cls.key, cls).heap, entry)
            self._quiet.changed(cls)
        if whole and self._exclusive_running is None:
            self.window.fill(out)

    def _pass(self, now: float, out: list[Decision], aside: list) -> bool:
        """One pass over the ready steps; False if it ended early (nothing more may
        start now, or the shell is to feed the rest)."""
        self.window.begin(now, out)
        if self._unresolved and self.pool.nodes():
            pending, self._unresolved = self._unresolved, []
            for job in pending:
                if job.state == S.WAITING:
                    self._resolve(job, out)
        if self._exclusive_running is not None or self.deadline.drained:
            return False
        whole = self._walk(now, out, aside, self._quiet.start(now))  # (reservations' begin, then fleet.core.quiet)
        self._quiet.finish(whole)
        return whole

    def _walk(self, now: float, out: list[Decision], aside: list, heads: list) -> bool:
        pool, res, quiet = self.pool, self._res, self._quiet
        started = 0
        while True:
            got = quiet.next() if quiet.walking else heapq.heappop(heads) if heads else None
            if got is None:
                break
            (_, _, sid), key = got
            cls = self._classes[key]
            job = self._jobs[sid]
            if self.deadline.drain_at is not None and too_late(self, job, cls, heads, now, out):
                continue
            if self.ranks.deferral is not None and held(self, job, cls, heads, now, aside, out):
                continue
            if cls.exclusive and (self._running or started):
                why = W.WaitReason(W.ALONE, detail=f"waiting for {counted(len(self._running), 'running step')} to finish")
                self._wait(job, why, len(cls.heap) - 1, out)
                self.window.alone(cls.heap[0], out)  # nor is a step handed ahead begun (core.windoworder)
                return False  # nothing ordered after it starts: the fleet drains for it
            placement = res.place(job, key, pool, now, cls.exclusive)  # (its own demand: "exclusive" has all)
            if placement is None:
                cls.blocked_at = pool.releases.end()
                why = W.short_of(self.pool, job.demand)  # before a reservation made for it takes its holds
                self._wait(job, res.held_back(job, key, pool, now) or why, len(cls.heap) - 1, out)
                if cls.exclusive:
                    return False
                if quiet.walking:  # (nothing free now? fleet.core.quiet)
                    quiet.check()
                continue
            heapq.heappop(cls.heap)
            cls.blocked_at = None
            if not cls.heap:  # passes walk live classes only; a new one is made when needed
                del self._classes[key]
            self._set(job, "start")
            job.placement = placement
            job.started_at = now
            job.why = None
            res.started(job, now, placed=True)
            self._running[sid] = job
            for slot in placement:
                self._on_node[slot.node].add(sid)
            out.append(made.start(sid, job.attempt, placement, self._resume_of(sid) if self._families else None))
            self.window.started(job)
            started += 1
            if cls.exclusive:
                self._exclusive_running = job
                return False
            if cls.heap:
                heapq.heappush(heads, (cls.heap[0], key))
            if started >= self.pass_starts and quiet.more():  # a bounded pass: the shell feeds the rest (GoOn)
                out.append(GoOn())
                return False
            if quiet.walking:
                quiet.check()
        return True

    def _wait(self, job: _Job, why: W.WaitReason, behind: int, out: list[Decision]) -> None:
        # Said again only when the words change: the free counts behind an unchanged
        # "no node has ..." move with every start and would repeat the same wait. Nor
        # when only the reserved step's id does (design-decisions.md).
        was = job.why
        if was is None or (was != why and was.text() != why.text()):
            job.why = why  # (what `fleet status` shows: fleet.core.queueview)
            if not (was is not None and was.cause == why.cause == W.RESERVED and was.cores == why.cores):
                out.append(Wait(job.spec.id, why, behind))
