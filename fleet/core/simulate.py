"""What-if runs: the real scheduler on a pretend allocation, each step taking its
`estimate` (default 1 s). No processes, no clock: time is a number we advance, from
one step's end to the next (and to each hold's end of "defer-widest", fleet.core.deferral).

Given the allocation's end (`end_s`), it is modelled with the same core as a live
fleet (fleet.core.deadline): steps that would not end before the drain point are not
started, and at the drain point the running ones are interrupted. Each step left
keeps why it did not run, with the live verdict on which need a longer allocation
(fleet.core.notstarted); the simulated fleet starts at the submission, time 0.

With a node window (`window`, as a live fleet's, fleet.core.window), steps handed to a
node ahead wait there behind a running step (Queue) and start the moment it ends, on
its resources (Begin): the same commitments a live fleet makes, and the same taking
back (Withdraw, fleet.core.windowback) when cores of its demand free elsewhere first,
answered here at once (nothing is in flight), each node's as one Exits, as its live
node answers them (_whole). Step ends are fed one a pass, even those at the same
instant: a live fleet with no window decides the exits of one loop turn together
(docs/user-guide.md, "Resources and placement"). `fleet simulate` uses the
live default (None: each node's cores); this function's default, 0, is no window (what
the recorded what-if benchmarks measured)."""

from __future__ import annotations

import heapq
import math
import sys
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

from fleet.core.graph import Graph, critical_path
from fleet.core.lookahead import ahead
from fleet.core.ranks import DEFAULT as DEFAULT_ORDER, ordered
from fleet.core.reservations import RESERVE_AFTER_S
from fleet.core.resources import NodeSpec
from fleet.core import states as S
from fleet.core.deadline import AllocationEnds, DrainNow
from fleet.core.deferral import wake_after
from fleet.core.decisions import Exits, GoOn, Wait
from fleet.core.notstarted import left
from fleet.core.scheduler import (Begin, Blocked, Kill, NodeJoined, Scheduler, Start, StepExited, Unrunnable,
                                  Submitted, Withdraw)
from fleet.core.suite import StepSpec


# The drain point's timer sorts before every step end at the same instant: nothing starts
# from the drain point on, and a step queued on its node behind one that ends then is
# dropped there unstarted (not_started), as a live drain drops the queued steps before it
# stops the running ones (fleet.core.deadline.Deadline.drain). A step that ends at the
# drain point is admitted by the deadline: its own end, right after, is a success
# (_interrupt leaves it). (Before 2026-12-07 the timer sorted after the ends: such a
# queued step began at the drain point and was counted interrupted after 0 s.)
DRAIN_FIRST = -math.inf
# A hold's end (fleet.core.deferral) sorts after the step ends at the same instant: a
# pass at that instant already ended the hold (then it is skipped).
HOLD_ENDS = sys.float_info.max


def pretend_nodes(nodes: int, cores_per_node: int, memory_per_node: int = 0,
                  gpus_per_node: int = 0, memory_of: Mapping[int, int] | None = None) -> list[NodeSpec]:
    """`nodes` identical nodes (memory_of overrides the memory of chosen node indices)."""
    width = len(str(nodes))
    cores, gpus = tuple(range(cores_per_node)), tuple(range(gpus_per_node))  # (one of each, shared: frozen)
    out = []
    for i in range(nodes):
        mem = memory_of.get(i, memory_per_node) if memory_of else memory_per_node
        out.append(NodeSpec(f"node{i + 1:0{width}d}", cores, gpus, mem))
    return out


@dataclass(frozen=True)
class SimStep:
    nodes: tuple[str, ...]
    cores: int
    start_s: float
    end_s: float


@dataclass(frozen=True)
class SimResult:
    makespan_s: float
    work_s: float          # sum of the steps' durations
    core_s: float          # sum of cores x duration
    floor_s: float         # the longest chain of estimates
    utilization: float     # core_s / (all cores x makespan)
    steps: dict[str, SimStep] = field(hash=False)
    decisions: int = 0
    unrunnable: dict[str, str] = field(default_factory=dict, hash=False)
    blocked: dict[str, str] = field(default_factory=dict, hash=False)
    log: tuple = field(default=(), hash=False, compare=False)
    # With an allocation end: steps stopped at the drain point (id -> when), and those never started.
    interrupted: dict[str, float] = field(default_factory=dict, hash=False)
    not_started: tuple[str, ...] = field(default=(), hash=False)
    end_s: float | None = None
    drain_s: float | None = None
    # Why each never started (id -> reason), the steps left that need a longer allocation
    # (id -> why: fleet.core.longer), and whether every step left does (fleet.core.notstarted).
    not_started_why: dict[str, str] = field(default_factory=dict, hash=False)
    longer: dict[str, str] = field(default_factory=dict, hash=False)
    longer_only: bool = False

    def to_json(self) -> dict:
        return {
            "makespan_s": self.makespan_s, "work_s": self.work_s, "core_s": self.core_s,
            "floor_s": self.floor_s, "utilization": self.utilization, "decisions": self.decisions,
            "steps": {sid: {"node": s.nodes[0] if len(s.nodes) == 1 else list(s.nodes),
                            "cores": s.cores, "start_s": s.start_s, "end_s": s.end_s}
                      for sid, s in self.steps.items()},
            "unrunnable": self.unrunnable, "blocked": self.blocked,
            **({"end_s": self.end_s, "drain_s": self.drain_s, "interrupted": self.interrupted,
                "not_started": list(self.not_started), "not_started_reasons": self.not_started_why,
                "needs_longer": self.longer, "longer_only": self.longer_only} if self.end_s is not None else {}),
        }


