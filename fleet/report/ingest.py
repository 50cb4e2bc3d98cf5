"""Reading a stream into the report's model: the typed records of events.jsonl, cut
into sessions, gathered into nodes, steps and attempts.

Each record kind has one handler (`_on_<kind>`), chosen by the record's type; kinds the
report does not use, and records of kinds this version does not know, only move the
clock on. Nothing here decides an outcome or a figure: see fleet.report.assemble.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable

from fleet.core import states as S
from fleet.core import waits as W
from fleet.core.names import natural_key
from fleet.core.shardowner import owner
from fleet.wire import events as E
from fleet.report import clocks, closes, families, fleetends, nodenames, unsure
from fleet.report.model import ENDED_WELL, Attempt, Node, Piece, Step, Waited
from fleet.report.reading import Damaged, blocks, events_path, load  # noqa: F401 (blocks, events_path, load: the API's)


def sessions(records: list) -> list[list]:
    """The stream cut into sessions: a session begins with a `fleet_starting` when no
    fleet is up and lasts until as many fleets ended (`fleet_down`, or `fleet_gone`: each
    fleet once, fleetends.ends) as started. Fleets sharing a run directory append to one stream,
    so fleets that overlap in time form one session, reported together (each record names
    its fleet: each fleet's nodes are its own); records before the first `fleet_starting`
    form one too."""
    cuts = [0]
    live, gone = 0, set()
    for i, rec in enumerate(records):
        kind = type(rec)
        if kind is E.FleetStarting:
            if live <= 0 and i > cuts[-1]:
                cuts.append(i)
            live = max(live, 0) + 1
        elif fleetends.ends(rec, kind, live, gone):
            live -= 1
    cuts.append(len(records))
    return [records[a:b] for a, b in zip(cuts, cuts[1:])] or [[]]


@dataclass
class Gathered:
    """One session's records, gathered: what the outcomes and figures are drawn from."""

    nodes: dict[str, Node] = field(default_factory=dict)
    steps: dict[str, Step] = field(default_factory=dict)
    serial_subs: set = field(default_factory=set)
    entered: set = field(default_factory=set)  # (fleet, submission) all in: steps it declares later are children
    records: int = 0                  # how many records the session holds
    first_t: float = 0.0
    last_t: float = 0.0
    submitted_t: float | None = None
    fleet_up_t: float | None = None
    starting_t: float | None = None
    down_t: float | None = None
    fleets_up: int = 0
    fleets_started: int = 0
    gone: list = field(default_factory=list)  # fleets of it that died (fleet_gone: found so by the next)
    ended: dict = field(default_factory=dict)  # fleet -> its end: its fleet_down or fleet_gone, the first (fleetends)
    found_by: dict = field(default_factory=dict)  # fleet found gone -> the fleet that found it so (fleet_gone)
    down_why: dict = field(default_factory=dict)  # fleet -> its fleet_down's reason, if it gave one
    mismatches: int = 0
    lost_exit_fields: int = 0         # lost attempts without timings
    skewed: int = 0                   # attempts whose work began before their decision
    clocks_off: dict = field(default_factory=dict)  # node -> its clock's largest offset used, to within (clocks)
    oom_survived: list = field(default_factory=list)  # "step (attempt N)" that succeeded despite OOM kills in them
    over_memory: list = field(default_factory=list)  # "step (attempt N)" past their memory, not stopped
    whys: dict[tuple, W.WaitReason] = field(default_factory=dict)  # wait records' reasons, shared
    kinds: dict[tuple, tuple] = field(default_factory=dict)  # the steps' kinds (Step.sig), shared
    allocation: dict = field(default_factory=dict)  # its end and drain (fleet.core.deadline), if known
    # What the not_started records said (fleet.report.closes): the reason of the steps a
    # drain's do not name, and each step they name with its own (a longer allocation; of
    # a fleet that closed early, not drained: every step it left, with its reason).
    not_started_why: str = ""
    not_started: dict = field(default_factory=dict)
    drained: set = field(default_factory=set)  # the fleets that drained
    closed_at: dict = field(default_factory=dict)  # step -> when its fleet closed it early (not drained)
    shards: dict = field(default_factory=dict)  # (fleet, submission) -> N of its --shard I/N
    fleets: list = field(default_factory=list)  # the ids of the fleets that started in it, in order
    # Each fleet's nodes are its own, but every embedded fleet names its node `node1`: a
    # name another fleet's node has already taken is the node's name @ its fleet, and at
    # the end the first of that name too (fleet.report.nodenames).
    renamed: dict[tuple, str] = field(default_factory=dict)  # (fleet, node name) -> the node's name here
    damaged: int = 0                  # lines of the stream that were no record (fleet.report.reading)
    last_by: dict[str, float] = field(default_factory=dict)  # each fleet's last record's time
    stopping: dict[str, float] = field(default_factory=dict)  # when each fleet that went down began to
    queued_on: dict[str, str | None] = field(default_factory=dict)  # step -> its node, queued there (fleet.report.unsure)

    def step_of(self, sid: str, t: float) -> Step:
        s = self.steps.get(sid)
        if s is None:  # a stream cut before its step record (or a hand-made one)
            s = self.steps[sid] = Step(sid, t)
        return s


def gather(records: list) -> Gathered:
    """The records of one session, in the order written, gathered."""
    g = Gathered()
    _take(g, records)
    return _finish(g)


def gather_session(parts: Iterable[list], session: int = -1) -> tuple[Gathered, int, int]:
    """One session of a stream (its records in the order written, in lists: `parts`),
    gathered as the blocks come, so that neither the stream's records nor another
    session's model are ever held whole: (the session gathered, how many sessions the
    stream holds, the session's index from 0). Sessions are cut as :func:`sessions` cuts
    them; `session` is 1-based, or negative from the end (-1: the last). ValueError if
    the stream does not hold it."""
    want = session - 1 if session > 0 else None  # else the last -session are kept as they come
    kept: deque[Gathered] = deque(maxlen=max(-session, 1))
    g = Gathered() if want in (None, 0) else None  # the session being read, if it is wanted
    if g is not None:
        kept.append(g)
    n, live, begun, gone = 1, 0, False, set()  # sessions so far; fleets up; the current one has a record; fleets ended
    for block in parts:
        lo = 0
        for i, rec in enumerate(block):
            kind = type(rec)
            if kind is E.FleetStarting:
                if live <= 0 and (begun or i > lo):  # a new session begins here
                    if g is not None:
                        _take(g, block[lo:i])
                    n, lo = n + 1, i
                    g = Gathered() if want is None or want == n - 1 else None
                    if g is not None:
                        kept.append(g)
                    begun = False
                live = max(live, 0) + 1
            elif fleetends.ends(rec, kind, live, gone):
                live -= 1
        if g is not None:
            _take(g, block[lo:] if lo else block)
        begun = begun or len(block) > lo
    idx = want if want is not None else n + session
    if not 0 <= idx < n:
        raise ValueError(f"the stream holds {n} session(s); there is no session {session}")
    return _finish(kept[0] if want is not None else kept[idx - (n - len(kept))]), n, idx


def _take(g: Gathered, records: list) -> None:
    """Gather more records of g's session, in the order written."""
    if not records:
        return
    if not g.records:
        g.first_t = g.last_t = records[0].t
    g.records += len(records)
    last = g.last_t
    handlers = _HANDLERS
    last_by = g.last_by
    for rec in records:
        if rec.t > last:
            last = rec.t
        last_by[rec.fleet] = rec.t  # (a dead fleet ends no sooner than what it wrote: fleetends)
        h = handlers.get(type(rec))
        if h is not None:
            h(g, rec)
    g.last_t = last


def _finish(g: Gathered) -> Gathered:
    nodenames.finish(g.nodes, g.steps, g.renamed)
    g.nodes = {k: g.nodes[k] for k in sorted(g.nodes, key=natural_key)}
    return g


# --- one handler per record kind ---------------------------------------------------------

def _on_started(g: Gathered, rec: E.Started) -> None:
    s = g.steps.get(rec.step)
    if s is not None and s.attempts and s.attempts[-1].attempt == rec.attempt:
        s.attempts[-1].started = rec.t


def _on_start(g: Gathered, rec: E.Start) -> None:
    s = g.step_of(rec.step, rec.t)
    if g.queued_on:  # (it started: no longer queued)
        g.queued_on.pop(rec.step, None)
    placement = [_piece(p) for p in rec.placement] or [Piece(rec.node, rec.cores, rec.gpus, rec.memory or 0)]
    node = rec.node
    if g.renamed:  # (only when two fleets' nodes share a name)
        placement, node = nodenames.placed(g.renamed, rec.fleet, placement), g.renamed.get((rec.fleet, node), node)
    n = rec.attempt or len(s.attempts) + 1
    last = s.attempts[-1] if s.attempts else None
    again, s.again = s.again, False
    if s.final is not None:  # decided earlier (a skip, a block), and run again since: this run decides
        s.final = None
    if (last is not None and last.attempt == n and last.exit_seen and last.started is None and not again
            and last.fleet == rec.fleet):
        # Its exit came first: the coordinators of 2026-11-30's node window wrote a queued
        # step's `start` once they heard it had run, after its `exit`. The same attempt,
        # not another that never ended.
        a = Attempt.placed(s.id, n, node, placement, rec.t)
        last.node, last.placement, last.start = a.node, a.placement, a.start
        last.cores, last.gpus, last.memory = a.cores, a.gpus, a.memory
        return
    s.attempts.append(Attempt.placed(s.id, n, node, placement, rec.t, rec.fleet))
    if s.declared is not None:  # (a child declared again: the latest before this start)
        s.attempts[-1].declared = s.declared


def _piece(p: dict) -> Piece:
    """One node's part of a start record's placement."""
    return Piece(p.get("node"), p.get("cores") or [], p.get("gpus") or [], p.get("memory") or 0)


def _on_exit(g: Gathered, rec: E.Exit) -> None:
    s = g.step_of(rec.step, rec.t)
    att, fleet = rec.attempt, rec.by or rec.fleet  # (by: another fleet's attempt, whose end this fleet heard of)
    a = s.attempts[-1] if s.attempts and s.attempts[-1].attempt == att and s.attempts[-1].fleet == fleet else next(
        (x for x in reversed(s.attempts) if x.fleet == fleet and (x.attempt == att or rec.by)), None)
    if a is not None and a.exit_seen and rec.node is None:
        if rec.by:
            # A fleet that waited on another's claim heard how the step ended there (always
            # `failed`, "timed_out in fleet F: ..."): its wait ends, its declaration after that
            # end submitted nothing again, and the outcome stays that fleet's own (before
            # 2026-12-07 replaced: out_of_memory counted failed, a step stayed elsewhere).
            s.again = False
            if s.again_at and s.again_at[-1][1] >= a.start:  # (its period, opened after a began)
                s.again_at = s.again_at[:-1] or None
            return
        # The coordinator's verdict on an attempt its node already reported (children
        # refused after the step said it waits): how it ended, not another run.
        a.outcome, a.reason = rec.outcome or S.FAILED, rec.reason or ""
        return
    if a is None:  # an exit without its start record (a cut stream)
        node = g.renamed.get((rec.fleet, rec.node), rec.node) if g.renamed else rec.node
        piece = Piece(node, rec.cores or [], rec.gpus or [], int(rec.memory or 0))
        a = Attempt.placed(s.id, att, node, [piece], rec.decided_at or rec.t, fleet)
        s.attempts.append(a)
        s.again = False
    a.end = rec.t
    a.exit_seen = True
    a.outcome = rec.outcome or S.FAILED
    if a.outcome == S.INTERRUPTED and fleet in g.drained:  # the drain's line counts these (closes.on_drained)
        g.allocation["interrupted"] = g.allocation.get("interrupted", 0) + 1
    a.reason = rec.reason or rec.error or ""
    if g.found_by and fleet in g.found_by and rec.t > g.ended[fleet]:
        fleetends.past_its_end(g, a, fleet)
    if a.outcome == S.INTERRUPTED and fleet not in g.stopping:  # (its fleet stopped it: going down, or a drain)
        g.stopping[fleet] = a.end
    if rec.oom_kills and a.outcome == S.SUCCEEDED:  # (a failure's reason is among the problems)
        g.oom_survived.append(f"{rec.step} (attempt {att})")
    # A watchdog's node that no sample saw past its memory (fleet.node.memwatch.over_note):
    # the peak, from its rusage, is what its `memory` is to be sized from (on its node).
    peak = rec.memory_peak
    if isinstance(peak, int) and a.outcome != S.OUT_OF_MEMORY and a.placement and peak > a.placement[0].memory > 0:
        g.over_memory.append(f"{rec.step} (attempt {att})")
    a.startup_s = su = rec.startup_s
    a.work_s = rec.work_s
    if su is None:
        if a.outcome == S.LOST:
            g.lost_exit_fields += 1
    elif su == 0.0:
        ws, da = rec.work_start, rec.decided_at
        if ws is not None and da is not None and ws < da - 1e-3:
            g.skewed += 1


def _on_step(g: Gathered, rec: E.StepDeclared) -> None:
    s = g.steps.get(rec.step)
    if s is None:
        serial = rec.submission in g.serial_subs
        sig = _SERIAL if serial else (rec.cores, rec.min_cores, rec.gpus, rec.memory, rec.step_kind)
        g.steps[rec.step] = Step(rec.step, rec.t, deps=list(rec.deps or ()), serial=serial,
                                 foreign=_owner(g, rec) if rec.foreign else False, sig=g.kinds.setdefault(sig, sig),
                                 fleet="" if rec.foreign else rec.fleet, parent=families.parent_of(g, rec))
    elif not rec.foreign:
        if not s.fleet:
            s.fleet = rec.fleet
        if s.parent is not None:  # (a child submitted again: its next start goes from here)
            s.declared = rec.t
        # Submitted again (a later `fleet run`, or another fleet) after it ended without
        # success: to be decided again; what ended it is no longer its outcome (a success
        # is skipped, or run again on purpose: its start says so), nor why a close left it.
        # A skip ended its wait all the same: a later submission (--force) waits from its
        # own declaration (before 2026-12-07 from the skipped one, the fleet idle between).
        g.not_started.pop(s.id, None)
        a = s.attempts[-1] if s.attempts else None
        # When what ended it came (its wait, if any, stopped then); none if it waits still
        # (submitted again already: a second `fleet run` of it while it waits).
        ended, waits = g.closed_at.pop(s.id, None), s.again
        if s.final is not None:  # (a final is later than every attempt: a start clears it)
            if s.final != S.SKIPPED:
                s.final, s.again, ended = None, True, s.final_t
            else:
                ended = s.final_t
        elif a is not None and a.exit_seen and a.outcome not in ENDED_WELL and not a.retried:
            s.again, ended = True, ended if waits else a.end
        if ended is not None:  # it waits again from here (fleet.report.waits), not from its first submission
            if s.again_at is None:
                s.again_at = []
            s.again_at.append((ended, rec.t))


def _owner(g: Gathered, rec: E.StepDeclared) -> str | bool:
    """The shard that runs another shard's step, "I/N", from its task and the N of the
    submission that declared it (fleet.control.shard); True where the stream does not say."""
    n = g.shards.get((rec.fleet, rec.submission))
    if not n or not isinstance(rec.task, str) or not rec.task:
        return True
    return f"{owner(rec.task, n)}/{n}"


_SERIAL = ("serial",)


def _on_wait(g: Gathered, rec: E.Wait) -> None:
    s = g.step_of(rec.step, rec.t)
    if s.waits and s.waits[-1].t == rec.t and s.waits[-1].why.cause == W.ELSEWHERE:
        return  # the wait that goes with an `elsewhere` record
    # The scheduler says the same few things again and again: one WaitReason each.
    key = (rec.reason, rec.cause, rec.need_cores, rec.need_gpus, rec.need_memory, rec.free_cores, rec.free_gpus)
    why = g.whys.get(key)
    if why is None:
        why = g.whys[key] = rec.why()
    s.waits.append(Waited(rec.t, why, rec.reason or "", rec.fleet))


def _on_elsewhere(g: Gathered, rec: E.Elsewhere) -> None:
    why = W.WaitReason(W.ELSEWHERE, detail=f"held by fleet {rec.holder or '?'}: {rec.reason or ''}")
    g.step_of(rec.step, rec.t).waits.append(Waited(rec.t, why, why.text(), rec.fleet))


def _on_reclaim(g: Gathered, rec: E.Reclaim) -> None:
    # Back to ready: from here it queues like any ready step without a wait of its own.
    why = W.WaitReason(W.QUEUED, detail=f"reclaimed ({rec.reason or ''}); ready")
    g.step_of(rec.step, rec.t).waits.append(Waited(rec.t, why, why.text(), rec.fleet))


def _on_retry(g: Gathered, rec: E.Retry) -> None:
    s = g.step_of(rec.step, rec.t)
    s.retries.append(rec.t)
    # The attempt retried (`attempt` is the next one's number); the last, if not found.
    a = next((x for x in reversed(s.attempts) if x.attempt == rec.attempt - 1 and x.fleet == rec.fleet),
             s.attempts[-1] if s.attempts else None)
    if a is not None:
        a.retried = True


def _final(g: Gathered, rec, outcome: str, reason: str) -> None:
    s = g.step_of(rec.step, rec.t)
    s.final, s.final_t, s.final_reason, s.again = outcome, rec.t, reason, False


def _on_blocked(g: Gathered, rec: E.Blocked) -> None:
    _final(g, rec, S.BLOCKED, f"dependency {rec.because} did not succeed")


def _on_unrunnable(g: Gathered, rec: E.Unrunnable) -> None:
    _final(g, rec, S.UNRUNNABLE, rec.reason or "")


def _on_cancelled(g: Gathered, rec: E.Cancelled) -> None:
    _final(g, rec, S.CANCELLED, rec.reason or "cancelled before it started")


def _on_skipped(g: Gathered, rec: E.Skipped) -> None:
    s = g.steps.get(rec.step)
    if s is not None and s.attempts and s.attempts[-1].outcome == S.SUCCEEDED:
        # It ran and succeeded in this session: the skip (already done, or done in another
        # fleet) agrees; another fleet's says when that fleet saw it (its dependents wait so long).
        if rec.fleet != s.attempts[-1].fleet:
            if s.seen is None:
                s.seen = {}
            s.seen.setdefault(rec.fleet, rec.t)
        return
    _final(g, rec, S.SKIPPED, f"succeeded in fleet {rec.by}" if rec.by else "already succeeded")


def _on_submitted(g: Gathered, rec: E.Submitted) -> None:
    if g.submitted_t is None:
        g.submitted_t = rec.t
    if rec.serial:
        g.serial_subs.add(rec.submission)
    n = rec.shard.rpartition("/")[2] if isinstance(rec.shard, str) else ""
    if n.isdecimal() and int(n) > 0:  # (--shard I/N: its steps of other shards, whose each is: _owner)
        g.shards[(rec.fleet, rec.submission)] = int(n)


def _on_node_joined(g: Gathered, rec: E.NodeJoined) -> None:
    name = nodenames.joined(g.nodes, g.renamed, rec.fleet, rec.node)
    g.nodes[name] = Node(name, list(rec.cores or ()), list(rec.gpus or ()), int(rec.memory or 0), rec.t,
                         memlimit=rec.memlimit or "", fleet=rec.fleet)


def _on_fleet_starting(g: Gathered, rec: E.FleetStarting) -> None:
    g.fleets_started += 1
    g.fleets.append(rec.fleet)
    g.fleets_up += 1
    if g.starting_t is None:
        g.starting_t = rec.t


def _on_fleet_up(g: Gathered, rec: E.FleetUp) -> None:
    if g.fleet_up_t is None:
        g.fleet_up_t = rec.t


def _on_damaged(g: Gathered, rec: Damaged) -> None:
    g.damaged += rec.lines
    g.records -= 1  # (a mark, not a record)


def _on_placement_mismatch(g: Gathered, rec: E.PlacementMismatch) -> None:
    g.mismatches += 1


_HANDLERS: dict[type, Callable] = {
    E.Started: _on_started, E.Start: _on_start, E.Exit: _on_exit, E.StepDeclared: _on_step,
    E.Wait: _on_wait, E.Elsewhere: _on_elsewhere, E.Reclaim: _on_reclaim, E.Retry: _on_retry,
    E.Blocked: _on_blocked, E.Unrunnable: _on_unrunnable, E.Skipped: _on_skipped, E.Cancelled: _on_cancelled,
    E.Submitted: _on_submitted, E.NodeJoined: _on_node_joined, E.NodeLost: nodenames.on_node_lost,
    E.FleetStarting: _on_fleet_starting, E.FleetUp: _on_fleet_up, E.FleetDown: fleetends.on_fleet_down,
    E.FleetGone: fleetends.on_fleet_gone, E.Adopted: fleetends.on_adopted,
    E.PlacementMismatch: _on_placement_mismatch, E.AllocationEnd: closes.on_allocation_end,
    E.Drained: closes.on_drained, E.NotStarted: closes.on_not_started, Damaged: _on_damaged,
    E.Entered: families.on_entered, E.NodeMemory: nodenames.on_node_memory, E.NodeClock: clocks.on_node_clock,
    E.ZygoteRestarted: nodenames.on_zygote_restarted, E.Queued: unsure.on_queued, E.Unqueued: unsure.on_unqueued,
}
