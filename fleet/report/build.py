"""`fleet report`: what a run did, from its event stream alone.

Pure: `build(records, now=...)` takes the records of events.jsonl (dicts, in the order
written) and returns a `Report`; nothing here reads a clock or a file except `load()`.
The figures (defined in docs/report.md):

- wall: from the first submission to the end of the last step (or `now` while steps
  still run or wait);
- work: the sum of the steps' own work (`work_s` of every finished attempt: from the
  step's first instruction of its own code to its last), never the cost of starting
  them, which is reported apart as startup (`startup_s`: the coordinator's decision
  to the step's own first instruction);
- speedup: work / wall, against running the same steps back to back;
- the dependency floor: the longest chain of the steps' own work over the recorded
  dependencies, and how far the run was from it;
- utilization: core-, GPU- and memory-seconds held by steps (from the start decision to
  the exit record, the scheduler's view) and core-seconds of the steps' own work, per
  node and overall, against what the live nodes offered in the wall window;
- waits: what each waiting step waited for (a dependency, cores, GPUs, memory, a node
  that would hold it whole, ...), and the longest stretches in which cores sat idle
  while steps waited.

A stream of a run in progress works: running steps end `now`, waiting steps wait until
`now`. A stream may hold several fleet sessions (each `fleet_starting` begins one, e.g.
reruns in one run directory); a report covers one (the last by default).
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from fleet.wire.events import read_events

# Outcomes of a step as the report shows them (the final state, or what it is doing).
SUCCEEDED, FAILED, TERMINATED, LOST = "succeeded", "failed", "terminated", "lost"
BLOCKED, UNRUNNABLE, SKIPPED = "blocked", "unrunnable", "skipped"
RUNNING, WAITING = "running", "waiting"
UNFINISHED, NOT_RUN = "unfinished", "not run"  # the fleet went down before it ended / ran
PROBLEM_OUTCOMES = (FAILED, TERMINATED, LOST, BLOCKED, UNRUNNABLE, UNFINISHED, NOT_RUN)

# What a waiting step waits for.
DEPENDENCY, CORES, GPUS, MEMORY, WHOLE_NODE = "dependency", "cores", "gpus", "memory", "whole node"
SPAN, ALONE, QUEUED, OTHER = "span", "alone", "queued", "other"
ELSEWHERE = "elsewhere"
ELSEWHERE_MARK = "elsewhere: "
CATEGORY_TEXT = {
    DEPENDENCY: "a dependency",
    CORES: "cores",
    GPUS: "GPUs",
    MEMORY: "memory",
    WHOLE_NODE: "a node that would hold it whole",
    SPAN: "room across nodes",
    ALONE: "to run alone (serial)",
    QUEUED: "its turn (ready, no wait recorded)",
    ELSEWHERE: "another fleet (which holds its claim)",
    OTHER: "something else",
}


# --- the records, gathered --------------------------------------------------------------

@dataclass
class Node:
    name: str
    cores: list[int]
    gpus: list[int]
    memory: int
    joined: float
    lost: float | None = None
    lost_reason: str = ""


@dataclass(slots=True)
class Attempt:
    step: str
    attempt: int
    node: str | None
    placement: list[dict]            # [{node, cores, gpus, memory}], one per node
    start: float                     # the start decision (coordinator clock)
    started: float | None = None     # the coordinator heard the process exists
    end: float | None = None         # the exit record (None: still running)
    outcome: str = RUNNING
    reason: str = ""
    startup_s: float | None = None   # decision -> the step's own first instruction
    work_s: float | None = None      # the step's own work
    exit: dict | None = None         # the exit record (returncode, signal, rusage, ...)

    ncores: int = -1                 # cores held over every node (cached)

    @property
    def cores(self) -> int:
        if self.ncores < 0:
            self.ncores = sum(len(p.get("cores") or ()) for p in self.placement)
        return self.ncores

    @property
    def gpus(self) -> int:
        return sum(len(p.get("gpus") or ()) for p in self.placement)

    @property
    def memory(self) -> int:
        return sum(int(p.get("memory") or 0) for p in self.placement)


@dataclass(slots=True)
class Step:
    id: str
    submitted: float
    deps: list[str] = field(default_factory=list)
    declared: dict = field(default_factory=dict)
    serial: bool = False
    foreign: bool = False             # another shard runs it; this fleet waits for its marker
    attempts: list[Attempt] = field(default_factory=list)
    waits: list[tuple[float, str]] = field(default_factory=list)   # own wait records
    retries: list[float] = field(default_factory=list)
    final: str | None = None          # blocked | unrunnable | skipped (decided without an exit)
    final_t: float | None = None
    final_reason: str = ""
    outcome: str = WAITING
    reason: str = ""
    end: float | None = None          # when it reached its final state
    segments: list[tuple[float, float, str, str]] = field(default_factory=list)  # waits (from, to, category, why)
    sig: tuple | None = None          # the kind of step, for queueing behind its kind's head

    @property
    def last(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def waited_s(self) -> float:
        return sum(b - a for a, b, _, _ in self.segments)

    def waited_for(self) -> str | None:
        by: dict[str, float] = {}
        for a, b, cat, _ in self.segments:
            by[cat] = by.get(cat, 0.0) + (b - a)
        return max(by, key=by.get) if by else None


@dataclass
class Report:
    run_dir: str
    session: int
    sessions: int
    in_progress: bool
    t0: float
    t_end: float
    wall_s: float
    work_s: float
    work_core_s: float
    startup: dict
    speedup: float | None
    floor_s: float
    floor_path: list[str]
    floor_with_startup_s: float
    utilization: dict
    nodes: dict[str, Node]
    steps: dict[str, Step]
    counts: dict[str, int]
    problems: list[dict]
    waits: dict[str, dict]
    stretches: list[dict]
    fleet_up_s: float | None = None
    capacity_floor_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def attempts(self) -> Iterable[Attempt]:
        for s in self.steps.values():
            yield from s.attempts

    def rel(self, t: float | None) -> float | None:
        return None if t is None else round(t - self.t0, 6)

    def to_json(self, stretch_steps: int = 20) -> dict:
        steps = {}
        rel = self.rel
        for s in self.steps.values():
            a = s.last
            segs = s.segments
            waited = (segs[0][1] - segs[0][0]) if len(segs) == 1 else s.waited_s
            e = {"node": None, "cores": 0, "gpus": 0, "memory": 0, "start": None,
                 "end": rel(s.end), "outcome": s.outcome, "reason": s.reason, "work_s": None, "startup_s": None,
                 "attempts": len(s.attempts), "waited_s": round(waited, 6),
                 "waited_for": (segs[0][2] if len(segs) == 1 else s.waited_for()) if segs else None}
            if a is not None:
                e["node"], e["cores"], e["gpus"], e["memory"] = a.node, a.cores, a.gpus, a.memory
                e["start"] = rel(a.start)
                if s.end is None:
                    e["end"] = rel(a.end)
                if len(s.attempts) == 1:
                    e["work_s"], e["startup_s"] = a.work_s, a.startup_s
                else:
                    e["work_s"] = _r(sum(x.work_s for x in s.attempts if x.work_s is not None))
                    e["startup_s"] = _r(sum(x.startup_s for x in s.attempts if x.startup_s is not None))
                if len(a.placement) > 1:
                    e["nodes"] = [p["node"] for p in a.placement]
            steps[s.id] = e
        stretches = []
        for st in self.stretches:
            st = dict(st)
            st["steps"] = st["steps"][:stretch_steps]
            stretches.append(st)
        return {
            "run_dir": self.run_dir,
            "session": self.session,
            "sessions": self.sessions,
            "in_progress": self.in_progress,
            "t0": self.t0,
            "wall_s": _r(self.wall_s),
            "work_s": _r(self.work_s),
            "work_core_s": _r(self.work_core_s),
            "startup_s": _r(self.startup["total_s"]),
            "startup": {k: _r(v) if isinstance(v, float) else v for k, v in self.startup.items()},
            "speedup": _r(self.speedup),
            "floor_s": _r(self.floor_s),
            "floor_path": self.floor_path,
            "floor_with_startup_s": _r(self.floor_with_startup_s),
            "from_floor_s": _r(self.wall_s - self.floor_s),
            "capacity_floor_s": _r(self.capacity_floor_s),
            "floor_ratio": _r(self.wall_s / self.floor_s) if self.floor_s > 0 else None,
            "fleet_up_s": _r(self.fleet_up_s),
            "utilization": self.utilization,
            "nodes": {n.name: {"cores": len(n.cores), "gpus": len(n.gpus), "memory": n.memory,
                               "joined": self.rel(n.joined), "lost": self.rel(n.lost),
                               "lost_reason": n.lost_reason} for n in self.nodes.values()},
            "counts": self.counts,
            "problems": self.problems,
            "waits": self.waits,
            "stretches": stretches,
            "notes": self.notes,
            "steps": steps,
        }


def _r(x, nd: int = 6):
    return None if x is None else round(x, nd)


# --- reading -------------------------------------------------------------------------------

def events_path(run_dir: Path) -> Path:
    p = Path(run_dir)
    return p if p.is_file() else p / "events.jsonl"


def load(run_dir: Path) -> list[dict]:
    """The records written so far (a torn last line of a live run is skipped)."""
    import json
    path = events_path(run_dir)
    text = path.read_text(encoding="utf-8")
    # One parse of the whole stream as an array is much quicker than one per line;
    # a stream with a torn or damaged line is read line by line instead.
    try:
        recs = json.loads("[" + text.rstrip("\n").replace("\n", ",") + "]") if text.strip() else []
        if all(type(r) is dict for r in recs):
            return recs
    except ValueError:
        pass
    return list(read_events(path))


def sessions(records: list[dict]) -> list[list[dict]]:
    """The stream cut into sessions: a session begins with a `fleet_starting` when no
    fleet is up and lasts until as many `fleet_down` records as fleets started. Fleets
    sharing a run directory append to one stream and their records carry no fleet id,
    so fleets that overlap in time form one session (records before the first
    `fleet_starting` form one too)."""
    marks = [i for i, r in enumerate(records) if r.get("kind") in _BOUNDS]
    cuts = [0]
    live = 0
    for i in marks:
        if records[i]["kind"] == "fleet_starting":
            if live <= 0 and i > cuts[-1]:
                cuts.append(i)
            live = max(live, 0) + 1
        else:
            live -= 1
    cuts.append(len(records))
    return [records[a:b] for a, b in zip(cuts, cuts[1:])] or [[]]


_BOUNDS = frozenset(("fleet_starting", "fleet_down"))


# --- building ----------------------------------------------------------------------------------

def build(records: list[dict], now: float | None = None, *, session: int = -1, run_dir: str = "",
          top: int = 10) -> Report:
    """The report of one session of `records`.

    `now` ends what is still running or waiting when the session has no `fleet_down`
    (a run in progress); without it, the last record's time is used.
    `session`: 1-based index, or negative from the end (-1: the last).
    """
    all_sessions = sessions(records)
    n = len(all_sessions)
    idx = session - 1 if session > 0 else n + session
    if not 0 <= idx < n:
        raise ValueError(f"the stream holds {n} session(s); there is no session {session}")
    recs = all_sessions[idx]
    notes: list[str] = []

    nodes: dict[str, Node] = {}
    steps: dict[str, Step] = {}
    serial_subs: set = set()
    first_t = recs[0]["t"] if recs else 0.0
    last_t = first_t
    submitted_t: float | None = None
    fleet_up_t: float | None = None
    starting_t: float | None = None
    down_t: float | None = None
    fleets_up = 0
    fleets_started = 0
    mismatches = 0
    lost_exit_fields = 0
    skewed = 0

    def step_of(sid: str, t: float) -> Step:
        s = steps.get(sid)
        if s is None:  # a stream cut before its step record (or a hand-made one)
            s = steps[sid] = Step(sid, t)
        return s

    for r in recs:
        try:
            kind, t = r["kind"], r["t"]
        except (KeyError, TypeError):
            continue
        if t > last_t:
            last_t = t
        if kind == "started":
            s = steps.get(r["step"])
            if s is not None and s.attempts and s.attempts[-1].attempt == r.get("attempt"):
                s.attempts[-1].started = t
        elif kind == "start":
            s = step_of(r["step"], t)
            placement = r.get("placement") or [dict(node=r.get("node"), cores=r.get("cores") or [],
                                                    gpus=r.get("gpus") or [], memory=r.get("memory") or 0)]
            s.attempts.append(Attempt(s.id, int(r.get("attempt", len(s.attempts) + 1)), r.get("node"),
                                      placement, t, ncores=len(r["cores"]) if "cores" in r else -1))
        elif kind == "exit":
            s = step_of(r["step"], t)
            att = r.get("attempt", 0)
            a = s.attempts[-1] if s.attempts and s.attempts[-1].attempt == att else next(
                (x for x in reversed(s.attempts) if x.attempt == att), None)
            if a is None:  # an exit without its start record (a cut stream)
                a = Attempt(s.id, att, r.get("node"), [dict(node=r.get("node"), cores=r.get("cores") or [],
                                                             gpus=r.get("gpus") or [], memory=r.get("memory") or 0)],
                            r.get("decided_at") or t)
                s.attempts.append(a)
            a.end = t
            a.exit = r
            a.outcome = r.get("outcome", FAILED)
            a.reason = r.get("reason") or r.get("error") or ""
            a.startup_s = su = r.get("startup_s")
            a.work_s = r.get("work_s")
            if su is None:
                if a.outcome == LOST:
                    lost_exit_fields += 1
            elif su == 0.0:
                ws, da = r.get("work_start"), r.get("decided_at")
                if ws is not None and da is not None and ws < da - 1e-3:
                    skewed += 1
        elif kind == "step":
            sid = r["step"]
            s = steps.get(sid)
            if s is None:
                s = steps[sid] = Step(sid, t)
                s.deps = list(r.get("deps") or ())
                s.declared = r  # cores, min_cores, gpus, memory, priority, step_kind, task
                s.serial = r.get("submission") in serial_subs
                s.foreign = bool(r.get("foreign"))
        elif kind == "wait":
            s = step_of(r["step"], t)
            if s.waits and s.waits[-1][0] == t and s.waits[-1][1].startswith(ELSEWHERE_MARK):
                continue  # the wait that goes with an `elsewhere` record
            s.waits.append((t, r.get("reason") or ""))
        elif kind == "elsewhere":  # decided, but another fleet holds the step's claim
            step_of(r["step"], t).waits.append(
                (t, f"{ELSEWHERE_MARK}held by fleet {r.get('holder') or '?'}: {r.get('reason') or ''}"))
        elif kind == "reclaim":
            step_of(r["step"], t).waits.append((t, f"reclaimed ({r.get('reason') or ''}); ready"))
        elif kind == "retry":
            step_of(r["step"], t).retries.append(t)
        elif kind in ("blocked", "unrunnable", "skipped"):
            s = step_of(r["step"], t)
            s.final, s.final_t = kind, t
            s.final_reason = (f"dependency {r.get('because')} did not succeed" if kind == "blocked"
                              else r.get("reason") or ("already succeeded" if kind == "skipped" else ""))
            if kind == "skipped" and r.get("by"):
                s.final_reason = f"succeeded in fleet {r['by']}"
        elif kind == "submitted":
            if submitted_t is None:
                submitted_t = t
            if r.get("serial"):
                serial_subs.add(r.get("submission"))
        elif kind == "node_joined":
            nodes[r["node"]] = Node(r["node"], list(r.get("cores") or ()), list(r.get("gpus") or ()),
                                    int(r.get("memory") or 0), t)
        elif kind == "node_lost":
            nd = nodes.get(r["node"])
            if nd is not None and nd.lost is None:
                nd.lost, nd.lost_reason = t, r.get("reason") or ""
        elif kind == "fleet_starting":
            fleets_started += 1
            fleets_up += 1
            if starting_t is None:
                starting_t = t
        elif kind == "fleet_up":
            if fleet_up_t is None:
                fleet_up_t = t
        elif kind == "fleet_down":
            fleets_up -= 1
            down_t = t
        elif kind == "placement_mismatch":
            mismatches += 1

    nodes = {k: nodes[k] for k in sorted(nodes, key=_natural)}
    in_progress = bool(recs) and (down_t is None or fleets_up > 0)
    if not recs:
        notes.append("the stream is empty")
    if in_progress:
        down_t = None
    if now is None or not in_progress:
        now = down_t if down_t is not None else last_t
    now = max(now, last_t)

    # Final outcomes, and what a stopped fleet left undone; work and startup; the end.
    busy_now = False
    last_end: float | None = None
    work = 0.0
    work_core = 0.0
    startups: list[float] = []
    for s in steps.values():
        a = s.last
        if s.final is not None:
            s.outcome, s.reason, s.end = s.final, s.final_reason, s.final_t
        elif a is not None and a.end is None:
            if in_progress:
                s.outcome, s.reason = RUNNING, ""
                busy_now = True
            else:
                a.end, a.outcome, a.reason = now, UNFINISHED, "the fleet went down while it ran"
                s.outcome, s.reason, s.end = UNFINISHED, a.reason, now
        elif a is not None and not (s.retries and s.retries[-1] >= a.end and len(s.retries) >= len(s.attempts)):
            s.outcome, s.reason, s.end = a.outcome, a.reason, a.end
        elif s.foreign or (s.waits and s.waits[-1][1].startswith(ELSEWHERE_MARK)):
            s.outcome = ELSEWHERE  # another fleet runs it; no outcome of it reached this stream
            s.reason = ("another shard runs it" if s.foreign else s.waits[-1][1][len(ELSEWHERE_MARK):])
            busy_now = busy_now or in_progress
        else:
            s.outcome = WAITING if in_progress else NOT_RUN
            if not in_progress:
                s.reason, s.end = "the fleet went down before it ran", now
            else:
                busy_now = True
        if s.end is not None and (last_end is None or s.end > last_end):
            last_end = s.end
        for x in s.attempts:
            if x.end is not None and (last_end is None or x.end > last_end):
                last_end = x.end
            if x.work_s is not None:
                work += x.work_s
                work_core += x.work_s * x.cores
            if x.startup_s is not None:
                startups.append(x.startup_s)

    # The wall window: from the first submission to the end of the last step.
    t0 = submitted_t if submitted_t is not None else first_t
    t_end = now if busy_now else (last_end if last_end is not None else t0)
    t_end = max(t_end, t0)
    wall = t_end - t0

    startups.sort()
    startup = {
        "count": len(startups),
        "total_s": float(sum(startups)),
        "median_s": _median(startups),
        "p95_s": _nearest_rank(startups, 0.95),
        "mean_s": (sum(startups) / len(startups)) if startups else None,
        "max_s": startups[-1] if startups else None,
    }
    speedup = (work / wall) if wall > 0 else None

    # The dependency floor.
    d_work: dict[str, float] = {}
    d_both: dict[str, float] = {}
    for s in steps.values():
        if not s.attempts:
            continue
        a = s.attempts[-1]
        if a.outcome == RUNNING:
            d_work[s.id] = d_both[s.id] = max(0.0, now - (a.started or a.start))
        else:
            w = a.work_s or 0.0
            d_work[s.id] = w
            d_both[s.id] = w + (a.startup_s or 0.0)
    order, children = _topo({s.id: s.deps for s in steps.values()})
    floor_s, floor_path = _longest(order, children, d_work)
    floor_ws, _ = _longest(order, children, d_both)

    util = _utilization(nodes, steps, t0, t_end)
    cap = util["overall"]["capacity_core_s"] or 0.0
    capacity_floor = work_core / (cap / wall) if cap > 0 and wall > 0 else 0.0

    counts: dict[str, int] = {}
    for s in steps.values():
        counts[s.outcome] = counts.get(s.outcome, 0) + 1

    problems = []
    for s in steps.values():
        for k, a in enumerate(s.attempts):
            retried = k + 1 < len(s.attempts) or s.outcome in (WAITING, NOT_RUN)
            if retried and a.outcome in (FAILED, TERMINATED, LOST):  # then tried again
                problems.append(dict(step=s.id, outcome=a.outcome, attempt=a.attempt, node=a.node,
                                     t=_r(a.end - t0) if a.end is not None else None, reason=a.reason,
                                     retried=True))
        if s.outcome in PROBLEM_OUTCOMES:
            a = s.last
            problems.append(dict(step=s.id, outcome=s.outcome, attempt=a.attempt if a and s.final is None else None,
                                 node=a.node if a and s.final is None else None,
                                 t=_r(s.end - t0) if s.end is not None else None, reason=s.reason, retried=False))
    problems.sort(key=lambda p: (p["t"] is None, p["t"] or 0.0, p["outcome"] == BLOCKED, p["step"]))

    # Waits, and the stretches of idle cores while steps waited.
    free = _FreeIndex(nodes, steps, t_end)
    _wait_segments(steps, t_end, free)
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
        w["step_s"] = _r(w["step_s"])
    stretches = _stretches(nodes, steps, t0, t_end, top)

    if mismatches:
        notes.append(f"{mismatches} step(s) did not get the cores they were given (placement_mismatch records)")
    if lost_exit_fields:
        notes.append(f"{lost_exit_fields} lost attempt(s) have no timings: their work is unknown and not counted")
    if skewed:
        notes.append(f"{skewed} attempt(s) began their work before the coordinator decided to start them "
                     "(work_start < decided_at): that node's clock is behind the coordinator's, and their "
                     "startup (clamped at 0) is not to be trusted")
    if fleets_started > 1:
        notes.append(f"{fleets_started} fleets wrote to this stream at once (or one ended without fleet_down); "
                     "its records carry no fleet id, so they are reported together")
    if in_progress:
        notes.append("the stream has no fleet_down: a run in progress (running steps end now)")

    return Report(
        run_dir=run_dir, session=idx + 1, sessions=n, in_progress=in_progress, t0=t0, t_end=t_end,
        wall_s=wall, work_s=work, work_core_s=work_core, startup=startup, speedup=speedup,
        floor_s=floor_s, floor_path=floor_path, floor_with_startup_s=floor_ws, utilization=util,
        nodes=nodes, steps=steps, counts=counts, problems=problems, waits=waits, stretches=stretches,
        fleet_up_s=(fleet_up_t - starting_t) if fleet_up_t is not None and starting_t is not None else None,
        capacity_floor_s=capacity_floor,
        notes=notes)


def _natural(name: str) -> list:
    """node2 before node10."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", name)]


