"""One self-contained HTML page of a run: the summary, a Gantt timeline and the
utilization over time, drawn as inline SVG (no script, no network, no fonts).

The timeline has one row per node, split into one lane per core; each attempt of a step
is a bar on the lanes of the cores it held, coloured by outcome, with its startup (and
the tail after its work) drawn pale and its own work solid. Hovering a bar shows its
details (an SVG <title>). Up to EXACT_BARS bars are drawn one by one; beyond that each
lane is drawn at pixel resolution (a pixel column shows the outcome that matters most of
the bars in it: failures over successes), so the page stays small and quick at any size.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

from fleet.core import states as S
from fleet.report.model import CATEGORY_TEXT, UNFINISHED, Report
from fleet.report.series import binned, busy_series, waiting_series
from fleet.report import families
from fleet.report.figures import floor_above
from fleet.report.text import allocation_rows
from fleet.report.text import percent as _pct
from fleet.report.text import seconds as _s

COLOURS = {
    S.SUCCEEDED: "#2ca02c",
    S.FAILED: "#d62728",
    S.TERMINATED: "#ff7f0e",
    S.TIMED_OUT: "#8c564b",
    S.OUT_OF_MEMORY: "#e377c2",
    S.LOST: "#9467bd",
    S.CANCELLED: "#bcbd22",
    S.RUNNING: "#1f77b4",
    UNFINISHED: "#7f7f7f",
    # (grey too: the legend names a colour's outcomes together; before 2026-12-06 it had no interrupted)
    S.INTERRUPTED: "#7f7f7f",
}
PALE = {k: None for k in COLOURS}  # filled below: each colour mixed with white
# When bars share a pixel, the one shown: failures first (one outcome a rank: a column says which).
PRIORITY = {S.FAILED: 9, S.OUT_OF_MEMORY: 8, S.TIMED_OUT: 7, S.TERMINATED: 6, S.LOST: 5, S.CANCELLED: 4, UNFINISHED: 3,
            S.INTERRUPTED: 2, S.RUNNING: 1, S.SUCCEEDED: 0}
EXACT_BARS = 5000
PLOT_W = 1160
LEFT = 120
MAX_GANTT_H = 720
# The width of a character of the charts' 11 px sans-serif text, at most (digits are
# 6.1 px, most letters less): room for labels is made from it, there being no script
# to measure them.
CHAR_W = 7.0


def _pale(hex_colour: str, f: float = 0.55) -> str:
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return "#%02x%02x%02x" % tuple(round(c + (255 - c) * f) for c in (r, g, b))


for _k, _c in COLOURS.items():
    PALE[_k] = _pale(_c)


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def _ticks(span: float, n: int = 8) -> list[tuple[float, str]]:
    """Round tick positions (seconds) over [0, span] and their labels, in a unit that
    suits the span (ms, s, min, h)."""
    if span <= 0:
        return [(0.0, "0")]
    unit, name = next((u, nm) for limit, u, nm in ((1, 1e-3, "ms"), (600, 1, "s"), (36000, 60, "min"),
                                                   (math.inf, 3600, "h")) if span < limit)
    raw = span / unit / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    digits = max(0, -int(math.floor(math.log10(step) + 1e-9)))
    out = []
    for i in range(int(span / unit / step + 1e-9) + 1):
        v = i * step
        out.append((v * unit, "0" if i == 0 else f"{v:.{digits}f} {name}"))
    return out


def _layout(r: Report):
    """Pixel rows of each node: one per core while they fit, else cores share rows."""
    total = sum(max(1, len(n.cores)) for n in r.nodes.values()) or 1
    h = max(2.0, min(14.0, MAX_GANTT_H / total))
    squeeze = total * h > MAX_GANTT_H  # too many cores even at 2 px: cores share rows
    gap = 6 if len(r.nodes) <= 50 else 1
    rows = {}
    y = 0.0
    for name, nd in r.nodes.items():
        lanes = max(1, len(nd.cores))
        nrows = max(1, round(lanes * MAX_GANTT_H / (h * total))) if squeeze else lanes
        index = {c: i * nrows // lanes for i, c in enumerate(nd.cores)}
        rows[name] = (y, nrows, h, index)
        y += nrows * h + gap
    return rows, y


def _runs(idx: list[int]) -> list[tuple[int, int]]:
    """Contiguous runs [(first, count)] of sorted row indices."""
    out: list[tuple[int, int]] = []
    for i in sorted(set(idx)):
        if out and out[-1][0] + out[-1][1] == i:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((i, 1))
    return out


class _Scale:
    """Seconds of the run to pixels of the plot."""

    def __init__(self, r: Report):
        self.t0 = r.t0
        self.wall = r.wall_s if r.wall_s > 0 else 1.0
        self.k = PLOT_W / self.wall

    def x(self, t: float) -> float:
        return LEFT + max(0.0, min(self.wall, t - self.t0)) * self.k


def _node_label(name: str, nd) -> str:
    return f"{name} ({len(nd.cores)})"


def _pad(r: Report) -> int:
    """Room to add left of both charts for node labels longer than LEFT holds (a
    node named for its fleet: fleet.report.nodenames); the charts' x stay as they are."""
    longest = max((len(_node_label(name, nd)) for name, nd in r.nodes.items()), default=0)
    return max(0, math.ceil(longest * CHAR_W) - (LEFT - 8))


