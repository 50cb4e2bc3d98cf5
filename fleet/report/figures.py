"""The report's figures over settled steps: startup statistics, the dependency floor,
utilization per node and overall, the outcome counts and the problems."""

from __future__ import annotations

import math
import os

from fleet.core import states as S
from fleet.core.graph import critical_path
from fleet.report import floor, unsure
from fleet.report.model import PROBLEM_OUTCOMES, Node, Step, r6
from fleet.wire.records import no_log


def startup(startups: list[float]) -> dict:
    """Count, total, median, p95 (nearest rank), mean and max of the startups."""
    xs = sorted(startups)
    return {
        "count": len(xs),
        "total_s": float(sum(xs)),
        "median_s": _median(xs),
        "p95_s": _nearest_rank(xs, 0.95),
        "mean_s": (sum(xs) / len(xs)) if xs else None,
        "max_s": xs[-1] if xs else None,
    }


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


def dependency_floor(steps: dict[str, Step], now: float) -> tuple[float, list[str], float]:
    """The longest chain of the steps' own work (its length and steps), and its length
    with each step's startup added, over the recorded dependencies and the steps'
    families (fleet.report.floor). A step's duration is the work of its last attempt,
    every stage of it; a running one's, the time since it started."""
    deps, d_work, d_both = floor.graph(steps, now)
    floor_s, path = critical_path(deps, d_work)
    with_startup, _ = critical_path(deps, d_both)
    return floor_s, floor.names(path), with_startup


def floor_above(wall_s: float, floor_s: float) -> bool:
    """Whether the dependency floor came out above the wall, past a millisecond (and a
    ten-thousandth) of the clocks': never so for a run, whose chains of work ran within
    its wall, so a defect of the floor (before 2026-12-07 the report said the run took
    a negative time more than it, and nothing else)."""
    return floor_s > wall_s * 1.0001 + 0.001


def floor_notes(wall_s: float, floor_s: float) -> list[str]:
    """The report's note of a floor above the wall (floor_above), if it is."""
    if not floor_above(wall_s, floor_s):
        return []
    return [f"the dependency floor ({floor_s:.3f} s) is above the wall ({wall_s:.3f} s), which no run can be: "
            "a defect of fleet's report, please report it (with the run's events.jsonl)"]


def utilization(nodes: dict[str, Node], steps: dict[str, Step], t0: float, t_end: float) -> dict:
    """Core-, GPU- and memory-seconds held by steps, and core-seconds of their own work,
    per node and overall, against what each node offered while alive in the window."""
    held = _held(nodes, steps, t0, t_end)
    over: dict[str, float] = {}  # node (or "overall") -> cores held, as counted, beyond what it offered
    tot = dict.fromkeys(("core_s", "work_core_s", "gpu_s", "memory_s", "cap_core_s", "cap_gpu_s", "cap_memory_s"), 0.0)
    out_nodes = {}
    for nd in nodes.values():
        alive = max(0.0, min(nd.until if nd.until is not None else t_end, t_end) - max(nd.joined, t0))
        cs, ws, gs, ms = held[nd.name]
        cap_c, cap_g, cap_m = len(nd.cores) * alive, len(nd.gpus) * alive, nd.memory * alive
        for k, v in (("core_s", cs), ("work_core_s", ws), ("gpu_s", gs), ("memory_s", ms),
                     ("cap_core_s", cap_c), ("cap_gpu_s", cap_g), ("cap_memory_s", cap_m)):
            tot[k] += v
        out_nodes[nd.name] = {
            "cores": len(nd.cores), "gpus": len(nd.gpus), "memory": nd.memory, "alive_s": r6(alive),
            "cores_held": _frac(cs, cap_c, over, nd.name), "cores_working": _frac(ws, cap_c),
            "gpus_held": _frac(gs, cap_g), "memory_held": _frac(ms, cap_m),
            "core_s": r6(cs), "work_core_s": r6(ws),
        }
    overall = {
        "cores_held": _frac(tot["core_s"], tot["cap_core_s"], over, "overall"),
        "cores_working": _frac(tot["work_core_s"], tot["cap_core_s"]),
        "gpus_held": _frac(tot["gpu_s"], tot["cap_gpu_s"]),
        "memory_held": _frac(tot["memory_s"], tot["cap_memory_s"]),
        "core_s": r6(tot["core_s"]), "work_core_s": r6(tot["work_core_s"]),
        "capacity_core_s": r6(tot["cap_core_s"]),
    }
    out = {"overall": overall, "nodes": out_nodes}
    if over:  # (only then: a sound stream's JSON is as it was)
        out["over_capacity"] = over
    return out


