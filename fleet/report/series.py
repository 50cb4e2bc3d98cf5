"""The report over time: busy cores per node and steps waiting, as step functions, and
their averages over equal bins (for the trace's counters and the HTML's chart)."""

from __future__ import annotations

from fleet.core import waits as W
from fleet.report.model import Report


def busy_series(report: Report) -> dict[str, list[tuple[float, int]]]:
    """Busy (held) cores of each node over time: [(t relative to t0, cores)] at each change."""
    ev: dict[str, dict[float, int]] = {n: {} for n in report.nodes}
    for a in report.attempts:
        end = a.end if a.end is not None else report.t_end
        for p in a.placement:
            d = ev.get(p.node)
            if d is None:
                continue
            c = len(p.cores)
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


def waiting_series(report: Report) -> dict[str, list[tuple[float, int]]]:
    """Steps waiting over time, for a dependency and for resources: [(t rel., count)]."""
    out = {}
    for key in ("dependency", "resources"):
        d: dict[float, int] = {}
        for s in report.steps.values():
            for a, b, cat, _ in s.segments:
                if (cat == W.DEPENDENCY) == (key == "dependency"):
                    d[a] = d.get(a, 0) + 1
                    d[b] = d.get(b, 0) - 1
        cur = 0
        pts = []
        for t in sorted(d):
            cur += d[t]
            pts.append((t - report.t0, cur))
        out[key] = pts
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
