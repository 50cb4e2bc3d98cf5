"""Idle while steps waited: the longest stretches of time in which some core of a live
node was free and some step waited (for anything), and who waited in each, for what."""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict

from fleet.report.model import Node, Step, r6


def stretches(nodes: dict[str, Node], steps: dict[str, Step], t0: float, t_end: float, top: int) -> list[dict]:
    """The `top` longest stretches, longest first (times relative to t0; "by_category"
    and each waiting step's "for" are fleet.core.waits causes)."""
    d_idle, d_wait = _idle_changes(nodes, steps, t_end), _waiting_changes(steps)
    found = _sweep(d_idle, d_wait, t0, t_end)
    found.sort(key=lambda st: (-(st["to"] - st["from"]), -st["idle_core_s"], st["from"]))
    out = sorted(found[:top], key=lambda st: st["from"])  # disjoint: in time order for bisection
    per, why = _who_waited(out, steps)
    for k, st in enumerate(out):
        a, b = st["from"], st["to"]
        who = []
        by: dict[str, int] = {}
        for sid, m in per[k].items():
            cat = max(m, key=m.get)
            by[cat] = by.get(cat, 0) + 1
            who.append({"step": sid, "waited_s": r6(sum(m.values())), "for": cat, "why": why[k][(sid, cat)]})
        who.sort(key=lambda w: (-w["waited_s"], w["step"]))
        dur = b - a
        st.update({"from": r6(a - t0), "to": r6(b - t0), "duration_s": r6(dur),
                   "idle_core_s": r6(st["idle_core_s"]),
                   "mean_idle_cores": r6(st["idle_core_s"] / dur) if dur > 0 else None,
                   "waiting": len(who), "by_category": by, "steps": who})
    out.sort(key=lambda st: (-st["duration_s"], -st["idle_core_s"], st["from"]))
    return out


def _idle_changes(nodes: dict[str, Node], steps: dict[str, Step], t_end: float) -> dict[float, int]:
    """The change of the idle cores of live nodes at each instant."""
    d_idle: dict[float, int] = defaultdict(int)
    for nd in nodes.values():
        d_idle[nd.joined] += len(nd.cores)
        if nd.until is not None:  # lost, or its fleet ended (another fleet of the session goes on)
            d_idle[nd.until] -= len(nd.cores)
    for s in steps.values():
        for a in s.attempts:
            end = a.end if a.end is not None else t_end
            for p in a.placement:
                nd = nodes.get(p.node)
                if nd is None or (nd.until is not None and a.start >= nd.until):
                    continue
                c = len(p.cores)
                if nd.until is not None and end > nd.until:
                    end = nd.until  # cores of a lost node do not come back when its steps end
                d_idle[a.start] -= c
                d_idle[end] += c
    return d_idle


def _waiting_changes(steps: dict[str, Step]) -> dict[float, int]:
    """The change of the number of waiting steps at each instant."""
    d_wait: dict[float, int] = defaultdict(int)
    for s in steps.values():
        for a, b, _, _ in s.segments:  # touching segments cancel at their shared instant
            d_wait[a] += 1
            d_wait[b] -= 1
    return d_wait


def _sweep(d_idle: dict[float, int], d_wait: dict[float, int], t0: float, t_end: float) -> list[dict]:
    """Every maximal stretch with idle cores and waiting steps, in the wall window."""
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
    return out


def _who_waited(out: list[dict], steps: dict[str, Step]):
    """For each stretch (in time order): each step's waiting time in it by cause, and
    the reason it first gave for each cause."""
    starts = [st["from"] for st in out]
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
    return per, why