def _median(xs: list[float]) -> float | None:
    n = len(xs)
    if not n:
        return None
    m = n // 2
    return xs[m] if n % 2 else (xs[m - 1] + xs[m]) / 2


def _nearest_rank(xs: list[float], q: float) -> float | None:
    """The q-quantile by the nearest-rank method (xs sorted): an observed value."""
    if not xs:
        return None
    return xs[max(0, math.ceil(q * len(xs)) - 1)]


def critical_path(deps: dict[str, list[str]], dur: dict[str, float]) -> tuple[float, list[str]]:
    """The longest chain (sum of durations) through deps; deps on unknown ids are ignored.
    Returns (length, the chain from its first step to its last)."""
    order, children = _topo(deps)
    return _longest(order, children, dur)


def _topo(deps: dict[str, list[str]]) -> tuple[list[str], dict[str, list[str]]]:
    """Kahn's order of the ids (those on a cycle are left out) and each id's dependents."""
    indeg = dict.fromkeys(deps, 0)
    children: dict[str, list[str]] = {}
    for k, ds in deps.items():
        for d in ds:
            if d in indeg:
                children.setdefault(d, []).append(k)
                indeg[k] += 1
    order = [k for k, v in indeg.items() if v == 0]
    i = 0
    while i < len(order):
        for c in children.get(order[i], ()):
            indeg[c] -= 1
            if indeg[c] == 0:
                order.append(c)
        i += 1
    return order, children