def simulate(steps: Iterable[StepSpec], graph: Graph, nodes: list[NodeSpec],
             keep_log: bool = False, end_s: float | None = None, drain_before_s: float = 0.0,
             reserve_after: float | None = RESERVE_AFTER_S, window: int | None = 0,
             order: str = DEFAULT_ORDER, reserve_ahead: int = 0, depth: int = 1, mpi_blocks: bool = False) -> SimResult:
    """Run the scheduler to completion with every step succeeding after its estimate;
    with `end_s`, until the allocation's end, draining `drain_before_s` before it.
    `reserve_after`, `window`, `depth` and `order` are the scheduler's (None: no reservations,
    fleet.core.reservations; the window: steps per node handed ahead, None: the node's
    cores, 0: none, fleet.core.window, each chain up to `depth`; the order, fleet.core.ranks;
    `reserve_ahead`: reservations planned ahead for wide steps, fleet.core.lookahead;
    `mpi_blocks`: MPI steps placed as PALS launches them, fleet.core.ppnblocks)."""
    steps = tuple(steps)
    dur = {s.id: (s.estimate if s.estimate is not None else 1.0) for s in steps}
    sched = ahead(ordered(Scheduler(reserve_after, window, depth, mpi_blocks), order), reserve_ahead)
    for n in nodes:
        sched.handle(NodeJoined(n), 0.0)
    ends: list[tuple[float, float, str, int]] = []
    placed: dict[str, SimStep] = {}
    log: list = []
    unrunnable, blocked = {}, {}  # id -> why
    waits, dropped = {}, set()  # id -> its last WaitReason; steps dropped from a node's queue by the drain
    count = seq = 0

    def act(decisions, now):
        nonlocal count, seq
        decisions = _whole(sched, decisions, now)
        count += len(decisions)
        for d in decisions:
            if keep_log:
                log.append((now, d))
            if isinstance(d, (Start, Begin)):  # Begin: a queued step, as its predecessor ended
                end = now + dur[d.step]
                placed[d.step] = SimStep(tuple(s.node for s in d.placement),
                                         sum(len(s.cores) for s in d.placement), now, end)
                heapq.heappush(ends, (end, seq, d.step, d.attempt))
                seq += 1
            elif isinstance(d, Unrunnable):
                unrunnable[d.step] = d.reason
            elif isinstance(d, Blocked):
                blocked[d.step] = d.because
            elif isinstance(d, Wait):
                waits[d.step] = d.why
            elif isinstance(d, Kill):  # the drain: the step ends now, interrupted
                _interrupt(sched, d, now, placed, interrupted, dropped)
        _wake(sched, ends, woken, now)

    interrupted: dict[str, float] = {}  # (the drain's, filled by act)
    woken: set[float] = set()  # the holds' ends already in `ends`
    drain_s = _allocation_ends(sched, ends, end_s, drain_before_s)
    act(sched.handle(Submitted(steps, graph.deps), 0.0), 0.0)
    now = passed = 0.0
    while ends:
        now, _, sid, attempt = heapq.heappop(ends)
        if sid in interrupted or (attempt < 0 and now == passed):  # (a pass at a hold's end came first)
            continue
        event = Exits(()) if attempt < 0 else StepExited(sid, attempt, S.SUCCEEDED) if sid else DrainNow("the drain point")
        act(sched.handle(event, now), now)
        passed = now
    r = _result(steps, dur, graph, nodes, placed, count, unrunnable, blocked, tuple(log), interrupted, end_s, drain_s)
    return r if end_s is None else _with_left(r, steps, graph, waits, dropped)


