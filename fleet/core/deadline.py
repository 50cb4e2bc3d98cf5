"""The end of the allocation, in the pure core: which steps no longer fit before it,
and the drain that stops the running ones.

An allocation ends at a known time (read once when the fleet comes up:
fleet.site.allocation). The drain point is some time before it (`--drain-before`).
From the drain point on nothing starts, and every running step is stopped (a Kill:
SIGTERM, SIGKILL after its grace); how it then ends is `interrupted`, which is no
attempt of the step: the next run runs it. Before the drain point, a step whose
expected duration (fleet.core.durations) does not fit in the time left to it is not
started: it waits with cause DEADLINE and is not looked at again (the time left only
shrinks). A step with no expected duration is started; if it runs into the drain
point it is interrupted there like any other.

The scheduler holds one Deadline and calls it from its pass (refuse), on its events
(AllocationEnds, DrainNow) and on exits after the drain (interrupts).

An exit after the drain is interrupted unless its outcome is the step's own, not the
drain's (interrupts): a timeout or an out_of_memory (its zygote reports the outcome it
was stopping the step for, and the drain's SIGTERM, coming after, does not change it),
and a step `fleet cancel` stopped, which ends cancelled. Those are what they would have
been without the drain (an attempt: a timed-out step with retries left is retried by
the next run). After a drain for a full run directory alone, every exit but a success
or a cancel is interrupted (a failure may be the full disk's).

The drain's SIGKILL comes before the allocation's end: a step's grace (SIGTERM to
SIGKILL) is cut to the time left until END_MARGIN_S before the end (at most half of the
drain margin, so that a short job's drain leaves its steps some grace), so that the
batch system does not kill the job before `fleet run` says how it ended and a job script
resubmits itself. A step already being stopped (its timeout, a cancel) is cut the same
way (the Kill's grace: fleet.node.stopping takes the sooner SIGKILL).

When nothing runs any more and every step left is held back (or waits for one that is),
no step can start before the drain point: held_only() says so, and the coordinator ends
their submissions then (`not_started`) instead of idling to the drain point.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Iterable, Mapping

from fleet.core import states as S
from fleet.core import waits as W
from fleet.core.decisions import GoOn, Kill
from fleet.core.durations import expected_s
from fleet.core.suite import StepSpec


@dataclass(frozen=True)
class AllocationEnds:
    """The allocation ends at `end`; the drain point is `drain_at` (both in the
    scheduler's time: the coordinator's wall clock as it was when the end was read,
    simulate's own). `shift`: how far that wall clock has stepped since (NTP, an
    operator's `date -s`), measured against the coordinator's monotonic clock: every
    decision takes the end and drain point `shift` later in the scheduler's time, so
    they stay where the monotonic clock puts them; the end is shown as read."""

    end: float
    drain_at: float
    source: str = ""  # where the end came from, in words (shown by `fleet status`)
    shift: float = 0.0


@dataclass(frozen=True)
class DrainNow:
    """The drain point came (its timer, or the batch system's warning signal): start
    nothing more and stop every running step. With `stop_running` False (the run
    directory's file system is full or read-only: fleet.control.drain) nothing more starts either,
    but the running steps go on to their own ends."""

    reason: str = "the allocation ends"
    stop_running: bool = True


HELD_LISTED = 20  # steps held back that `fleet status` names (the rest are counted)
DRAIN_KILL = "drained: "  # a drain's Kill reasons start so (the coordinator's records say why)
# The drain's Kills a handled event says at most; the rest after a GoOn, at the shell's
# next turn (at a job's end a 10,000-node fleet has 640,000 steps running: said at once,
# they held the coordinator's loop, and a status answer, for 3 s).
DRAIN_STOPS = 10_000
END_MARGIN_S = 15.0  # the drain's SIGKILLs come this long before the end at least (at most half the drain margin)
HELD_BACK = "held_back"  # what a ready step held back by the allocation's end is counted (as_counted)
NOT_STARTED = "not_started"  # what a step the drain left unstarted is counted (fleet.control.closing's outcome)
UNSTARTED = (S.WAITING, S.READY, S.QUEUED)  # the states of a step that has not started (the drain leaves it so)
OWN = frozenset({S.TIMED_OUT, S.OUT_OF_MEMORY})  # an exit's outcome the drain does not make interrupted


def apart(more: float, less: float) -> tuple[str, str]:
    """Two durations in whole seconds, or with the fewest decimals (up to 6) that show
    the first is the longer: "3 s ..., 3 s left" read as a contradiction."""
    for places in range(7):
        if round(more, places) > round(less, places):
            break
    return f"{more:.{places}f}", f"{less:.{places}f}"


class Deadline:
    """The allocation's end as the scheduler knows it (nothing known: no end)."""

    __slots__ = ("end", "drain_at", "shift", "source", "drained", "reason", "recorded", "held", "held_first",
                 "stopping",
                 "held_ids", "held_now", "to_stop", "_stop_attempt", "_stop_why", "_stop_at", "dropping")

    def __init__(self) -> None:
        self.end: float | None = None
        self.drain_at: float | None = None
        self.shift = 0.0  # the wall clock's step since the end was read (AllocationEnds.shift)
        self.source = ""
        self.drained = False
        self.stopping = False  # the drain stopped the running steps (DrainNow.stop_running)
        self.reason = ""
        self.recorded: dict[str, float] = {}  # step id -> work seconds of an earlier run
        self.held = 0  # steps not started because they would not fit before the drain point
        self.held_first: list[tuple[str, str]] = []  # the first HELD_LISTED of them: (step, reason)
        self.held_ids: set[str] = set()  # each counted once, however often it is asked about
        # Of the ready steps, those held back now (left their class for good: too_late),
        # kept as they come and go so that `fleet status` counts them apart in O(1).
        self.held_now = 0
        # The drain's Kills not said yet (stops), from _stop_at on: each job, its attempt and
        # the reason, in lists side by side (no object made a step: at a job's end a
        # tuple for each of 640,000 steps woke the collector six times in one event).
        self.to_stop: list = []
        self._stop_attempt: list[int] = []
        self._stop_why: list[str] = []
        self._stop_at = 0
        self.dropping: set[str] = set()  # queued steps the drain cancelled (not `fleet cancel`)

    def ends(self, ev: AllocationEnds) -> None:
        """Take the allocation's end (a later one replaces it: the same end, the wall
        clock having stepped, comes again with its shift)."""
        self.end, self.drain_at, self.source = ev.end, min(ev.drain_at, ev.end), ev.source
        self.shift = ev.shift

    def learn(self, durations: Mapping[str, float]) -> None:
        """Recorded durations a submission brought (fleet.core.durations.recorded)."""
        if durations:
            self.recorded.update(durations)

    def refuse(self, spec: StepSpec, now: float) -> W.WaitReason | None:
        """Why the step may not start now for the allocation's end; None if it may."""
        if self.drain_at is None:
            return None
        left = self.drain_at + self.shift - now
        if left <= 0:
            return W.WaitReason(W.DEADLINE, detail="the drain point passed: nothing starts")
        exp = expected_s(spec, self.recorded)
        if exp is None or exp <= left:
            return None
        how = "estimate" if spec.estimate is not None else "earlier run"
        took, short = apart(exp, left)
        why = W.WaitReason(W.DEADLINE, detail=f"expected to take {took} s ({how}), {short} s left before the drain point")
        if spec.id not in self.held_ids:  # (the node window asks too: fleet.core.window)
            self.held_ids.add(spec.id)
            self.held += 1
            if len(self.held_first) < HELD_LISTED:
                self.held_first.append((spec.id, why.text()))
        return why

    def left_ready(self, job) -> None:
        """A ready step leaves the ready state (cancelled, taken by another shard, forgotten
        for a new generation): no longer held back, if it was (its last Wait is the end's)."""
        if job.why is not None and job.why.cause == W.DEADLINE:
            self.held_now -= 1

    def in_time(self, spec: StepSpec, start: float, now: float) -> bool:
        """Whether a step that would start at `start` (math.inf: nobody knows when, as
        a step queued behind one with no expected end) is expected to end by the drain
        point; as refuse, a step with no expected duration is, before it. Nothing is
        recorded: the node window asks it of a step it may hand ahead (fleet.core.window)."""
        if self.drain_at is None:
            return True
        exp = expected_s(spec, self.recorded)
        drain_at = self.drain_at + self.shift
        if exp is None:
            return now < drain_at
        return max(start, now) + exp <= drain_at

    def shown(self) -> dict | None:
        """The end as `fleet status` shows it (None: no end known, no drain): the end and
        drain point as read, and `shift`, how far the wall clock has stepped since (the
        time left is end + shift - now: before 2026-12-07 a wall clock stepped forward
        showed the end passed while the fleet ran on)."""
        if self.end is None and not self.drained:
            return None
        return dict(end=self.end, drain_at=self.drain_at, shift=self.shift, source=self.source, drained=self.drained,
                    reason=self.reason, held=self.held,
                    held_steps=[dict(step=s, reason=r) for s, r in self.held_first])

    def shut(self) -> W.WaitReason | None:
        """Why a step the drain left does not start, as `fleet status` gives it instead of
        what it last waited for (a stale shortage of cores or memory on idle nodes); None
        before the drain."""
        if not self.drained:
            return None
        return W.WaitReason(W.DEADLINE, detail=f"not started: drained ({self.reason}); the next run runs it")

    def drain(self, ev: DrainNow, running: Iterable, queued: Iterable = (), now: float | None = None) -> None:
        """The drain point (`now`): nothing starts from now on. Each running step (a job)
        is to be killed, unless the drain lets them run (DrainNow.stop_running); one
        already being killed (`fleet cancel`) only if its grace is to be cut (grace). A
        drain that let them run may be followed by one that stops them (the drain point
        after a full disk). Each step handed to a node and not started (`queued`) is
        marked cancelled now, and is to be dropped there. The Kills are said by stops(),
        at most DRAIN_STOPS an event."""
        why = DRAIN_KILL + ev.reason
        # The queued first: a node told to stop a running step before it hears that the
        # step queued behind it is dropped may start that one as the first ends.
        stop: list = []
        for j in queued:
            j.cancelled = True
            self.dropping.add(j.spec.id)
            stop.append(j)
        if not (self.stopping or (self.drained and not ev.stop_running)):
            self.drained = True
            self.reason = ev.reason
            if ev.stop_running:
                self.stopping = True
                stop += [j for j in running if not j.cancelled or self.grace(j.spec, now) is not None]
        # Node by node (in the order each first appears): a node's Kills then go out
        # together, one message to its agent, not one a chunk.
        by_node: dict[str, list] = {}
        for j in stop:
            node = j.placement[0].node if j.placement else ""
            kept = by_node.get(node)
            if kept is None:
                by_node[node] = [j]
            else:
                kept.append(j)
        for jobs in by_node.values():
            self.to_stop += jobs
            self._stop_attempt += [j.attempt for j in jobs]
            self._stop_why += [why] * len(jobs)

    def stops(self, out: list, now: float | None = None) -> None:
        """The next DRAIN_STOPS of the drain's Kills (said at `now`), each for a step still
        running (or queued) at that attempt, and GoOn if more are left."""
        jobs, attempts, whys = self.to_stop, self._stop_attempt, self._stop_why
        i, n, end = self._stop_at, 0, len(jobs)
        while i < end and n < DRAIN_STOPS:
            j, attempt = jobs[i], attempts[i]
            if j.attempt == attempt and j.state in (S.RUNNING, S.QUEUED):
                grace = self.grace(j.spec, now) if j.state == S.RUNNING else None
                out.append(Kill(j.spec.id, attempt, whys[i], grace))
                n += 1
            i += 1
        if i < end:
            self._stop_at = i
            out.append(GoOn())
        else:
            self.to_stop, self._stop_attempt, self._stop_why, self._stop_at = [], [], [], 0


    def margin(self) -> float:
        """How long before the end the drain's last SIGKILL comes (end_margin); 0 with no end known."""
        return 0.0 if self.end is None or self.drain_at is None else end_margin(self.end - self.drain_at)

    def grace(self, spec: StepSpec, now: float | None) -> float | None:
        """The grace a step stopped by the drain at `now` gets, if its own would run past
        END_MARGIN_S before the end (see the module's doc); None: its own."""
        if self.end is None or now is None:
            return None
        left = max(0.0, self.end + self.shift - self.margin() - now)
        return left if spec.grace > left else None

    def interrupts(self, job, outcome: str) -> bool:
        """Whether the exit of `job` with `outcome` is the drain's (interrupted, no
        attempt), not its own (see the module's doc). False before any drain."""
        return self.drained and by_drain(job, outcome, self.stopping, self.dropping)


def as_counted(counts: Mapping[str, int], drained: bool, held: int = 0) -> dict[str, int]:
    """Steps by state (Scheduler.counts) as `fleet status` counts them: once drained, the
    steps that will not start here (waiting, ready, or queued on a node, which drops them)
    are `not_started`, as `fleet run`, the report and the audit call them. Before, the
    `held` ready steps held back by the allocation's end (Deadline.held_now: they will not
    start in this allocation) are `held_back`, not ready (before 2026-12-07 "ready").
    O(states)."""
    if not drained:
        out = dict(counts)
        if held > 0:
            ready = out.get(S.READY, 0) - held
            if ready > 0:
                out[S.READY] = ready
            else:
                out.pop(S.READY, None)
            out[HELD_BACK] = held
        return out
    out = {k: n for k, n in counts.items() if k not in UNSTARTED}
    left = sum(counts.get(k, 0) for k in UNSTARTED)
    if left:
        out[NOT_STARTED] = left
    return out


def end_margin(drain_before: float) -> float:
    """How long before the allocation's end the drain's last SIGKILL comes, for a drain
    point `drain_before` seconds before it: END_MARGIN_S, at most half of that."""
    return min(END_MARGIN_S, max(0.0, drain_before) / 2)


def too_late(sched, job, cls, heads: list, now: float, out: list) -> bool:
    """True if the step cannot end before the drain point: it leaves its class (of the
    scheduler's pass) for good, with its Wait, and the class's next step is tried."""
    why = sched.deadline.refuse(job.spec, now)
    if why is None:
        return False
    sched.deadline.held_now += 1  # (once a ready spell: it leaves its class for good)
    heapq.heappop(cls.heap)
    sched._quiet.changed(cls)
    sched._wait(job, why, 0, out)
    if cls.heap:
        heapq.heappush(heads, (cls.heap[0], cls.key))
    else:
        del sched._classes[cls.key]
    return True


def held_only(sched) -> bool:
    """True when no step left can start before the drain point: nothing runs, is handed
    to a node, is being entered, runs in another fleet or waits for its children, and
    every ready step was held back by the allocation's end (the waiting ones wait for
    those). O(1)."""
    d = sched.deadline
    if not d.held_ids or d.drained or sched._running or sched.window.next or sched._entry is not None:
        return False
    counts = sched._counts
    if counts.get(S.ELSEWHERE) or counts.get(S.SUSPENDED) or counts.get(S.QUEUED):
        return False
    ready = counts.get(S.READY, 0)
    return ready > 0 and ready == d.held_now


def by_drain(job, outcome: str, stopping: bool, dropping: set) -> bool:
    """Whether a drained fleet's exit of `job` with `outcome` is the drain's: not a
    success, nor a `fleet cancel` (a job cancelled, not by the drain: `dropping`), nor,
    after a drain that stops the running steps (`stopping`), a timeout or an out_of_memory."""
    if outcome == S.SUCCEEDED:
        return False
    if job is not None and job.cancelled and job.spec.id not in dropping:
        return False
    return not (stopping and outcome in OWN)


def drained_exit(sched, step: str, outcome: str, full: bool) -> bool:
    """by_drain for a running step's exit in a coordinator that drained (`full`: for a
    full run directory alone), which its scheduler may not have heard yet (the DrainNow
    waits in the coordinator's inbox): the coordinator records it interrupted, as the
    scheduler will take it."""
    return by_drain(sched._jobs.get(step), outcome, not full, sched.deadline.dropping)