def _longest(order: list[str], children: dict[str, list[str]], dur: dict[str, float]) -> tuple[float, list[str]]:
    start: dict[str, float] = dict.fromkeys(order, 0.0)  # longest chain before each id
    via: dict[str, str] = {}
    best, end = -1.0, None
    for k in order:
        f = start[k] + dur.get(k, 0.0)
        if f > best:
            best, end = f, k
        for c in children.get(k, ()):
            if f > start[c]:
                start[c] = f
                via[c] = k
    if end is None:
        return 0.0, []
    path = [end]
    while path[-1] in via:
        path.append(via[path[-1]])
    return best, path[::-1]


def _utilization(nodes: dict[str, Node], steps: dict[str, Step], t0: float, t_end: float) -> dict:
    per: dict[str, dict] = {}
    for nd in nodes.values():
        alive = max(0.0, min(nd.lost if nd.lost is not None else t_end, t_end) - max(nd.joined, t0))
        per[nd.name] = {"cores": len(nd.cores), "gpus": len(nd.gpus), "memory": nd.memory, "alive_s": alive,
                        "core_s": 0.0, "work_core_s": 0.0, "gpu_s": 0.0, "memory_s": 0.0}
    acc = {name: [0.0, 0.0, 0.0, 0.0] for name in per}  # core_s, work_core_s, gpu_s, memory_s
    for s in steps.values():
        for a in s.attempts:
            end = a.end if a.end is not None and a.end < t_end else t_end
            held = end - (a.start if a.start > t0 else t0)
            if held <= 0:
                continue
            work = a.work_s
            if work is not None and work > held:
                work = held
            for p in a.placement:
                u = acc.get(p.get("node"))
                if u is None:
                    continue
                c = len(p.get("cores") or ())
                u[0] += c * held
                if work is not None:
                    u[1] += c * work
                g = p.get("gpus")
                if g:
                    u[2] += len(g) * held
                m = p.get("memory")
                if m:
                    u[3] += m * held
    for name, (cs, ws, gs, ms) in acc.items():
        u = per[name]
        u["core_s"], u["work_core_s"], u["gpu_s"], u["memory_s"] = cs, ws, gs, ms

    def frac(num: float, den: float):
        return round(num / den, 6) if den > 0 else None

    tot = {"core_s": 0.0, "work_core_s": 0.0, "gpu_s": 0.0, "memory_s": 0.0,
           "cap_core_s": 0.0, "cap_gpu_s": 0.0, "cap_memory_s": 0.0}
    out_nodes = {}
    for name, u in per.items():
        cap_c, cap_g, cap_m = u["cores"] * u["alive_s"], u["gpus"] * u["alive_s"], u["memory"] * u["alive_s"]
        tot["core_s"] += u["core_s"]
        tot["work_core_s"] += u["work_core_s"]
        tot["gpu_s"] += u["gpu_s"]
        tot["memory_s"] += u["memory_s"]
        tot["cap_core_s"] += cap_c
        tot["cap_gpu_s"] += cap_g
        tot["cap_memory_s"] += cap_m
        out_nodes[name] = {
            "cores": u["cores"], "gpus": u["gpus"], "memory": u["memory"], "alive_s": _r(u["alive_s"]),
            "cores_held": frac(u["core_s"], cap_c), "cores_working": frac(u["work_core_s"], cap_c),
            "gpus_held": frac(u["gpu_s"], cap_g), "memory_held": frac(u["memory_s"], cap_m),
            "core_s": _r(u["core_s"]), "work_core_s": _r(u["work_core_s"]),
        }
    overall = {
        "cores_held": frac(tot["core_s"], tot["cap_core_s"]),
        "cores_working": frac(tot["work_core_s"], tot["cap_core_s"]),
        "gpus_held": frac(tot["gpu_s"], tot["cap_gpu_s"]),
        "memory_held": frac(tot["memory_s"], tot["cap_memory_s"]),
        "core_s": _r(tot["core_s"]), "work_core_s": _r(tot["work_core_s"]),
        "capacity_core_s": _r(tot["cap_core_s"]),
    }
    return {"overall": overall, "nodes": out_nodes}