# An attempt that ended so and was followed by another is listed on its own.
_ATTEMPT_PROBLEMS = (S.FAILED, S.TERMINATED, S.LOST, S.TIMED_OUT, S.OUT_OF_MEMORY)


def _frac(num: float, den: float, over: dict | None = None, name: str = ""):
    """num / den, at most 1: steps cannot hold more than was offered. More means the
    stream misses the ends of some (damaged lines): the share counted goes in `over`
    (as the cores held, if given), and 1 is shown."""
    if den <= 0:
        return None
    f = num / den
    if f > 1.0 + 1e-9:
        if over is not None:
            over[name] = round(f, 6)
        return 1.0
    return round(f, 6)


def _held(nodes: dict[str, Node], steps: dict[str, Step], t0: float, t_end: float) -> dict[str, list[float]]:
    """Per node: [core_s, work_core_s, gpu_s, memory_s] held by attempts in the window."""
    acc = {name: [0.0, 0.0, 0.0, 0.0] for name in nodes}
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
                u = acc.get(p.node)
                if u is None:
                    continue
                c = len(p.cores)
                u[0] += c * held
                if work is not None:
                    u[1] += c * work
                if p.gpus:
                    u[2] += len(p.gpus) * held
                if p.memory:
                    u[3] += p.memory * held
    return acc


def log_of(step: str) -> str:
    """A step's log, in the run directory (fleet.wire.records.log_path): every attempt's."""
    return f"steps/{step}/log"


def counts(steps: dict[str, Step]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in steps.values():
        out[s.outcome] = out.get(s.outcome, 0) + 1
    return out


def problems(steps: dict[str, Step], t0: float, run_dir: str = "") -> list[dict]:
    """Every step that ended badly (or never ran) and every attempt that failed before
    another one (or that is to run again), in time order. `retried` only where the
    fleet retried it (its `retries`); one run again by a later submission, or by
    another fleet, says so (`again`); every attempt that may have run unheard (its node lost
    or its zygote dead before its start was heard: fleet.report.unsure). A step's `log` where an attempt ran on a node; for
    one stopped unrun (--max-attempts) only if it exists in `run_dir` (when given): the
    attempts `fleet step --record` ran wrote none (their output went to a terminal)."""
    has_log = (lambda step: os.path.exists(os.path.join(run_dir, log_of(step)))) if run_dir else (lambda step: True)
    out = []
    for s in steps.values():
        if s.unsure:  # attempts that may have run unheard: problems apart from the failures
            out += unsure.problems(s, t0, log_of(s.id))
        atts = s.attempts
        for k, a in enumerate(atts):
            if a.outcome not in _ATTEMPT_PROBLEMS or not (a.retried or k + 1 < len(atts) or s.again):
                continue
            p = dict(step=s.id, outcome=a.outcome, attempt=a.attempt, node=a.node,
                     t=r6(a.end - t0) if a.end is not None else None, reason=a.reason, retried=a.retried,
                     log=log_of(s.id))
            if not a.retried:
                later = atts[k + 1].fleet if k + 1 < len(atts) else None
                p["again"] = "run again by fleet " + later if later and later != a.fleet else "submitted again"
            out.append(p)
        if s.outcome in PROBLEM_OUTCOMES:
            a = s.last
            ran = a is not None and s.final is None  # (else decided without running: blocked, not run ...)
            out.append(dict(step=s.id, outcome=s.outcome, attempt=a.attempt if ran else None,
                            node=a.node if ran else None,
                            t=r6(s.end - t0) if s.end is not None else None, reason=s.reason, retried=False,
                            **({"log": log_of(s.id)} if ran and (a.node is not None or has_log(s.id))
                               and not no_log(s.reason) else {})))
    out.sort(key=lambda p: (p["t"] is None, p["t"] or 0.0, p["outcome"] == S.BLOCKED, p["step"]))
    return out