def _svg_open(svg_id: str, pad: int, width: float, height: float, extra: str = "") -> str:
    """An <svg> whose user space starts `pad` px left of 0 (room for labels at x < 0)."""
    w = pad + width
    return (f'<svg id="{svg_id}" xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" height="{height:.0f}" '
            f'viewBox="{-pad} 0 {w:.0f} {height:.0f}"{extra} font-size="11">')


def _gantt(r: Report) -> str:
    rows, height = _layout(r)
    sc = _Scale(r)
    H = height + 30
    out = [_svg_open("gantt", _pad(r), LEFT + PLOT_W + 20, H, ' shape-rendering="crispEdges"')]
    out += _node_rows(r, rows, sc)
    pieces = _pieces(r, rows)
    out += _exact_bars(r, rows, sc, pieces) if len(pieces) <= EXACT_BARS else _pixel_bars(r, rows, sc, pieces)
    for tk, label in _ticks(sc.wall):
        tx = LEFT + tk * sc.k
        out.append(f'<line x1="{tx:.1f}" y1="0" x2="{tx:.1f}" y2="{height:.0f}" stroke="#000" stroke-opacity="0.08"/>')
        out.append(f'<text x="{tx:.1f}" y="{height + 14:.0f}" text-anchor="middle">{_e(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _node_rows(r: Report, rows: dict, sc: _Scale) -> list[str]:
    """Each node's band and label, shaded from when it was lost."""
    out = []
    for name, (y0, nrows, h, _) in rows.items():
        nd = r.nodes[name]
        out.append(f'<rect x="{LEFT}" y="{y0:.1f}" width="{PLOT_W}" height="{nrows * h:.1f}" fill="#f3f3f3"/>')
        label = _node_label(name, nd)
        out.append(f'<text x="{LEFT - 6}" y="{y0 + min(nrows * h, 14) - 3:.1f}" text-anchor="end">{_e(label)}</text>')
        if nd.lost is not None:
            lx = sc.x(nd.lost)
            out.append(f'<rect x="{lx:.1f}" y="{y0:.1f}" width="{max(0.0, LEFT + PLOT_W - lx):.1f}" '
                       f'height="{nrows * h:.1f}" fill="#444" opacity="0.25"><title>{_e(name)} lost at '
                       f'{_e(_s(nd.lost - r.t0))}: {_e(nd.lost_reason)}</title></rect>')
    return out


def _pieces(r: Report, rows: dict) -> list[tuple]:
    """(node, first row, rows, attempt, step) of every run of rows an attempt held."""
    pieces = []
    for s in r.steps.values():
        for a in s.attempts:
            for p in a.placement:
                lay = rows.get(p.node)
                if lay is None:
                    continue
                idx = [lay[3].get(c, 0) for c in p.cores] or [0]
                for first, cnt in _runs(idx):
                    pieces.append((p.node, first, cnt, a, s))
    return pieces


def _exact_bars(r: Report, rows: dict, sc: _Scale, pieces: list[tuple]) -> list[str]:
    """One bar per piece: pale startup and tail, solid work, the id inside if it fits."""
    out = []
    k = sc.k
    for node, first, cnt, a, s in pieces:
        y0, _, h, _ = rows[node]
        y = y0 + first * h
        hh = cnt * h - (1.0 if h >= 4 else 0.0)
        end = a.end if a.end is not None else r.t_end
        x0, x1 = sc.x(a.start), sc.x(end)
        w = max(1.0, x1 - x0)
        oc = a.outcome if a.outcome in COLOURS else UNFINISHED
        title = (f"{s.id} (attempt {a.attempt}) {a.outcome}\nnode {node}, cores {a.cores}"
                 + (f", GPUs {a.gpus}" if a.gpus else "")
                 + f"\n{_s(a.start - r.t0)} to {_s(end - r.t0)}"
                 + f"\nstartup {_s(a.startup_s)}, work {_s(a.work_s)}"
                 + (f"\n{a.reason}" if a.reason else ""))
        out.append(f'<g><title>{_e(title)}</title>')
        if a.work_s is not None and a.startup_s is not None and w >= 3:
            out.append(f'<rect x="{x0:.1f}" y="{y:.1f}" width="{w:.1f}" height="{hh:.1f}" fill="{PALE[oc]}"/>')
            ws = x0 + a.startup_s * k
            we = min(x0 + w, ws + a.work_s * k)
            if we > ws:
                out.append(f'<rect x="{ws:.1f}" y="{y:.1f}" width="{max(1.0, we - ws):.1f}" height="{hh:.1f}" '
                           f'fill="{COLOURS[oc]}"/>')
        else:
            out.append(f'<rect x="{x0:.1f}" y="{y:.1f}" width="{w:.1f}" height="{hh:.1f}" fill="{COLOURS[oc]}"/>')
        lx = x0 + (a.startup_s or 0.0) * k  # on the solid part, where white text reads
        if x0 + w - lx >= 36 and hh >= 9:  # the id inside the bar, cut to fit
            n = int((x0 + w - lx - 4) / 6.2)
            label = s.id if len(s.id) <= n else s.id[:max(1, n - 1)] + "…"
            out.append(f'<text x="{lx + 3:.1f}" y="{y + hh - 3:.1f}" font-size="10" fill="#fff">{_e(label)}</text>')
        out.append('</g>')
    return out


def _pixel_bars(r: Report, rows: dict, sc: _Scale, pieces: list[tuple]) -> list[str]:
    """Pixel columns per row: the most important outcome of the bars in each column."""
    cols: dict[tuple[str, int], list] = {}
    for node, first, cnt, a, s in pieces:
        end = a.end if a.end is not None else r.t_end
        c0 = int(sc.x(a.start) - LEFT)
        c1 = max(c0 + 1, int(math.ceil(sc.x(end) - LEFT)))
        pr = PRIORITY[a.outcome if a.outcome in COLOURS else UNFINISHED]
        for row in range(first, first + cnt):
            line = cols.get((node, row))
            if line is None:
                line = cols[(node, row)] = [[-1] * PLOT_W, [0] * PLOT_W]
            lp, ln = line
            for c in range(max(0, c0), min(PLOT_W, c1)):
                if pr > lp[c]:
                    lp[c] = pr
            ln[max(0, min(PLOT_W - 1, c0))] += 1
    by_pr = {v: k_ for k_, v in PRIORITY.items()}
    out = []
    for (node, row), (lp, ln) in cols.items():
        y0, _, h, _ = rows[node]
        gap = 1.0 if h >= 4 else 0.0
        y = y0 + row * h
        c = 0
        while c < PLOT_W:
            if lp[c] < 0:
                c += 1
                continue
            start, pr, n = c, lp[c], 0
            while c < PLOT_W and lp[c] == pr:
                n += ln[c]
                c += 1
            oc = by_pr[pr]
            out.append(f'<rect x="{LEFT + start}" y="{y:.1f}" width="{c - start}" height="{h - gap:.1f}" '
                       f'fill="{COLOURS[oc]}"><title>{_e(node)}: {n} step(s) starting {_e(_s(start / sc.k))} to '
                       f'{_e(_s(c / sc.k))}; shown as {oc}</title></rect>')
    return out


def _held_fractions(r: Report, wall: float, bins: int) -> list[float]:
    """Per bin: the cores held by steps over the cores of the nodes live then (fleets
    that shared the run directory come and go: each counts while it was up)."""
    total: dict[float, int] = {}
    for pts in busy_series(r).values():
        prev = 0
        for t, v in pts:
            total[t] = total.get(t, 0) + v - prev
            prev = v
    live: dict[float, int] = {}
    for nd in r.nodes.values():
        live[nd.joined - r.t0] = live.get(nd.joined - r.t0, 0) + len(nd.cores)
        if nd.until is not None:
            live[nd.until - r.t0] = live.get(nd.until - r.t0, 0) - len(nd.cores)
    held = binned(_cumulative(total), 0.0, wall, bins)
    offered = binned(_cumulative(live), 0.0, wall, bins)  # (a node up before 0 counts from 0)
    return [h / o if o > 0 else 0.0 for h, o in zip(held, offered)]


def _cumulative(changes: dict[float, int]) -> list[tuple[float, int]]:
    cur, pts = 0, []
    for t in sorted(changes):
        cur += changes[t]
        pts.append((t, cur))
    return pts


def _util_chart(r: Report) -> str:
    bins = PLOT_W // 2
    wall = r.wall_s if r.wall_s > 0 else 1.0
    fracs = _held_fractions(r, wall, bins)
    H = 140
    bw = PLOT_W / bins

    def y(frac: float) -> float:
        return H - 10 - max(0.0, min(1.0, frac)) * (H - 20)

    # Steps waiting (right axis), for a dependency and for resources.
    ws = waiting_series(r)
    peak = max([v for p in ws.values() for _, v in p] + [1])
    right = 8 + math.ceil(len(str(peak)) * CHAR_W)  # room for the right axis' largest number
    out = [_svg_open("utilization", _pad(r), LEFT + PLOT_W + right, H + 20)]
    out.append(f'<rect x="{LEFT}" y="10" width="{PLOT_W}" height="{H - 20}" fill="#f7f7f7"/>')
    poly = [f"{LEFT},{y(0):.1f}"] + [f"{LEFT + (i + 0.5) * bw:.1f},{y(v):.1f}" for i, v in enumerate(fracs)] + \
        [f"{LEFT + PLOT_W},{y(0):.1f}"]
    cap = sum(len(n.cores) for n in r.nodes.values())
    out.append(f'<polygon points="{" ".join(poly)}" fill="#6baed6" fill-opacity="0.7" stroke="#2171b5">'
               f'<title>cores held by steps, % of the cores of the nodes up then ({cap} in all)</title></polygon>')
    for key, colour in (("dependency", "#9e9e9e"), ("resources", "#e6550d")):
        av = binned(ws[key], 0.0, wall, bins)
        line = " ".join(f"{LEFT + (i + 0.5) * bw:.1f},{y(v / peak):.1f}" for i, v in enumerate(av))
        out.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="1.5">'
                   f'<title>steps waiting for {"a dependency" if key == "dependency" else "resources"} '
                   f'(right axis, peak {peak})</title></polyline>')
    for frac in (0, 0.5, 1):
        out.append(f'<text x="{LEFT - 6}" y="{y(frac) + 4:.1f}" text-anchor="end">{int(frac * 100)}%</text>')
        out.append(f'<text x="{LEFT + PLOT_W + 4}" y="{y(frac) + 4:.1f}">{round(frac * peak)}</text>')
    for tk, label in _ticks(wall):
        tx = LEFT + tk * PLOT_W / wall
        out.append(f'<text x="{tx:.1f}" y="{H + 6}" text-anchor="middle">{_e(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _table(rows: list[tuple], head: tuple | None = None, wrap: tuple = ()) -> str:
    """`wrap`: the columns of ids, paths and reasons, which may be hundreds of characters
    without a space: they wrap anywhere (class w), so the table keeps to the window; the
    other columns wrap at spaces only (a step id of 200 characters made its column
    ~1,500 px wide and pushed the rest off the screen)."""
    out = ["<table>"]
    if head:
        out.append("<tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>")
    cells = ["<td>", '<td class="w">']
    for row in rows:
        out.append("<tr>" + "".join(f"{cells[i in wrap]}{_e(c)}</td>" for i, c in enumerate(row)) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def render(r: Report, max_problems: int = 500) -> str:
    """The page: summary, timeline, utilization over time and the tables."""
    legend = " ".join(f'<span class="sw" style="background:{c}"></span>{_e(" or ".join(names))}'
                      for c, names in _legend().items())
    state = "in progress" if r.in_progress else "finished"
    title = f"fleet report: {r.run_dir or 'events'}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title>",
        "<style>body{font-family:sans-serif;margin:16px;color:#222}"
        "table{border-collapse:collapse;margin:6px 0 14px}td,th{border:1px solid #ddd;padding:3px 8px;"
        "text-align:left;font-size:13px;vertical-align:top}td.w{overflow-wrap:anywhere}th{background:#f0f0f0}h1{font-size:20px}"
        "h2{font-size:16px;margin:18px 0 6px}.sw{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;"
        "vertical-align:middle}.note{color:#555;font-size:13px}</style>",
        "</head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="note">session {r.session} of {r.sessions}, {state}; times from the first submission.</p>',
        _table(_summary(r), wrap=(2,)),
        "<h2>Timeline</h2>",
        f'<p class="note">One row per node, one lane per core. Solid: the step\'s own work; pale: its startup '
        f'and its exit. Hover a bar for details.{legend}</p>',
        _gantt(r),
        "<h2>Utilization over time</h2>",
        '<p class="note">Blue: cores held by steps (% of the cores of the nodes up at the time). Lines (right axis): steps waiting for '
        'a dependency (grey) and for resources (orange).</p>',
        _util_chart(r),
    ]
    parts += _tables(r, max_problems)
    for n in r.notes:
        parts.append(f'<p class="note">note: {_e(n)}</p>')
    parts.append("</body></html>")
    return "\n".join(parts)


def _legend() -> dict[str, list[str]]:
    """Each colour of the bars, with the outcomes drawn in it."""
    out: dict[str, list[str]] = {}
    for k, c in COLOURS.items():
        out.setdefault(c, []).append(k)
    return out


def _summary(r: Report) -> list[tuple]:
    u = r.utilization["overall"]
    su = r.startup
    summary = [
        ("wall", _s(r.wall_s), "from the first submission to the end of the last step"),
        ("work", _s(r.work_s), "sum of the steps' own work; startup excluded"),
        ("speedup", f"{r.speedup:.2f} x" if r.speedup is not None else "-", "work / wall: against running the steps back to back"),
        ("startup", _s(su["total_s"]), f"{su['count']} start(s): median {_s(su['median_s'])}, p95 {_s(su['p95_s'])}, max {_s(su['max_s'])}"),
        ("floor", _s(r.floor_s), "longest dependency chain of the steps' own work: " + " -> ".join(
            r.floor_path if len(r.floor_path) <= 8 else r.floor_path[:4] + ["..."] + r.floor_path[-3:])),
        ("from the floor", _s(r.wall_s - r.floor_s), f"{r.wall_s / r.floor_s:.2f} x the floor" if r.floor_s > 0 else "")
        if not floor_above(r.wall_s, r.floor_s) else
        ("from the floor", "-", "the floor is above the wall: a defect of fleet's report, please report it"),
        ("capacity floor", _s(r.capacity_floor_s), "the work's core-seconds spread over every core"),
        ("cores", _pct(u["cores_held"]) + " held", _pct(u["cores_working"]) + " doing the steps' own work"),
    ]
    if u["gpus_held"] is not None:
        summary.append(("GPUs", _pct(u["gpus_held"]) + " held", ""))
    if u["memory_held"] is not None:
        summary.append(("memory", _pct(u["memory_held"]) + " held", ""))
    summary.append(("steps", str(len(r.steps)), ", ".join(f"{v} {k}" for k, v in sorted(r.counts.items()))))
    # The allocation's end, its drain or a close before it, as the text says them (before
    # 2026-12-06 the page left them out).
    summary += [(label, when, words.lstrip(",:; ")) for label, when, words in allocation_rows(r)]
    if r.families:
        label = "children" if any(f["children"] for f in r.families) else "stages"
        summary.append((label, str(len(r.families)), families.heading(r.families) + " (below)"))
    return summary


def _tables(r: Report, max_problems: int) -> list[str]:
    """Nodes, problems, what steps waited for, and the idle stretches."""
    nodes = [(name, nu["cores"], nu["gpus"], _pct(nu["cores_held"]), _pct(nu["cores_working"]),
              _pct(nu["gpus_held"]), _pct(nu["memory_held"]), _lost(r, r.nodes[name]))
             for name, nu in r.utilization["nodes"].items()]
    head = ("node", "cores", "GPUs", "cores held", "cores working", "GPUs held", "memory held", "lost, zygote restarts")
    if len({nd.fleet for nd in r.nodes.values()}) > 1:  # fleets that shared the run directory
        nodes = [row + (r.nodes[row[0]].fleet,) for row in nodes]
        head += ("fleet",)
    parts = ["<h2>Nodes</h2>", _table(nodes, head)]
    if r.families:  # (children indented under their parents, as in the text)
        fams = [("\u2003" * f["depth"] + f["step"], f["outcome"], families.what(f)) for f in r.families[:max_problems]]
        parts += ["<h2>Children and stages</h2>", _table(fams, ("step", "outcome", "children, stages, restarts"),
                                                           wrap=(0, 2))]
        if len(r.families) > max_problems:
            parts.append(f'<p class="note">... and {len(r.families) - max_problems} more (fleet report --json).</p>')
    problems = [(p["outcome"], p["step"], p.get("node") or "", _s(p["t"]) if p["t"] is not None else "",
                 ("(retried) " if p.get("retried") else f"({p['again']}) " if p.get("again") else
                  f"(attempt {p['attempt']}, before attempt {p['next_attempt']}) " if p.get("next_attempt") else "")
                 + (p["reason"] or ""), p.get("log") or "")
                for p in r.problems[:max_problems]]
    if problems:
        # (ids may be hundreds of characters: the cells wrap anywhere, the style says so)
        parts += ["<h2>Problems</h2>", _table(problems, ("outcome", "step", "node", "at", "reason",
                                                         "log (in the run directory)"), wrap=(1, 4, 5))]
        if len(r.problems) > max_problems:
            parts.append(f'<p class="note">... and {len(r.problems) - max_problems} more (fleet report --json).</p>')
    waits = [(CATEGORY_TEXT.get(k, k), v["steps"], _s(v["step_s"]))
             for k, v in sorted(r.waits.items(), key=lambda kv: -kv[1]["step_s"])]
    if waits:
        parts += ["<h2>What steps waited for</h2>", _table(waits, ("waiting for", "steps", "step-seconds"))]
    stretches = []
    for st in r.stretches:
        who = "; ".join(f"{w['step']}: {CATEGORY_TEXT.get(w['for'], w['for'])} ({w['why']})" for w in st["steps"][:6])
        if st["waiting"] > 6:
            who += f"; ... {st['waiting'] - 6} more"
        stretches.append((f"{_s(st['from'])} - {_s(st['to'])}", _s(st["duration_s"]),
                          f"{st['mean_idle_cores']:.1f}", st["waiting"], who))
    if stretches:
        parts += ["<h2>Idle cores while steps waited (longest stretches)</h2>",
                  _table(stretches, ("when", "for", "idle cores (mean)", "steps waiting", "waiting for"), wrap=(4,))]
    return parts


def _lost(r: Report, nd) -> str:
    """When the node was lost and why ("" if it was not), and its zygote's restarts."""
    lost = "" if nd.lost is None else f"at {_s(nd.lost - r.t0)}: {nd.lost_reason}"
    return "; ".join(w for w in (lost, nd.restarts_text) if w)


def write_html(r: Report, path: Path) -> None:
    """Write the page of a report to path."""
    Path(path).write_text(render(r), encoding="utf-8")