# --- waits -----------------------------------------------------------------------------------

class _FreeIndex:
    """Free cores, GPUs and memory of each node at any time, from the start and exit
    records (held from the start decision to the exit record), by bisection."""

    def __init__(self, nodes: dict[str, Node], steps: dict[str, Step], t_end: float):
        self.nodes, self.steps, self.t_end = nodes, steps, t_end
        self.times: dict[str, list[float]] | None = None

    def _index(self) -> None:
        nodes, steps, t_end = self.nodes, self.steps, self.t_end
        ev: dict[str, list[tuple[float, int, int, int]]] = {n: [] for n in nodes}
        for s in steps.values():
            for a in s.attempts:
                end = a.end if a.end is not None else t_end
                for p in a.placement:
                    lst = ev.get(p.get("node"))
                    if lst is None:
                        continue
                    c, g, m = len(p.get("cores") or ()), len(p.get("gpus") or ()), int(p.get("memory") or 0)
                    lst.append((a.start, c, g, m))
                    lst.append((end, -c, -g, -m))
        self.times = {}
        self.held: dict[str, list[tuple[int, int, int]]] = {}
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

    def free_at(self, t: float) -> list[tuple[str, int, int, int]]:
        """(node, free cores, free GPUs, free memory) of each live node just after t."""
        if self.times is None:
            self._index()
        out = []
        for name, nd in self.nodes.items():
            if nd.joined > t or (nd.lost is not None and nd.lost <= t):
                continue
            i = bisect_right(self.times[name], t) - 1
            c, g, m = self.held[name][i] if i >= 0 else (0, 0, 0)
            out.append((name, len(nd.cores) - c, len(nd.gpus) - g, nd.memory - m))
        return out


