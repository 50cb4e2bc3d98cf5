"""A Chrome trace-event JSON of a run (opens in Perfetto and chrome://tracing).

One process per node (pid) and one thread per core slot (tid = the core id), so each
core is a track. Each attempt of a step is one complete slice ("X") on the track of the
lowest core it held on each node it used, with its startup and its own work as two
nested slices inside it. Counters ("C") give the busy cores of each node and of the
whole fleet, and the steps waiting. Times are microseconds from the first submission.

Format: https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
"""

from __future__ import annotations

import json
from pathlib import Path

from fleet.core import states as S
from fleet.core import waits as W
from fleet.report.model import Report
from fleet.report.series import busy_series

FLEET_PID = 0      # the fleet-wide counters
NO_CORE_TID = 999999  # a slot that held no core (an MPI launcher may hold none)


def _us(x: float) -> int:
    return int(round(x * 1e6))


def build_trace(r: Report) -> dict:
    """The trace of a report, as a JSON-ready object."""
    ev: list[dict] = []
    pids = {name: i + 1 for i, name in enumerate(r.nodes)}
    ev += _process_events(r, pids)
    ev += _slices(r, pids)
    ev += _busy_counters(r, pids)
    ev += _waiting_counters(r)
    return {"traceEvents": ev, "displayTimeUnit": "ms",
            "otherData": {"run_dir": r.run_dir, "session": r.session, "t0": r.t0, "in_progress": r.in_progress}}


def _process_events(r: Report, pids: dict) -> list[dict]:
    """Names and order of the processes (the fleet, each node) and of each core's track."""
    ev = [{"ph": "M", "name": "process_name", "pid": FLEET_PID, "tid": 0, "ts": 0, "args": {"name": "fleet"}},
          {"ph": "M", "name": "process_sort_index", "pid": FLEET_PID, "tid": 0, "ts": 0, "args": {"sort_index": 0}}]
    for name, nd in r.nodes.items():
        pid = pids[name]
        ev.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 0,
                   "args": {"name": f"{name} ({len(nd.cores)} cores" + (f", {len(nd.gpus)} GPUs" if nd.gpus else "") + ")"}})
        ev.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "ts": 0, "args": {"sort_index": pid}})
        for k, c in enumerate(nd.cores):
            ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": c, "ts": 0, "args": {"name": f"core {c}"}})
            ev.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": c, "ts": 0, "args": {"sort_index": k}})
        if nd.lost is not None:
            ev.append({"ph": "i", "name": f"{name} lost: {nd.lost_reason}", "pid": pid, "tid": nd.cores[0] if nd.cores else 0,
                       "ts": _us(nd.lost - r.t0), "s": "p"})
    return ev


def _slices(r: Report, pids: dict) -> list[dict]:
    """A slice per attempt on each node it used, with its startup and work inside;
    a node that never joined this session gets a process of its own (added to pids)."""
    ev: list[dict] = []

    def pid_of(node: str | None) -> int:
        if node not in pids:
            pids[node] = len(pids) + 1
            ev.append({"ph": "M", "name": "process_name", "pid": pids[node], "tid": 0, "ts": 0,
                       "args": {"name": f"{node} (not joined in this session)"}})
        return pids[node]

    for s in r.steps.values():
        for a in s.attempts:
            end = a.end if a.end is not None else r.t_end
            t0, t1 = _us(a.start - r.t0), _us(end - r.t0)
            dur = max(0, t1 - t0)
            name = s.id if len(s.attempts) == 1 else f"{s.id} #{a.attempt}"
            args = {"step": s.id, "attempt": a.attempt, "outcome": a.outcome, "cores": a.cores, "gpus": a.gpus,
                    "memory": a.memory, "startup_s": a.startup_s, "work_s": a.work_s}
            if a.reason:
                args["reason"] = a.reason
            if a.outcome == S.RUNNING:
                name += " (running)"
            for p in a.placement:
                pid = pid_of(p.node)
                tid = min(p.cores) if p.cores else NO_CORE_TID
                ev.append({"ph": "X", "name": name, "cat": a.outcome, "pid": pid, "tid": tid, "ts": t0, "dur": dur,
                           "args": dict(args, node=p.node, core_ids=list(p.cores))})
                # Startup, then the step's own work, inside the step's slice.
                if a.startup_s is not None:
                    su_end = min(t1, t0 + _us(a.startup_s))
                    ev.append({"ph": "X", "name": "startup", "cat": "startup", "pid": pid, "tid": tid, "ts": t0,
                               "dur": max(0, su_end - t0), "args": {"step": s.id}})
                    if a.work_s is not None:
                        w_end = min(t1, su_end + _us(a.work_s))
                        ev.append({"ph": "X", "name": "work", "cat": "work", "pid": pid, "tid": tid, "ts": su_end,
                                   "dur": max(0, w_end - su_end), "args": {"step": s.id}})
                if not p.cores:
                    ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "ts": 0,
                               "args": {"name": "no core"}})
    return ev


