"""What each step waited for, and when: its wait segments.

From a step's submission (or its retry) to its start it waits: first for its
dependencies, then for whatever its wait records say (the cause of each record's
structured reason, fleet.core.waits). A ready step without a record of its own queues
behind the latest record of a step of its kind, because the scheduler records only the
head of each kind of demand (where the kind had none yet when the step became ready: its
turn until the kind's next record, then behind that one). "No node has it all free
together" is told apart here: memory, when some live node had the cores and GPUs free
but not the memory (the step's figure, else its cores' share of that node's), as rebuilt
from the start and exit records at that moment (:class:`FreeIndex`); else a whole node.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from typing import Iterator

from fleet.core import states as S
from fleet.core import waits as W
from fleet.report.model import NOT_RUN, PROBLEM_OUTCOMES, Node, Step, Waited, r6


class FreeIndex:
    """Free cores, GPUs and memory of each node at any time, from the start and exit
    records (held from the start decision to the exit record), by bisection."""

    def __init__(self, nodes: dict[str, Node], steps: dict[str, Step], t_end: float):
        self.nodes, self.steps, self.t_end = nodes, steps, t_end
        self.times: dict[str, list[float]] | None = None
        self.held: dict[str, list[tuple[int, int, int]]] = {}
        self.uneven = False  # some step held more than its cores' share of a node's memory

    def _index(self) -> None:
        ev: dict[str, list[tuple[float, int, int, int]]] = {n: [] for n in self.nodes}
        for s in self.steps.values():
            for a in s.attempts:
                end = a.end if a.end is not None else self.t_end
                for p in a.placement:
                    lst = ev.get(p.node)
                    if lst is not None:
                        c, g, m = len(p.cores), len(p.gpus), p.memory
                        nd = self.nodes[p.node]
                        self.uneven = self.uneven or m * len(nd.cores) > nd.memory * c
                        lst.append((a.start, c, g, m))
                        lst.append((end, -c, -g, -m))
        self.times = {}
        for name, lst in ev.items():
            lst.sort(key=lambda e: e[0])
            ts, hs = [], []
            c = g = m = 0
            for t, dc, dg, dm in lst:
                c, g, m = c + dc, g + dg, m + dm
                if ts and ts[-1] == t:
                    hs[-1] = (c, g, m)
                else:
                    ts.append(t)
                    hs.append((c, g, m))
            self.times[name], self.held[name] = ts, hs

    def shares_short(self) -> bool:
        """Whether a step that takes its cores' share of memory could ever have been short
        of it: only beside steps that held more than theirs (else no scan is worth it)."""
        if self.times is None:
            self._index()
        return self.uneven

    def free_at(self, t: float) -> list[tuple[str, int, int, int]]:
        """(node, free cores, free GPUs, free memory) of each live node just after t."""
        if self.times is None:
            self._index()
        out = []
        for name, nd in self.nodes.items():
            if nd.joined > t or (nd.until is not None and nd.until <= t):
                continue
            i = bisect_right(self.times[name], t) - 1
            c, g, m = self.held[name][i] if i >= 0 else (0, 0, 0)
            out.append((name, len(nd.cores) - c, len(nd.gpus) - g, nd.memory - m))
        return out


def classify(why: W.WaitReason, t: float | None = None, free: FreeIndex | None = None) -> str:
    """The cause a wait is reported under. A step that no one node can hold whole is
    waiting for memory if, at t, some live node had its cores and GPUs free but not its
    memory; else for a whole node."""
    cause = why.cause
    if cause == W.WHOLE_NODE:
        # Without a memory figure the step takes its cores' share of a node's memory, which
        # steps that declare more than theirs can leave short (fleet.core.resources). (A
        # scheduler since 2026-12-06 says so itself, cause memory; earlier records are told here.)
        if free is not None and t is not None and (why.memory is not None or free.shares_short()):
            for name, fc, fg, fm in free.free_at(t):
                if fc >= why.cores and fg >= why.gpus and fm < _needs(why, free.nodes[name]):
                    return W.MEMORY
        return W.WHOLE_NODE
    return cause if cause in W.CAUSES else W.OTHER


def _needs(why: W.WaitReason, node: Node) -> int:
    """The memory the waiting step would take on `node`: its figure, else its cores' share."""
    if why.memory is not None:
        return why.memory
    return node.memory * why.cores // len(node.cores) if node.cores else 0