_NEEDS_CORES = re.compile(r"^needs (\d+) cores, (\d+) free")
_NEEDS_GPUS = re.compile(r"^needs (\d+) GPUs, (\d+) free")
_NO_NODE = re.compile(r"^no node has (\d+) cores(?:, (\d+) GPUs)?(?:, (\d+) bytes of memory)? free together")


def classify(reason: str, t: float | None = None, free: _FreeIndex | None = None) -> str:
    """What a wait record says the step waits for. "no node has ... free together" is
    told apart (memory, or a node that would hold it whole) from the free resources at
    the time, reconstructed from the start and exit records."""
    if _NEEDS_CORES.match(reason):
        return CORES
    if _NEEDS_GPUS.match(reason):
        return GPUS
    m = _NO_NODE.match(reason)
    if m:
        # Without a memory figure the step takes its proportional share of a node, and
        # such steps never wait on memory (fleet.core.resources): it is a whole node it lacks.
        if m.group(3) and free is not None and t is not None:
            cores, gpus = int(m.group(1)), int(m.group(2) or 0)
            mem = int(m.group(3)) if m.group(3) else None
            for _, fc, fg, fm in free.free_at(t):
                if fc >= cores and fg >= gpus and (mem is None or fm < mem):
                    return MEMORY
        return WHOLE_NODE
    if "across nodes" in reason:
        return SPAN
    if reason.startswith("runs alone"):
        return ALONE
    if reason.startswith(ELSEWHERE_MARK):
        return ELSEWHERE
    if reason.startswith("reclaimed"):
        return QUEUED
    return OTHER


