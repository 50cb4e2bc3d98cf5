"""A node's window: steps handed to a node ahead of time (issue 12, item 4).

Without it a core on a node idles from the moment its step ends until the coordinator
has heard of the exit, decided the next start and sent it back. With it, the scheduler
may hand a node up to `size` further steps (the window), each QUEUED behind one running
step there whose resources it will take: the node starts it the moment that step's
process is reaped, and reports the start and the exit afterwards as usual.

The window is decided here, in the pure core, by the same pass that starts steps, so
the decisions stay deterministic: the same events give the same queues. The rules:

- only a step that did not fit the free resources is queued, after the pass has
  started everything that fits (a queued step never takes a free core);
- it goes behind a RUNNING step of the same demand (cores, GPUs, memory: the same
  class) on one node, so its placement is exactly its predecessor's: the resources
  pass from one to the other when the predecessor ends, and nothing else moves
  (none while an earlier ready step of another class would take them: fleet.core.windowfair);
- which one (fleet.core.windowpick): the one expected to END SOONEST (start +
  fleet.core.durations.expected_s; none known: last; ties in start order), and none
  while the step could run in full in a slot that already has a step queued before
  that one ends, or while that one's end is unknown and such a slot's is known (an
  unknown end is not soon): it waits for that slot; not one whose dependent, waiting for it
  alone, comes before the step in the pass's order (priority, fleet.core.ranks) and fits
  its resources: that dependent takes them when it ends, as without a window (the window
  keeps the order of ready steps and chains);
- each running step has at most `depth` steps queued behind it (default 1), and a node
  at most `size` (None: as many as the node has cores times the depth, i.e. the next
  `depth` steps of every one-core slot). With a depth above 1 the queued steps of a slot form a chain: each
  waits for the one before it, and the last one (the tail) may take another behind it
  while the chain is shorter than the depth; its expected end is its predecessor's
  expected end plus its own expected duration (unknown: unknown). A queued step that
  leaves the chain without starting hands its follower to its own predecessor, as the
  node does (fleet.node.queued); only a chain's tail is taken back, or a chain from a
  step on (fleet.core.windoworder);
- steps that run alone, span nodes or are placed on several nodes are never queued,
  nor queued behind;
- nothing is queued on a node a reservation takes (fleet.core.reservations): what the
  reserved step waits for must come back to the pool; a plan counts the steps already
  queued there that come before its step in the order (their predecessor's resources
  come back when they end), and the others are taken back (fleet.core.windoworder);
- the order of ready steps is kept (fleet.core.windoworder): a queued, not yet begun
  step that comes after a ready step of its demand that cannot start, after a step
  that runs alone and waits, or after a step that waits for its predecessor alone and
  would take its resources, is taken back for it (a Withdraw; the node decides, as
  below), latest in the order first;
- near the allocation's end a step is queued only behind a predecessor it is expected
  to end after, before the drain point (its start is that one's expected end; unknown:
  it is not known to, and waits in the ready set; fleet.core.deadline.in_time);
- a queued step is not an attempt until it starts: when its predecessor ends here
  (exit, cancel, claimed elsewhere: however it stops) it becomes RUNNING on the
  predecessor's placement (a Begin decision); when the node (or its zygote) is lost first,
  it returns to the ready set as its next attempt, as it may have started there unheard
  (Unqueued, fleet.core.unsure); `fleet cancel` asks the node
  to drop it (a Kill), and the node's report ends it; another fleet's claim sends it
  ELSEWHERE like a started step;
- a queued step is not stuck when cores of its demand free elsewhere first: with no
  ready step of that demand waiting for them, it is taken back (a Withdraw,
  fleet.core.windowback), the one behind the latest expected end first; its node drops
  it (ready again, its attempt unused: Unqueued) unless its predecessor ended first and
  it started there: the node's answer decides, so it runs once.

Cost: a pass visits the classes left with ready steps and queues at most one step per
open predecessor, so it stays O(classes + starts + queued), plus O(log running) per
queue for the heaps by expected end; a node whose window is full has its open
predecessors set aside until one of its queued steps leaves the window, and a held one
(its dependent comes first) until a step that comes before that dependent is ready.
A predecessor's dependents are walked when it is first looked at (then cached), which
its own exit costs anyway. Taking back costs nothing in a pass with no free core, else
O(demands with queued steps) plus O(log queued) per step taken back.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from fleet.core import states as S
from fleet.core import waits as W
from fleet.core.deadline import DRAIN_KILL
from fleet.core.decisions import Finished, GoOn, Kill, Wait
from fleet.core.durations import expected_s
from fleet.core.windowback import Withdraw, WindowBack
from fleet.core.windowchain import WindowChain
from fleet.core.windowfair import WindowFair
from fleet.core.windoworder import WindowOrder
from fleet.core.windowpick import _Lazy, WindowPick
from fleet.core.resources import Demand, Placement
from fleet.core.unsure import Unqueued, spend


@dataclass(frozen=True)
class Queue:
    """Hand this attempt to its node now: it starts there, on `placement`, when the
    running step `after` ends (the node needs no further word)."""

    step: str
    attempt: int
    placement: Placement
    after: str
    resume: object = None  # a step that goes on (fleet.core.phases.Resume), as Start has it


@dataclass(frozen=True)
class Begin:
    """A queued step took its predecessor's resources when that one ended: it runs now (the node started it then)."""

    step: str
    attempt: int
    placement: Placement
    after: str