def _busy_counters(r: Report, pids: dict) -> list[dict]:
    """Busy cores per node, and for the fleet."""
    ev = []
    total: dict[int, int] = {}
    for name, pts in busy_series(r).items():
        pid = pids[name]
        prev = 0
        for t, v in pts:
            ts = _us(t)
            ev.append({"ph": "C", "name": "busy cores", "pid": pid, "tid": 0, "ts": ts, "args": {"cores": v}})
            total[ts] = total.get(ts, 0) + (v - prev)
            prev = v
    cur = 0
    for ts in sorted(total):
        cur += total[ts]
        ev.append({"ph": "C", "name": "busy cores", "pid": FLEET_PID, "tid": 0, "ts": ts, "args": {"cores": cur}})
    return ev


def _waiting_counters(r: Report) -> list[dict]:
    """Steps waiting for a dependency and for resources."""
    waits: dict[int, list[int]] = {}
    for s in r.steps.values():
        for a, b, cat, _ in s.segments:
            k = 0 if cat == W.DEPENDENCY else 1
            for t, d in ((a, 1), (b, -1)):
                w = waits.setdefault(_us(t - r.t0), [0, 0])
                w[k] += d
    ev = []
    dep = res = 0
    for ts in sorted(waits):
        dep += waits[ts][0]
        res += waits[ts][1]
        ev.append({"ph": "C", "name": "steps waiting", "pid": FLEET_PID, "tid": 0, "ts": ts,
                   "args": {"for a dependency": dep, "for resources": res}})
    return ev


REQUIRED = ("ph", "ts", "pid", "tid", "name")
PHASES = {"X", "B", "E", "C", "M", "i", "I", "b", "e", "n", "s", "t", "f", "P", "O", "N", "D", "R"}


def validate(trace) -> list[str]:
    """What is wrong with a trace against the trace-event format: the required fields
    of every event (ph, ts, pid, tid, name; dur for "X"), their types, counters with
    numeric args, and complete slices properly nested on each track."""
    problems: list[str] = []
    if isinstance(trace, dict):
        events = trace.get("traceEvents")
        if not isinstance(events, list):
            return ["the object has no traceEvents list"]
    elif isinstance(trace, list):
        events = trace
    else:
        return ["a trace is a JSON object with traceEvents, or an array of events"]
    tracks: dict[tuple, list[tuple[float, float, str]]] = {}
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            problems.append(f"event {i} is not an object")
            continue
        missing = [k for k in REQUIRED if k not in e]
        if missing:
            problems.append(f"event {i} ({e.get('name')!r}) lacks {', '.join(missing)}")
            continue
        ph = e["ph"]
        if ph not in PHASES:
            problems.append(f"event {i}: unknown phase {ph!r}")
        if not isinstance(e["ts"], (int, float)) or isinstance(e["ts"], bool):
            problems.append(f"event {i}: ts is not a number")
        for k in ("pid", "tid"):
            if not isinstance(e[k], int) or isinstance(e[k], bool):
                problems.append(f"event {i}: {k} is not an integer")
        if not isinstance(e["name"], str):
            problems.append(f"event {i}: name is not a string")
        if ph == "X":
            d = e.get("dur")
            if not isinstance(d, (int, float)) or isinstance(d, bool) or d < 0:
                problems.append(f"event {i} ({e['name']!r}): an X event needs a duration >= 0")
            else:
                tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + d, e["name"]))
        elif ph == "C":
            args = e.get("args")
            if not isinstance(args, dict) or not args or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in args.values()):
                problems.append(f"event {i} ({e['name']!r}): a counter needs numeric args")
        elif ph == "M":
            if not isinstance(e.get("args"), dict):
                problems.append(f"event {i}: a metadata event needs args")
    return _nesting(tracks, problems)


def _nesting(tracks: dict[tuple, list[tuple[float, float, str]]], problems: list[str]) -> list[str]:
    """Add to problems every complete slice that overlaps another on its track without
    nesting in it (up to about 50 problems in all)."""
    for (pid, tid), sl in tracks.items():
        sl.sort(key=lambda x: (x[0], -x[1]))
        stack: list[tuple[float, float, str]] = []
        for a, b, name in sl:
            while stack and stack[-1][1] <= a:
                stack.pop()
            if stack and b > stack[-1][1]:
                problems.append(f"track pid {pid} tid {tid}: slice {name!r} [{a}, {b}] overlaps "
                                f"{stack[-1][2]!r} [{stack[-1][0]}, {stack[-1][1]}] without nesting in it")
                if len(problems) > 50:
                    return problems
                continue
            stack.append((a, b, name))
    return problems


def write_trace(r: Report, path: Path) -> int:
    """Write the trace of a report to path; returns its number of events."""
    tr = build_trace(r)
    Path(path).write_text(json.dumps(tr, separators=(",", ":")), encoding="utf-8")  # one write: much quicker than dump()
    return len(tr["traceEvents"])