def _signature(s: Step) -> tuple:
    if s.sig is not None:
        return s.sig
    s.sig = _sig(s)
    return s.sig


def _sig(s: Step) -> tuple:
    if s.serial:
        return ("serial",)
    d = s.declared
    return (d.get("cores"), d.get("min_cores"), d.get("gpus"), d.get("memory"), d.get("step_kind"))


def _wait_segments(steps: dict[str, Step], t_end: float, free: _FreeIndex) -> None:
    """Fill each step's `segments`: (from, to, category, why) for every stretch of time it
    was submitted (or back for a retry) but not running."""
    # When each step succeeded (or was skipped): its dependents could go from then.
    done_at: dict[str, float] = {}
    for s in steps.values():
        if s.outcome == SKIPPED:
            done_at[s.id] = s.final_t
        elif s.outcome == SUCCEEDED:
            done_at[s.id] = s.last.end
    # Every wait record by the kind of step that wrote it: a ready step without its own
    # record queues behind the one of its kind that has (the scheduler records the head).
    by_sig: dict[tuple, tuple[list[float], list[tuple[str, str]]]] = {}
    recs = sorted(((t, r, s.id, _signature(s)) for s in steps.values() if s.waits for t, r in s.waits),
                  key=lambda x: x[0])
    for t, r, sid, sig in recs:
        ts, vs = by_sig.setdefault(sig, ([], []))
        ts.append(t)
        vs.append((sid, r))
    cls_cache: dict[tuple[float, str], str] = {}

    def cat_of(t: float, reason: str) -> str:
        key = (t, reason)
        c = cls_cache.get(key)
        if c is None:
            c = cls_cache[key] = classify(reason, t, free)
        return c

    never = (BLOCKED, UNRUNNABLE, SKIPPED)
    for s in steps.values():
        s.segments = segs = []
        if s.foreign or (s.outcome == SKIPPED and not s.waits):
            continue  # another shard's step, or skipped at once: it never waited to run here
        # Periods of waiting: submission -> first start; each retry -> the next start.
        atts = s.attempts
        if not s.retries:
            periods = [(s.submitted, atts[0].start if atts else None, True)]
        else:
            periods = [(s.submitted, atts[0].start if atts else None, True)] + [
                (rt, atts[i + 1].start if i + 1 < len(atts) else None, False) for i, rt in enumerate(s.retries)]
        for p_from, p_to, first in periods:
            if p_to is None:
                p_to = s.final_t if s.final in never else (
                    s.end if s.outcome == NOT_RUN and s.end is not None else t_end)
            if p_to is None or p_to <= p_from:
                continue
            ready = p_from
            if first and s.deps:
                known = [d for d in s.deps if d in steps]
                pending = [d for d in known if d not in done_at]
                last_dep = max(known, key=lambda d: done_at.get(d, math.inf)) if known else None
                ready = max([p_from] + [done_at.get(d, math.inf) for d in known])
                if ready > p_from:
                    named = [d + (" (another fleet runs it)" if steps[d].foreign else "") for d in pending[:3]]
                    why = ("dependency " + ", ".join(named) + (" ..." if len(pending) > 3 else "")
                           + " not done") if pending else f"dependency {last_dep}"
                    segs.append((p_from, min(ready, p_to), DEPENDENCY, why))
            if ready >= p_to:
                continue
            own = [(t, r) for t, r in s.waits if ready <= t < p_to] if s.waits else s.waits
            cur_t = ready
            if not own or own[0][0] > ready:
                sig = by_sig.get(_signature(s)) if by_sig else None
                cat, why = QUEUED, "ready; no wait recorded for it or its kind"
                if sig is not None:
                    i = bisect_right(sig[0], ready) - 1
                    if i >= 0 and sig[1][i][0] != s.id:
                        head, r = sig[1][i]
                        cat, why = cat_of(sig[0][i], r), f"queued behind {head}: {r}"
                nxt = own[0][0] if own else p_to
                if nxt > cur_t:
                    segs.append((cur_t, nxt, cat, why))
                cur_t = nxt
            for j, (t, r) in enumerate(own):
                nxt = own[j + 1][0] if j + 1 < len(own) else p_to
                if nxt > t:
                    segs.append((t, nxt, cat_of(t, r), r))