def _allocation_ends(sched, ends: list, end_s: float | None, drain_before_s: float) -> float | None:
    """The allocation's end told to the scheduler, and the drain point's timer in `ends`:
    the drain point (None: no end)."""
    if end_s is None:
        return None
    drain_s = max(0.0, end_s - drain_before_s)
    sched.handle(AllocationEnds(end_s, drain_s), 0.0)
    heapq.heappush(ends, (drain_s, DRAIN_FIRST, "", 0))
    return drain_s


def _with_left(r: SimResult, steps, graph, waits: dict, dropped: set) -> SimResult:
    """`r` with why each step the drain left did not run, and the verdict on them
    (fleet.core.notstarted), from each step's last wait and the steps dropped from a queue."""
    why = left(steps, graph.deps, r.steps, r.interrupted, r.not_started, waits, dropped, r.drain_s)
    return replace(r, not_started_why=why.why, longer=why.longer, longer_only=why.longer_only)


def _interrupt(sched, d: Kill, now: float, placed: dict, interrupted: dict, dropped: set) -> None:
    """The drain's Kill: the step ends now, interrupted, unless it ends now by itself
    (its end, next in the heap, succeeds: DRAIN_FIRST). What the exit decides is not
    acted on: after the drain nothing starts, and a queued step its predecessor's end
    would begin has its own Kill."""
    if d.step in placed and placed[d.step].end_s <= now:
        return
    sched.handle(StepExited(d.step, d.attempt, S.INTERRUPTED), now)
    if d.step in placed:  # else queued on its node, dropped there: never started
        interrupted[d.step] = now
        placed[d.step] = SimStep(placed[d.step].nodes, placed[d.step].cores, placed[d.step].start_s, now)
    else:
        dropped.add(d.step)


def _wake(sched, ends: list, woken: set, now: float) -> None:
    """A hold the pass imposed ends later (fleet.core.deferral): a pass then, in `ends`."""
    at = wake_after(sched, now)
    if at is not None and at not in woken:
        woken.add(at)
        heapq.heappush(ends, (at, HOLD_ENDS, "", -1))


def _whole(sched, decisions: list, now: float) -> list:
    """The decisions with a bounded pass's rest (fleet.core.decisions.GoOn) taken at once,
    and the Withdraws answered as a live fleet's nodes answer them (a queued step has not
    begun here: its node drops it), with what that brings.

    A live coordinator sends a turn's Kills to each node in one message, and the node
    answers them (Dropped) in one: the coordinator hands the scheduler that answer's
    exits as one Exits (fleet.control.turns), one pass for them all, after the pass's rest
    (queued in the same turn: nothing comes back from a node before). So here: the
    withdrawals of a decision list and of its rest, grouped by node (each node in the
    order of its first Withdraw, each node's in theirs), each group one Exits, the groups
    in that order; what a group's pass withdraws is answered after the groups before it.
    (Before 2026-12-07 each Withdraw was its own pass: the first one's pass could give
    the core it freed to a later-ranked step while the others were still queued.)"""
    out: list = []
    answers: deque = deque()  # one node's answer each: the Exits its Dropped make
    while True:
        withdrawn: dict[str, list] = {}  # node -> its exits, in the order of the Withdraws
        while decisions:
            go_on = False
            for d in decisions:
                if type(d) is GoOn:
                    go_on = True
                    continue
                out.append(d)
                if type(d) is Withdraw:
                    node = sched.view(d.step).placement[0].node
                    withdrawn.setdefault(node, []).append(
                        StepExited(d.step, d.attempt, S.CANCELLED, "withdrawn before it started"))
            decisions = sched.handle(Exits(()), now) if go_on else []
        answers.extend(Exits(tuple(exits)) for exits in withdrawn.values())
        if not answers:
            return out
        decisions = sched.handle(answers.popleft(), now)


def _result(steps, dur, graph, nodes, placed, count, unrunnable, blocked, log, interrupted, end_s, drain_s):
    """The figures of a finished simulation."""
    makespan = max((s.end_s for s in placed.values()), default=0.0)
    work = sum(s.end_s - s.start_s for s in placed.values())
    core_s = sum((s.end_s - s.start_s) * s.cores for s in placed.values())
    total = sum(len(n.cores) for n in nodes)
    runnable = {sid: d for sid, d in dur.items() if sid not in unrunnable and sid not in blocked}
    floor, _ = critical_path(graph.deps, runnable)
    util = core_s / (total * makespan) if makespan > 0 and total else 0.0
    never = tuple(s.id for s in steps if s.id not in placed and s.id not in unrunnable and s.id not in blocked)
    return SimResult(makespan, work, core_s, floor, util, placed, count, unrunnable, blocked, log,
                     interrupted, never if end_s is not None else (), end_s, drain_s)