def wait_segments(steps: dict[str, Step], t_end: float, free: FreeIndex, stopping: dict | None = None) -> None:
    """Fill each step's `segments`: (from, to, cause, why) for every stretch of time it
    was submitted (or back for a retry) but not running. `stopping`: when each fleet
    began to go down (its first step it interrupted, or its fleet_down): from then its
    steps wait for nothing that would come (before 2026-12-06 they waited "for cores",
    which the steps stopped were giving back)."""
    ctx = _Context(steps, free)
    for s in steps.values():
        s.segments = segs = []
        if s.foreign or (s.outcome == S.SKIPPED and not s.waits):
            continue  # another shard's step, or skipped at once: it never waited to run here
        for p_from, p_to, first in _periods(s, t_end):
            ready = ctx.dependency_wait(s, p_from, p_to, segs) if first and s.deps else p_from
            if ready < p_to:
                ctx.resource_waits(s, ready, p_to, segs)
        stop = stopping.get(s.attempts[-1].fleet if s.attempts else s.fleet) if stopping else None
        if stop is not None and segs and segs[-1][1] > stop:
            s.segments = _stopped(segs, stop)


def _stopped(segs: list, stop: float) -> list:
    """The segments cut at `stop`, the time after it one wait for the fleet going down."""
    out = [seg if seg[1] <= stop else (seg[0], stop, seg[2], seg[3]) for seg in segs if seg[0] < stop]
    out.append((max(stop, segs[0][0]), segs[-1][1], W.STOPPING, "nothing more would start"))
    return out


def totals(steps: dict[str, Step]) -> dict[str, dict]:
    """Per cause: the steps that waited for it and the step-seconds spent."""
    waits: dict[str, dict] = {}
    for s in steps.values():
        seen = set()
        for a, b, cat, _ in s.segments:
            w = waits.setdefault(cat, {"steps": 0, "step_s": 0.0})
            w["step_s"] += b - a
            if cat not in seen:
                seen.add(cat)
                w["steps"] += 1
    for w in waits.values():
        w["step_s"] = r6(w["step_s"])
    return waits


def _periods(s: Step, t_end: float) -> Iterator[tuple[float, float, bool]]:
    """Periods of waiting, and whether each waits for the step's dependencies: from its
    submission, and from each time it was submitted again after it ended unsuccessfully
    (blocked, failed) or was skipped as done (then --forced), to its next start; from each retry to the next start. A period
    with no start after it ends with what ended the step (blocked, a close...), or when
    it was submitted again (before 2026-12-06 a step blocked, then submitted again by a
    later `fleet run`, waited for its dependency all the time in between)."""
    atts = s.attempts
    fin = s.final_t if s.final in (S.BLOCKED, S.UNRUNNABLE, S.SKIPPED, S.CANCELLED) else (
        s.end if s.outcome == NOT_RUN and s.end is not None else t_end)
    if not s.retries and not s.again_at:  # nearly every step: one period
        p_to = atts[0].start if atts else fin
        if p_to is not None and p_to > s.submitted:
            yield s.submitted, p_to, True
        return
    again = s.again_at or ()
    opens = sorted([(s.submitted, True)] + [(rt, False) for rt in s.retries] + [(t, True) for _, t in again])
    stops = [a.start for a in atts] + [ended for ended, _ in again]
    for p_from, first in opens:
        p_to = min([x for x in stops if x >= p_from] + [fin])
        if p_to is not None and p_to > p_from:
            yield p_from, p_to, first


def _seen(dep: Step, fleet: str, done: float) -> float:
    """When a fleet saw a dependency done: its success, or later, if it ran in another
    fleet, when this one learnt of it (its `skipped` record)."""
    t = dep.seen.get(fleet) if dep.seen else None
    return done if t is None or t < done else t


def _whose(dep: Step) -> str:
    """" (shard 1/2's step, failed)" of another shard's step: the shard that runs it (as
    `fleet run` names it) and how it ended, where the stream says; "" of a step of its
    own (before 2026-12-06 "another fleet runs it", though none might)."""
    if not dep.foreign:
        return ""
    who = f"shard {dep.foreign}'s step" if isinstance(dep.foreign, str) else "another shard's step"
    return f" ({who}, {dep.outcome})" if dep.outcome in PROBLEM_OUTCOMES else f" ({who})"


def _signature(s: Step) -> tuple:
    """The kind of a step: what it asks for (a serial run's steps are all one kind)."""
    return _UNDECLARED if s.sig is None else s.sig


_UNDECLARED = (None,) * 5  # a step whose declaration the stream does not hold