def _stretches(nodes: dict[str, Node], steps: dict[str, Step], t0: float, t_end: float, top: int) -> list[dict]:
    """The longest stretches in which some core was idle while some step waited."""
    d_idle: dict[float, int] = defaultdict(int)
    d_wait: dict[float, int] = defaultdict(int)
    for nd in nodes.values():
        d_idle[nd.joined] += len(nd.cores)
        if nd.lost is not None:
            d_idle[nd.lost] -= len(nd.cores)
    for s in steps.values():
        for a in s.attempts:
            end = a.end if a.end is not None else t_end
            for p in a.placement:
                nd = nodes.get(p.get("node"))
                if nd is None or (nd.lost is not None and a.start >= nd.lost):
                    continue
                c = len(p.get("cores") or ())
                if nd.lost is not None and end > nd.lost:
                    end = nd.lost  # cores of a lost node do not come back when its steps end
                d_idle[a.start] -= c
                d_idle[end] += c
        for a, b, _, _ in s.segments:  # touching segments cancel at their shared instant
            d_wait[a] += 1
            d_wait[b] -= 1
    times = sorted(set(d_idle) | set(d_wait))
    out: list[dict] = []
    idle = waiting = 0
    cur = None
    for i, t in enumerate(times):
        idle += d_idle.get(t, 0)
        waiting += d_wait.get(t, 0)
        t_next = times[i + 1] if i + 1 < len(times) else t_end
        a, b = (t if t > t0 else t0), (t_next if t_next < t_end else t_end)
        if b <= a:
            continue
        if idle > 0 and waiting > 0:
            if cur is None:
                cur = {"from": a, "to": b, "idle_core_s": 0.0, "min_idle": idle, "max_idle": idle}
            cur["to"] = b
            cur["idle_core_s"] += idle * (b - a)
            if idle < cur["min_idle"]:
                cur["min_idle"] = idle
            if idle > cur["max_idle"]:
                cur["max_idle"] = idle
        elif cur is not None:
            out.append(cur)
            cur = None
    if cur is not None:
        out.append(cur)
    out.sort(key=lambda st: (-(st["to"] - st["from"]), -st["idle_core_s"], st["from"]))
    out = sorted(out[:top], key=lambda st: st["from"])  # disjoint: in time order for bisection
    starts = [st["from"] for st in out]
    # Who waited in each stretch, and for what (most of its time there).
    per: list[dict[str, dict[str, float]]] = [{} for _ in out]
    why: list[dict[tuple[str, str], str]] = [{} for _ in out]
    if out:
        for s in steps.values():
            for x, y, cat, w in s.segments:
                k = bisect_right(starts, y) - 1
                while k >= 0 and out[k]["to"] > x:
                    ov = min(y, out[k]["to"]) - max(x, out[k]["from"])
                    if ov > 0:
                        m = per[k].setdefault(s.id, {})
                        m[cat] = m.get(cat, 0.0) + ov
                        why[k].setdefault((s.id, cat), w)
                    k -= 1
    for k, st in enumerate(out):
        a, b = st["from"], st["to"]
        who = []
        by: dict[str, int] = {}
        for sid, m in per[k].items():
            cat = max(m, key=m.get)
            by[cat] = by.get(cat, 0) + 1
            who.append({"step": sid, "waited_s": _r(sum(m.values())), "for": cat, "why": why[k][(sid, cat)]})
        who.sort(key=lambda w: (-w["waited_s"], w["step"]))
        dur = b - a
        st.update({"from": _r(a - t0), "to": _r(b - t0), "duration_s": _r(dur),
                   "idle_core_s": _r(st["idle_core_s"]),
                   "mean_idle_cores": _r(st["idle_core_s"] / dur) if dur > 0 else None,
                   "waiting": len(who), "by_category": by, "steps": who})
    out.sort(key=lambda st: (-st["duration_s"], -st["idle_core_s"], st["from"]))
    return out


# --- over time ---------------------------------------------------------------------------------

def busy_series(report: Report) -> dict[str, list[tuple[float, int]]]:
    """Busy (held) cores of each node over time: [(t relative to t0, cores)] at each change."""
    ev: dict[str, dict[float, int]] = {n: {} for n in report.nodes}
    for a in report.attempts:
        end = a.end if a.end is not None else report.t_end
        for p in a.placement:
            d = ev.get(p.get("node"))
            if d is None:
                continue
            c = len(p.get("cores") or ())
            d[a.start] = d.get(a.start, 0) + c
            d[end] = d.get(end, 0) - c
    out = {}
    for name, d in ev.items():
        cur = 0
        pts = []
        for t in sorted(d):
            if d[t] == 0 and pts:
                continue
            cur += d[t]
            pts.append((t - report.t0, cur))
        out[name] = pts
    return out


def binned(points: list[tuple[float, float]], t_from: float, t_to: float, bins: int) -> list[float]:
    """Time-average of a step function [(t, value from t on)] over `bins` equal bins."""
    if bins <= 0 or t_to <= t_from:
        return [0.0] * max(bins, 0)
    width = (t_to - t_from) / bins
    acc = [0.0] * bins
    for k, (t, v) in enumerate(points):
        t_next = points[k + 1][0] if k + 1 < len(points) else t_to
        a, b = max(t, t_from), min(t_next, t_to)
        if b <= a or v == 0:
            continue
        i = int((a - t_from) / width)
        while a < b and i < bins:
            edge = min(b, t_from + (i + 1) * width)
            acc[i] += v * (edge - a)
            a = edge
            i += 1
    return [x / width for x in acc]


def waiting_series(report: Report) -> dict[str, list[tuple[float, int]]]:
    """Steps waiting over time, for a dependency and for resources: [(t rel., count)]."""
    out = {}
    for key in ("dependency", "resources"):
        d: dict[float, int] = {}
        for s in report.steps.values():
            for a, b, cat, _ in s.segments:
                if (cat == DEPENDENCY) == (key == "dependency"):
                    d[a] = d.get(a, 0) + 1
                    d[b] = d.get(b, 0) - 1
        cur = 0
        pts = []
        for t in sorted(d):
            cur += d[t]
            pts.append((t - report.t0, cur))
        out[key] = pts
    return out


# --- text ------------------------------------------------------------------------------------------