__all__ = ["Queue", "Begin", "Unqueued", "Withdraw", "Window"]


class Window(WindowPick, WindowBack, WindowChain, WindowOrder, WindowFair):
    """The scheduler's queues per node (a part of fleet.core.scheduler.Scheduler)."""

    def __init__(self, sched, size: int | None = 0, depth: int = 1):
        if size is not None and size < 0:
            raise ValueError(f"window must be >= 0 or None, not {size!r}")
        if depth < 1:
            raise ValueError(f"window depth must be >= 1, not {depth!r}")
        self.sched = sched
        self.size = size  # per node; None: the node's cores; 0: no window
        self.depth = depth  # steps queued behind one running step at most (a chain above 1)
        self.full: set[str] = set()  # chain tails at the depth: they take one once the chain's head starts
        self.next: dict[str, object] = {}    # predecessor id -> the job queued behind it
        self.behind: dict[str, object] = {}  # queued id -> its predecessor's job
        self.count: dict[str, int] = {}      # node -> steps queued there
        # Running steps that may take a step behind them, by demand, soonest expected end first.
        self.taking: dict[Demand, _Lazy] = {}
        self.ends: dict[str, float] = {}  # running id -> its expected end (inf: none known)
        self.held: dict[Demand, _Lazy] = {}  # open ones a dependent of theirs comes before the class's head
        self.chained: dict[Demand, _Lazy] = {}  # running ones with a step behind: when that one should end
        self.shelved: dict[str, dict] = {}  # node a reservation takes -> its open ones (entry, job)
        self.blocker: dict[str, tuple] = {}  # held id -> (the dependent's pass key, the dependent)
        self._n = 0  # start order among equal expected ends
        self.parked: dict[str, dict[str, object]] = {}  # node -> open ones while its window is full
        self.began: dict = {}  # step -> (job, predecessor, taken back why): promoted since the last pass, Begin unsaid
        self._back_init()  # queued steps that may be taken back (fleet.core.windowback)
        self._order_init()  # and taken back for a step that comes before them (fleet.core.windoworder)
        self._fair_init()  # the ready classes' first steps, for the order across demands (fleet.core.windowfair)

    @property
    def on(self) -> bool:
        """Whether the scheduler queues steps on nodes at all."""
        return self.size != 0

    def queued(self) -> int:
        """How many steps are queued on nodes now."""
        return len(self.behind)

    def after(self, step: str) -> str | None:
        """The running step a queued step waits for (None if it is not queued)."""
        pred = self.behind.get(step)
        return pred.spec.id if pred is not None else None

    # -- hooks from the scheduler ---------------------------------------------------------
    def started(self, job, now: float | None = None) -> None:
        """`job` runs now (since `now`, else its started_at): steps of its demand may be
        queued behind it."""
        sid = job.spec.id
        if self.once:  # taken back once, started now
            self.once.discard(sid)
        if self.size == 0 or job.exclusive or len(job.placement) != 1 or job.demand is None or job.demand.span:
            return
        if (self.went_on and sid in self.went_on) or (self.early and sid in self.early):
            return  # its node's drops to come first, or its exit (fleet.core.windoworder: _stays, _went_on_first)
        if sid not in self.ends:  # its expected end, once per start (it is opened again after a queued one leaves)
            exp = expected_s(job.spec, self.sched.deadline.recorded)
            at = now if now is not None else job.started_at
            self.ends[sid] = at + exp if exp is not None and at is not None else math.inf
        node = job.placement[0].node
        n = self.count.get(node)  # (none queued there: room, as a node in the pool has a core)
        if n is not None and n >= self._limit(node):
            self.parked.setdefault(node, {})[sid] = job
        else:
            self._open(job)

    def _open(self, job) -> None:
        preds = self.taking.get(job.demand)
        if preds is None:
            preds = self.taking[job.demand] = _Lazy()
        self._n += 1
        preds.put((self.ends[job.spec.id], self._n), job.spec.id, job)

    def stop(self, job, goes_on: bool = False) -> bool:
        """`job` stops running; True if a queued step takes its resources (the caller
        then keeps them from the pool). `goes_on`: it ended asking to run again at once
        (its next stage, a restart): its node drops what was queued behind it (stays)."""
        sid = job.spec.id
        if self.early:
            self.early.discard(sid)
        if goes_on and sid in self.next:
            self._stays(job)
        self._close(job)
        succ = self.next.pop(sid, None)
        if succ is None:
            return False
        del self.behind[succ.spec.id]
        back = self.recalled.get(succ.spec.id) if self.recalled else None  # (for unbegun)
        self._let_go(succ)  # (taken back meanwhile: its node started it first, as it says)
        self.yielded.discard(succ.spec.id)
        self._left(job.placement[0].node)
        sched = self.sched
        sched._set(succ, "start")
        sched._running[succ.spec.id] = succ
        for slot in succ.placement:
            sched._on_node[slot.node].add(succ.spec.id)
        self.began[succ.spec.id] = (succ, sid, back)
        sched._res.started(succ, sched._now)  # its expected end, for reservations' plans
        if self.depth == 1:
            self.started(succ, sched._now)
        elif succ.spec.id in self.next:  # the head of a chain: it keeps its follower
            self._shortened(succ)
        else:  # a tail no longer queued: open again from its real start
            self._close(succ)
            self.full.discard(succ.spec.id)
            self.started(succ, sched._now)
        return True

    def begin(self, now: float, out: list) -> None:
        """Say the promotions since the last pass (Begin), with the time they are known."""
        for succ, pred, _ in self.began.values():
            succ.started_at = now
            out.append(Begin(succ.spec.id, succ.attempt, succ.placement, pred))
        self.began.clear()

    def fill(self, out: list) -> None:
        """After a pass: queue the head of each class left waiting behind open running
        steps of its demand, in the order the pass would start them. At most the
        pass's bound of them (Scheduler.pass_starts), as the pass's starts: then GoOn,
        and the next pass queues the rest (a pool that a big submission has just filled
        has an open running step on every core; benchmarks/README.md, "A million steps
        at 10,000 agents with the window"). Then take back the queued steps stuck while
        cores of their demand are free (fleet.core.windowback)."""
        sched = self.sched
        # Nothing is handed ahead on a node where a reservation waits for resources to come
        # back to the pool (fleet.core.reservations), nor once the fleet drains (fleet.core.deadline).
        if not self.on or sched.deadline.drained:
            self.waits_one.clear()
            return
        if self.waits_one:  # before queueing more (fleet.core.windoworder.resumes)
            self.resumes(out)
        if self.taking or self.held:
            self._fill(out)
        if self.queued_of:  # for the ready steps that come before queued ones (fleet.core.windoworder)
            self._yield(out)
            if sched._res.plans:
                self.reserved(out)
        if self.queued_of:  # queued steps stuck while their cores are free elsewhere (fleet.core.windowback)
            self._recall(out)

    def _fill(self, out: list) -> None:
        sched = self.sched
        reserved = sched._res.nodes() if sched._res.plans else set()  # (grows if a reservation is made meanwhile)
        if self.shelved:
            self._unshelve(reserved)
        heads = []  # from the demands with steps to take one (few), not every class
        for demand in (self.taking.keys() | self.held.keys()) if self.held else self.taking:
            key = (demand,)
            cls = sched._classes.get(key)
            if cls is not None and cls.heap:
                heads.append((cls.heap[0], key))
        heads.sort()
        left = sched.pass_starts  # queued at most, as the pass's starts (then GoOn)
        for _, key in heads:
            if left <= 0:  # a bounded fill: the shell feeds the rest (GoOn)
                out.append(GoOn())
                return
            left -= self._fill_class(sched._classes[key], key, reserved, left, out)
            if left <= 0 and key in sched._classes and self.taking.get(sched._classes[key].demand):
                out.append(GoOn())  # this class has more to queue: the next pass goes on with it
                return

    def _fill_class(self, cls, key, reserved, most: int, out: list) -> int:
        """Queue up to `most` of a class's ready steps behind open running steps of its demand; how many."""
        sched = self.sched
        self._release(cls.demand, cls.heap[0])
        preds = self.taking.get(cls.demand)
        if preds and self._passes(cls, preds.peek()[1]) is not None:
            return 0  # an earlier step of another demand takes those resources when they free
        back: list = []  # past the drain point: open again after this class
        queued = 0
        while preds and cls.heap and queued < most:
            if self._later(cls.demand, preds, cls.heap[0]):
                break  # a slot with a step queued behind frees sooner: the head waits for it
            entry, pred = preds.pop()
            node = pred.placement[0].node
            if node in reserved:  # open again once the reservation is gone
                self.shelved.setdefault(node, {})[pred.spec.id] = (entry, pred)
                continue
            if self.count.get(node, 0) >= self._limit(node):
                self.parked.setdefault(node, {})[pred.spec.id] = pred  # back when its window has room
                continue
            head = cls.heap[0]
            if self.for_res and self.barred(head[2]):  # (fleet.core.windoworder.reserved)
                back.append((entry, pred))
                break
            if not self._behind_ok(sched._jobs[head[2]], pred):
                back.append((entry, pred))  # not known to end before the drain point from there: it waits
                break
            if self._overtaken(pred, head):
                self._hold(pred, entry)
                continue
            if sched._res.handing(sched._jobs[head[2]], sched._now):  # it passes a step over: reserved for it
                reserved |= sched._res.nodes()
                if node in reserved:
                    self.shelved.setdefault(node, {})[pred.spec.id] = (entry, pred)
                    continue
            heapq.heappop(cls.heap)
            sched._quiet.changed(cls)  # (its first step changed: fleet.core.quiet)
            self._queue(sched._jobs[head[2]], pred, out)
            queued += 1
        for entry, pred in back:
            preds.put(entry, pred.spec.id, pred)
        if preds is not None and not preds:
            del self.taking[cls.demand]
        if not cls.heap:  # as the pass does: it walks live classes only
            del sched._classes[key]
        return queued

    def lost(self, node: str, reason: str, out: list) -> None:
        """`node` is gone: its queued steps are ready again, each as its next attempt (it may
        have started: fleet.core.unsure; one cancelled meanwhile ends cancelled, but for the drain's cancel)."""
        # Behind the steps running there (not a scan of every queued step: at a job's end
        # every node is lost, and 10,000 nodes x 640,000 queued steps would be hours).
        on = self.sched._on_node.get(node, ()) if self.count.get(node) else ()
        chains = [self._chain_of(self.next[p]) for p in on if p in self.next]
        for chain in chains:  # each chain's tail first, so that nothing is handed on
            for job in reversed(chain):
                self._unlink(job)
        if self.stayed:  # (their node's Dropped will not come now)
            chains.append([e[0] for e in list(self.stayed.values()) if e[2] == node])
            for job in chains[-1]:
                self._answered(job.spec.id)
        for job in sorted((j for chain in chains for j in chain), key=lambda j: j.seq):
            if job.cancelled and self.sched.deadline.drained:  # as dropped() has it
                job.cancelled = False
                self._ready(job, out, DRAIN_KILL + self.sched.deadline.reason)
            elif job.cancelled:
                self._end(job, "cancel", S.CANCELLED, "cancelled", out, ran=False)
            else:
                self._ready(job, out, f"{node} was lost before its start was heard ({reason})", True)
        self.parked.pop(node, None)
        self.shelved.pop(node, None)

    def cancel(self, job, reason: str, out: list) -> None:
        """`fleet cancel` of a queued step: the node drops it (or stops it, if it has just
        started it); its report ends it."""
        job.cancelled = True
        self._no_more(job)
        out.append(Kill(job.spec.id, job.attempt, reason))

    def dropped(self, job, outcome: str, reason: str, out: list) -> None:
        """A queued step ended before it started: its node dropped it (cancelled; ready again if the drain
        dropped it: not started), its zygote died (lost: ready again), its claim says it may not run (stopped),
        its launch could not be made (failed), or it was taken back (ready again: fleet.core.windowback)."""
        back = self._answered(job.spec.id)
        if back is None:  # (or so, before that one's exit came)
            back = self._went_on_first(job, outcome)
        if back is not None:  # dropped as its predecessor went on (fleet.core.windoworder)
            self._judge(job, outcome, reason, out, back)
            return
        back = self.recalled.get(job.spec.id) if self.recalled else None
        self._unlink(job)
        self._judge(job, outcome, reason, out, back)

    def unbegun(self, job, outcome: str, reason: str, out: list) -> bool:
        """True if `job` was promoted in this batch (its predecessor's exit came first) and
        this is word, in the same batch, that it never started: its node dropped it (a
        drop comes as a cancelled exit; a queued step's own reports wait for its promotion,
        fleet.control.early, so no other exit of it can be here), or its claim said it
        may not run (stopped: its launch never went; before 2026-12-06 it was then said
        as a Begin with no placement, and acting on it failed). The promotion is undone
        unsaid, and the end judged as a queued step's."""
        entry = self.began.get(job.spec.id) if outcome in (S.CANCELLED, S.STOPPED) else None
        if entry is None or entry[0] is not job:
            return False
        del self.began[job.spec.id]
        self.sched._stop_running(job)  # the cores it took from its predecessor go back
        self.sched._set(job, "unbegin")
        self._judge(job, outcome, reason, out, entry[2])
        return True

    def _judge(self, job, outcome: str, reason: str, out: list, back: str | None) -> None:
        if outcome == S.STOPPED:
            self._end(job, "stopped", S.STOPPED, reason, out)
        elif outcome == S.LOST and not job.cancelled:  # its zygote died first (fleet.control.rezygote): as `lost`
            self._ready(job, out, reason, True)
        elif job.cancelled and self.sched.deadline.drained:  # dropped by the drain: not started, no attempt
            job.cancelled = False
            self._ready(job, out, DRAIN_KILL + self.sched.deadline.reason)
        elif back is not None and not job.cancelled and outcome == S.CANCELLED:  # taken back: no attempt
            if job.spec.id not in self.yielded:  # (for free cores, not for the order: fleet.core.windoworder)
                self.once.add(job.spec.id)
            self._ready(job, out, back)
        elif job.cancelled or outcome == S.CANCELLED:  # (its node's words for a drop it was asked for first)
            why = "cancelled before it started" if back is not None else reason or "cancelled"
            self._end(job, "cancel", S.CANCELLED, why, out, ran=False)
        else:  # it could not be launched at all (its launch could not be made): as it would fail again
            self._end(job, "failed", S.FAILED, reason, out)

    def elsewhere(self, job, reason: str, out: list) -> None:
        """Another live fleet holds the queued step's claim: it runs there."""
        if self._answered(job.spec.id) is None:
            self._unlink(job)
        self.yielded.discard(job.spec.id)
        self.sched._set(job, "elsewhere")
        job.placement = ()
        out.append(Wait(job.spec.id, W.WaitReason(W.ELSEWHERE, detail=reason)))

    # -- inside ---------------------------------------------------------------------------
    def _limit(self, node: str) -> int:
        if self.size is not None:
            return self.size
        spec = self.sched.pool.spec_of(node)
        return len(spec.cores) * self.depth if spec is not None else 0

    def _queue(self, job, pred, out: list) -> None:
        self.sched._set(job, "queue")
        job.placement = pred.placement
        job.why = None
        self.next[pred.spec.id] = job
        self.behind[job.spec.id] = pred
        self._chain(job, pred)
        self._loosen(job, pred)
        node = pred.placement[0].node
        self.count[node] = self.count.get(node, 0) + 1
        if self.depth > 1:
            self._extend(job, pred, node)
        out.append(Queue(job.spec.id, job.attempt, job.placement, pred.spec.id, self.sched._resume_of(job.spec.id)))

    def _close(self, job) -> None:
        """`job` no longer takes a step behind it."""
        sid = job.spec.id
        self.ends.pop(sid, None)
        if self.blocker:  # (each table looked in only when it holds something: most are empty)
            self.blocker.pop(sid, None)
        for table in (self.taking, self.held, self.chained):
            preds = table.get(job.demand) if table else None
            if preds is not None and preds.drop(sid) and not preds:
                del table[job.demand]
        if job.placement and (self.parked or self.shelved):
            node = job.placement[0].node
            for table in (self.parked, self.shelved):
                table.get(node, {}).pop(sid, None)

    def _unlink(self, job) -> None:
        """A queued job leaves the window without starting; its predecessor, if still
        running, may take another (in a chain: its follower goes behind its predecessor)."""
        pred = self.behind.pop(job.spec.id)
        del self.next[pred.spec.id]
        self._let_go(job)
        if self.depth > 1 and self._unchain(job, pred):
            return
        chained = self.chained.get(pred.demand)
        if chained is not None and chained.drop(pred.spec.id) and not chained:
            del self.chained[pred.demand]
        self._left(pred.placement[0].node)
        if pred.state == S.RUNNING:
            self.started(pred)
        elif self.depth > 1 and pred.spec.id in self.behind and pred.spec.id in self.ends:  # the tail again
            self._retail(pred)  # (unless closed: its node lost behind a fence, fleet.core.fencing.lost)

    def _left(self, node: str) -> None:
        left = self.count[node] - 1
        if left:
            self.count[node] = left
        else:
            del self.count[node]
        parked = self.parked.pop(node, None)
        if parked:
            for job in parked.values():
                self.started(job)

    def _ready(self, job, out: list, reason: str, unsure: bool = False) -> None:
        # It has waited since it first became ready (status's age, --reserve-after's), not
        # since it came back. `unsure`: it may have started (fleet.core.unsure).
        self.sched._set(job, "unqueue")
        self.yielded.discard(job.spec.id)
        job.placement = ()
        out.append(spend(job, reason) if unsure else Unqueued(job.spec.id, job.attempt, reason))
        self.sched._enqueue(job, since=job.ready_at)

    def _end(self, job, what: str, outcome: str, reason: str, out: list, ran: bool = True) -> None:
        # ran=False: never started here (a cancel's record says so); a stopped step is
        # recorded like a started one that the attempt limit stopped.
        self.sched._set(job, what)
        self.yielded.discard(job.spec.id)
        job.placement = ()
        out.append(Finished(job.spec.id, job.attempt, outcome, reason, ran=ran))
        self.sched._block_descendants(job, job.spec.id, out)
