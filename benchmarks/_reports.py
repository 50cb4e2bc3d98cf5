"""Figures from the simulated agents' reports: percentiles, latencies, start rates
(shared by control_scale.py and million_submit.py through _simagents)."""

from __future__ import annotations

import json
from pathlib import Path


def pct(xs: list[float], q: float) -> float:
    """The q-th percentile (0-100), linear between closest ranks (nan for none)."""
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def ms(xs_s: list[float]) -> dict:
    """p50/p99/max of latencies given in seconds, in ms."""
    if not xs_s:
        return {"n": 0}
    return {"n": len(xs_s), "p50_ms": round(pct(xs_s, 50) * 1e3, 3), "p99_ms": round(pct(xs_s, 99) * 1e3, 3),
            "max_ms": round(max(xs_s) * 1e3, 3)}


def merge_reports(outs: list[Path]) -> dict:
    """The load generators' reports together (Launch receipt times kept for summarize)."""
    parts = [json.loads(p.read_text()) for p in outs if p.exists()]
    lat: list[float] = []
    received: list[float] = []
    for a in parts:
        lat += a["latency_s"]
        received += a["received"]
    keys = ("launches", "duplicate_launches", "kills", "send_again", "welcomed", "heartbeats_in", "cpu_s")
    out = {k: round(sum(a[k] for a in parts), 3) for k in keys}
    out.update({"processes": len(parts), "missing_reports": len(outs) - len(parts),
                "stopped": sorted({a["stopped"] for a in parts}),
                "rejects": sum(len(a["rejects"]) for a in parts), "errors": [e for a in parts for e in a["errors"]][:5],
                "t_connect": min((a["t_connect"] for a in parts), default=None),
                "t_joins_sent": max((a["t_joins_sent"] for a in parts), default=None),
                "t_last_welcome": max((a["t_last_welcome"] or 0 for a in parts), default=None),
                "decision_to_agent": ms(lat), "received": sorted(received),
                "held": sum(a.get("held", 0) for a in parts),  # launches queued behind a running step (a window)
                "held_behind_held": sum(a.get("held_behind_held", 0) for a in parts),  # ... behind a queued one (a chain)
                "dropped": sum(a.get("dropped", 0) for a in parts)})  # held launches dropped unstarted (Kill)
    return out


def start_rates(received: list[float], t0: float, t1: float) -> dict:
    """Step starts per second (Launches received): over the whole suite (Submit sent ->
    last Launch), inside the Submit's handling (the first burst: every step that fits
    starts before the reply), and after it (starts driven by exits)."""
    if not received:
        return {}
    last = received[-1]
    burst = sum(1 for t in received if t <= t1)
    after = len(received) - burst
    return {"starts_per_s": round(len(received) / max(1e-6, last - t0), 1),
            "starts_in_submission": burst, "starts_per_s_in_submission": round(burst / max(1e-6, t1 - t0), 1),
            "starts_after_submission": after,
            "starts_per_s_after_submission": round(after / (last - t1), 1) if after and last > t1 else None,
            "last_start_after_submit_s": round(last - t0, 3)}