def _s(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 3600:
        return f"{x / 3600:.2f} h"
    if x >= 100:
        return f"{x:.0f} s"
    if x >= 1:
        return f"{x:.2f} s"
    return f"{x * 1000:.1f} ms"


def _n(k: int, what: str) -> str:
    return f"{k} {what}{'' if k == 1 else 's'}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def format_text(r: Report, stretches: int = 5, problems: int = 20) -> str:
    L: list[str] = []
    state = "in progress" if r.in_progress else "finished"
    L.append(f"fleet report: {r.run_dir or 'events'} (session {r.session} of {r.sessions}, {state})")
    nsteps = len(r.steps)
    finished = sum(1 for a in r.attempts if a.work_s is not None)
    L.append(f"  wall          {_s(r.wall_s):>10}   from the first submission to the end of the last step"
             + (" (now)" if r.in_progress and any(s.outcome in (RUNNING, WAITING) for s in r.steps.values()) else ""))
    L.append(f"  work          {_s(r.work_s):>10}   sum of the steps' own work over {finished} finished attempt(s);"
             f" startup excluded")
    L.append(f"  speedup       {(f'{r.speedup:.2f} x' if r.speedup is not None else '-'):>10}   work / wall:"
             " against running the steps back to back")
    su = r.startup
    L.append(f"  startup       {_s(su['total_s']):>10}   total over {su['count']} start(s); median {_s(su['median_s'])},"
             f" p95 {_s(su['p95_s'])}, max {_s(su['max_s'])} (decision to the step's own first instruction)")
    path = r.floor_path
    shown = " -> ".join(path if len(path) <= 6 else path[:3] + ["..."] + path[-2:])
    L.append(f"  floor         {_s(r.floor_s):>10}   longest dependency chain of the steps' own work"
             + (f" ({_n(len(path), 'step')}: {shown})" if path else ""))
    if r.floor_s > 0:
        L.append(f"                {'':>10}   the run took {_s(r.wall_s - r.floor_s)} more ({r.wall_s / r.floor_s:.2f} x the floor);"
                 f" with startup the chain is {_s(r.floor_with_startup_s)}")
    if r.capacity_floor_s > 0:
        L.append(f"  capacity      {_s(r.capacity_floor_s):>10}   the work's core-seconds spread over every core"
                 f" (wall is {r.wall_s / r.capacity_floor_s:.2f} x this)")
    if r.fleet_up_s is not None:
        L.append(f"  fleet start   {_s(r.fleet_up_s):>10}   fleet_starting to fleet_up (not in wall)")
    u = r.utilization["overall"]
    parts = [f"cores {_pct(u['cores_held'])} held, {_pct(u['cores_working'])} doing the steps' own work"]
    if u["gpus_held"] is not None:
        parts.append(f"GPUs {_pct(u['gpus_held'])} held")
    if u["memory_held"] is not None:
        parts.append(f"memory {_pct(u['memory_held'])} held")
    L.append("  utilization   " + "; ".join(parts))
    names = list(r.utilization["nodes"])
    for name in names[:20]:
        nu = r.utilization["nodes"][name]
        nd = r.nodes[name]
        extra = f", GPUs {_pct(nu['gpus_held'])}" if nu["gpus"] else ""
        lost = f"  LOST at {_s(nd.lost - r.t0)}: {nd.lost_reason}" if nd.lost is not None else ""
        L.append(f"    {name:<14} {nu['cores']:>4} cores: {_pct(nu['cores_held']):>4} held, {_pct(nu['cores_working']):>4} working"
                 f"{extra}, memory {_pct(nu['memory_held'])}{lost}")
    if len(names) > 20:
        L.append(f"    ... and {len(names) - 20} more node(s) (--json has them all)")
    L.append(f"  steps         {nsteps}: " + (", ".join(f"{v} {k}" for k, v in sorted(r.counts.items())) or "none"))
    if r.problems:
        L.append(f"  problems      {len(r.problems)}")
        for p in r.problems[:problems]:
            where = f" on {p['node']}" if p.get("node") else ""
            att = f" (attempt {p['attempt']}, retried)" if p.get("retried") else ""
            L.append(f"    {p['outcome']:<10} {p['step']}{where}{att}: {p['reason'] or '-'}")
        if len(r.problems) > problems:
            L.append(f"    ... and {len(r.problems) - problems} more (--json has them all)")
    if r.waits:
        L.append("  waiting       step-seconds by what steps waited for: "
                 + ", ".join(f"{CATEGORY_TEXT.get(k, k)} {_s(v['step_s'])} ({_n(v['steps'], 'step')})"
                             for k, v in sorted(r.waits.items(), key=lambda kv: -kv[1]["step_s"])))
    if r.stretches:
        L.append("  idle while steps waited (longest stretches)")
        for st in r.stretches[:stretches]:
            cats = ", ".join(f"{CATEGORY_TEXT.get(k, k)} {v}" for k, v in sorted(st["by_category"].items(), key=lambda kv: -kv[1]))
            L.append(f"    {_s(st['from'])} - {_s(st['to'])} ({_s(st['duration_s'])}): {st['mean_idle_cores']:.1f} core(s) idle"
                     f" on average ({st['min_idle']}-{st['max_idle']}); {st['waiting']} step(s) waiting for: {cats}")
            for w in st["steps"][:5]:
                L.append(f"      {w['step']}: {CATEGORY_TEXT.get(w['for'], w['for'])} ({w['why']}), {_s(w['waited_s'])}")
            if st["waiting"] > 5:
                L.append(f"      ... and {st['waiting'] - 5} more")
    for note in r.notes:
        L.append(f"  note: {note}")
    return "\n".join(L)


# --- the command ---------------------------------------------------------------------------------

def command(run_dir: str, as_json: bool = False, trace: str | None = None, html_file: str | None = None,
            session: int = -1, now: float | None = None) -> tuple[int, str, list[str]]:
    """What `fleet report` does: (exit status, stdout text, messages for stderr)."""
    import time

    import gc

    path = events_path(Path(run_dir))
    if not path.exists():
        return 2, "", [f"no event stream at {path}"]
    # Hundreds of thousands of small dicts and no cycles among them: the cyclic
    # collector would rescan them again and again for nothing (it doubles the time).
    was = gc.isenabled()
    gc.disable()
    try:
        records = load(Path(run_dir))
        try:
            rep = build(records, now=time.time() if now is None else now, session=session, run_dir=str(run_dir))
        except ValueError as e:
            return 2, "", [str(e)]
        return _emit(rep, as_json, trace, html_file)
    finally:
        if was:
            gc.enable()


def _emit(rep: Report, as_json: bool, trace: str | None, html_file: str | None) -> tuple[int, str, list[str]]:
    import json

    msgs = []
    if trace:
        from fleet.report.trace import write_trace
        n = write_trace(rep, Path(trace))
        msgs.append(f"trace: {trace} ({n} events; open in https://ui.perfetto.dev or chrome://tracing)")
    if html_file:
        from fleet.report.html import write_html
        write_html(rep, Path(html_file))
        msgs.append(f"html: {html_file}")
    if as_json:
        out = json.dumps(rep.to_json(), separators=(",", ":"))
    else:
        out = format_text(rep)
    return 0, out, msgs