class _Context:
    """What every step's segments are drawn against: when each step succeeded, the wait
    records by kind of step, and the causes found so far."""

    def __init__(self, steps: dict[str, Step], free: FreeIndex):
        self.steps, self.free = steps, free
        # When each step succeeded (or was skipped): its dependents could go from then.
        self.done_at: dict[str, float] = {}
        for s in steps.values():
            if s.outcome == S.SKIPPED:
                self.done_at[s.id] = s.final_t
            elif s.outcome == S.SUCCEEDED:
                self.done_at[s.id] = s.last.end
        # Every wait record by the kind of step that wrote it, in time order.
        self.by_sig: dict[tuple, tuple[list[float], list[tuple[str, Waited]]]] = {}
        # (and by fleet: fleets sharing the run directory queue their steps apart)
        recs = sorted(((w, s.id, (w.fleet, _signature(s))) for s in steps.values() if s.waits for w in s.waits),
                      key=lambda x: x[0].t)
        for w, sid, sig in recs:
            ts, vs = self.by_sig.setdefault(sig, ([], []))
            ts.append(w.t)
            vs.append((sid, w))
        # By the record (its id: the records outlive this), as a queued step's cause is
        # its kind's head's, asked again for every step queued behind it.
        self.causes: dict[int, str] = {}

    def cause(self, w: Waited) -> str:
        c = self.causes.get(id(w))
        if c is None:
            c = self.causes[id(w)] = classify(w.why, w.t, self.free)
        return c

    def dependency_wait(self, s: Step, p_from: float, p_to: float, segs: list) -> float:
        """Add the wait for s's dependencies; return when the last one was done."""
        steps, done_at = self.steps, self.done_at
        known = [d for d in s.deps if d in steps]
        fleet = s.attempts[-1].fleet if s.attempts else s.fleet
        done_at = {d: _seen(steps[d], fleet, done_at.get(d, math.inf)) for d in known}
        ready = max([p_from] + [done_at[d] for d in known])
        if ready > p_from:
            pending = [d for d in known if done_at[d] == math.inf]
            if pending:
                named = [d + _whose(steps[d]) for d in pending[:3]]
                why = "dependency " + ", ".join(named) + (" ..." if len(pending) > 3 else "") + " not done"
            else:
                why = f"dependency {max(known, key=lambda d: done_at.get(d, math.inf))}"
            segs.append((p_from, min(ready, p_to), W.DEPENDENCY, why))
        return ready

    def resource_waits(self, s: Step, ready: float, p_to: float, segs: list) -> None:
        """Add the waits of a ready step until p_to: its own records, and before the
        first of them, its turn behind its kind's head. Where an attempt starts at p_to,
        only the records of its fleet (and of none: a stream that names no fleet): another
        fleet's `elsewhere` waited on that fleet's claim, not for what held the step back
        where it ran (before 2026-12-07 a step waiting for cores in the fleet that ran it
        waited for "another fleet (which holds its claim)" there)."""
        own = [w for w in s.waits if ready <= w.t < p_to] if s.waits else s.waits
        runner = next((a.fleet for a in s.attempts if a.start == p_to), None) if own else None
        if runner:
            own = [w for w in own if w.fleet in (runner, "")]
        nxt = own[0].t if own else p_to
        if nxt > ready:
            self._behind_head(s, ready, nxt, segs)
        for j, w in enumerate(own):
            nxt = own[j + 1].t if j + 1 < len(own) else p_to
            if nxt > w.t:
                segs.append((w.t, nxt, self.cause(w), w.text))

    def _behind_head(self, s: Step, ready: float, nxt: float, segs: list) -> None:
        """Add the wait of a ready step with no record of its own from `ready` to `nxt`:
        behind the latest record of its kind, or, where there was none yet, its turn
        until the kind's next record, and behind that one from then (the scheduler's
        first pass over a big submission writes it a moment after the steps became
        ready; before 2026-12-07 such steps waited for their turn all the time). One
        record looked up either way, by bisection: a million steps stay cheap."""
        cat, why, t = W.QUEUED, "ready; no wait recorded for it or its kind", ready
        fleet = s.attempts[-1].fleet if s.attempts else s.fleet
        sig = self.by_sig.get((fleet, _signature(s))) if self.by_sig else None
        if sig is not None:
            i = bisect_right(sig[0], ready)
            if i > 0 and sig[1][i - 1][0] != s.id:
                head, w = sig[1][i - 1]
                cat, why = self.cause(w), f"queued behind {head}: {w.text}"
            elif i < len(sig[0]) and sig[0][i] < nxt:
                # (not its own: its own records from `ready` on end the stretch at `nxt`)
                segs.append((ready, sig[0][i], cat, why))
                head, w = sig[1][i]
                cat, why, t = self.cause(w), f"queued behind {head}: {w.text}", sig[0][i]
        segs.append((t, nxt, cat, why))
