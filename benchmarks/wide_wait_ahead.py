"""Reservations planned ahead (fleet.core.lookahead, `--reserve-ahead N`) on the
Aurora-sized what-if and the starving stream: `python benchmarks/wide_wait.py --ahead`.

Runs, one at a time, `fleet.core.simulate.simulate` on aurora_whatif's allocation and
seeded 100,000-step workload: setup order without reservations (the issue's base), then
setup order, critical-then-smallest and defer-widest with reservations, each without
and with AHEAD plans ahead. Wait = an MPI step's start minus the end of its last
dependency. Then the starving stream of reservations_whatif (50,000 narrow steps, 10
wide, 32 nodes) with reservations, without and with plans ahead.
Writes benchmarks/results/wide_wait_ahead.json and its README subsection (after the
defer-widest one, whose results it leaves as they are).
"""

from __future__ import annotations

import datetime as _dt
import gc
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from aurora_whatif import aurora_nodes, cpu_name, workload  # noqa: E402
from readme_section import write_section  # noqa: E402
from reservations_whatif import mpi_waits  # noqa: E402

from fleet.core.graph import build_graph
from fleet.core.reservations import RESERVE_AFTER_S
from fleet.core.simulate import simulate

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "wide_wait_ahead.json"
ORDER = ("setup/without", "setup/with", "critical-then-smallest/with", "defer-widest/with")
HEADING = "## Reservations planned ahead on the Aurora-sized what-if: --reserve-ahead (2026-12-01)"
AFTER = "## The widest steps held back on the Aurora-sized what-if"
AHEAD = 16
RUNS = (("setup", RESERVE_AFTER_S, 0), ("setup", RESERVE_AFTER_S, AHEAD),
        ("critical-then-smallest", RESERVE_AFTER_S, AHEAD), ("defer-widest", RESERVE_AFTER_S, AHEAD))
# Taken from the recorded results of `python benchmarks/wide_wait.py` (the same deterministic
# simulations, with no plan ahead the scheduler is unchanged): the base and the orders' rows.
RECORDED = HERE / "results" / "wide_wait_defer.json"
FROM_RECORDED = (("setup/without", "setup/without/0"),
                 ("critical-then-smallest/with", "critical-then-smallest/with/0"),
                 ("defer-widest/with", "defer-widest/with/0"))
NOTES = (
    "Variants tried by hand the same day, in this order (critical-then-smallest with reservations unless said; "
    "wide p90 wait / makespan, s; the same simulate call, one variant of fleet.core.lookahead at a time):",
    "- Plans keyed by the step's class of demand (the first version): 1 ahead 1549 / 16569, 4: 1462 / 16517 "
    "(p50 79), 16: 1277 / 17589 (p50 99); defer-widest, 4: 1007 / 16495. A class's plan passed from step to "
    "step of the same demand (31 demands among the 908 wide steps), so one plan per demand stood for good.",
    "- Keyed by the step until it is ready, shadow max(expected ready, the walk's): 8 ahead 1467 / 16559, "
    "64: 1498 / 16495 (p50 2.9); defer-widest 64: 1169 / 16495.",
    "- The same, a ready planned step moved to the front of its class (its plan displacing the class's): "
    "64 ahead 1915 / 18580; setup order 1736 / 18106; defer-widest 2555 / 17693. Worse everywhere.",
    "- Only plans that let the step start on time (the walk's shadow at most its expected ready time): "
    "8 ahead 1474 / 16547, 64: 1412 / 16513 (p50 0); defer-widest 64: 1128 / 16513; with the steps "
    "defer-widest holds never planned, defer-widest 16: 890 / 16513.",
    "- And no plan while a class of ready wide steps is blocked (kept; the table): the plans had been taking "
    "the cores that ready wide steps were waiting for.",
    "- Why it stays far from 5x: the wide steps' dependencies are one-core steps of about a minute, so a plan "
    "is made a median 18 s (p90 380 s) before the step is ready, and in the bursts that set the p90 the walk "
    "finds the cores busy with other wide steps for far longer: those steps wait, planned or not. Planning "
    "decides which wide step the next free cores go to; the p90 needs some wide steps to wait much longer so "
    "the rest wait little (the integer program's left-out set; defer-widest's hold), which planned starts "
    "for steps about to be ready do not choose.",
)


def main() -> int:
    load = os.getloadavg()
    steps = workload(100_000)
    graph, problems = build_graph(steps)
    assert not problems, problems[:3]
    nodes = aurora_nodes()
    recorded = json.loads(RECORDED.read_text())
    rows = {new: {**recorded["runs"][old], "recorded": recorded["commit"]} for old, new in FROM_RECORDED}
    for order, ra, ahead in RUNS:
        gc.collect()
        t = time.perf_counter()
        r = simulate(steps, graph, nodes, reserve_after=ra, order=order, reserve_ahead=ahead)
        key = f"{order}/{'with' if ra else 'without'}/{ahead}"
        rows[key] = {"makespan_s": round(r.makespan_s, 1), "mpi_wait": mpi_waits(r, steps, graph),
                     "simulate_s": round(time.perf_counter() - t, 1)}
        print(key, rows[key], file=sys.stderr, flush=True)
        del r
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    res = {"benchmark": "wide_wait_ahead", "command": "python benchmarks/wide_wait.py --ahead", "commit": commit,
           "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "machine": {"cpus": os.cpu_count(), "cpu": cpu_name(), "python": platform.python_version()},
           "ahead": AHEAD, "runs": rows, "stream": stream_check(),
           "load_average": {"start": [round(x, 2) for x in load], "end": [round(x, 2) for x in os.getloadavg()]}}
    RESULTS.write_text(json.dumps(res, indent=1) + "\n")
    text = section(res)
    print(text)
    write(text)
    return 0


def stream_check() -> dict:
    """The starving stream as reservations_whatif records it (50,000 narrow, 10 wide, 32 nodes)."""
    from reservations_whatif import WINDOW, stream_workload
    steps = stream_workload(50_000, 10)
    graph, _ = build_graph(steps)
    out = {}
    for ahead in (0, AHEAD):
        r = simulate(steps, graph, aurora_nodes(32), reserve_after=RESERVE_AFTER_S, window=WINDOW,
                     reserve_ahead=ahead)
        out[str(ahead)] = {"makespan_s": round(r.makespan_s, 1), "mpi_wait": mpi_waits(r, steps, graph)}
        print("stream", ahead, out[str(ahead)], file=sys.stderr, flush=True)
    return out


def section(res: dict) -> str:
    rows = res["runs"]
    base = rows["setup/without/0"]
    L = [HEADING, "", f"{res['date']}, commit {res['commit']}, on {res['machine']['cpus']} cores, load average "
         f"{res['load_average']['start'][0]} at the start, {res['load_average']['end'][0]} at the end:", "",
         f"    {res['command']}", "", "Results: `benchmarks/results/wide_wait_ahead.json`. The 100,000-step "
         "workload; wait as above; `ahead`: `--reserve-ahead` (fleet.core.lookahead). The rows with ahead 0, "
         "but for setup order with reservations, are the recorded ones of `python benchmarks/wide_wait.py` "
         "(wide_wait_defer.json, the same deterministic simulations). Target: p90 cut 5x (405 s) within 2 % "
         "of the base's makespan.", "",
         "| order | reservations | ahead | makespan (s) | vs base | wait p50 (s) | p90 (s) | max (s) | p90 cut |",
         "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for key, r in sorted(rows.items(), key=lambda kv: ORDER.index(kv[0].rsplit("/", 1)[0])):
        order, name, ahead = key.split("/")
        w = r["mpi_wait"]
        L.append(f"| {order} | {name} | {ahead} | {r['makespan_s']:.0f} | "
                 f"{100 * (r['makespan_s'] / base['makespan_s'] - 1):+.1f} % | {w['p50_s']:.0f} | {w['p90_s']:.0f} | "
                 f"{w['max_s']:.0f} | {base['mpi_wait']['p90_s'] / w['p90_s']:.2f}x |")
    st = res["stream"]
    off, on = st["0"], st[str(res["ahead"])]
    L += ["", f"The starving stream (reservations_whatif, 50,000 narrow steps, 10 wide, 32 nodes, reservations on): "
          f"wide p50/p90/max {off['mpi_wait']['p50_s']:.0f}/{off['mpi_wait']['p90_s']:.0f}/"
          f"{off['mpi_wait']['max_s']:.0f} s at makespan {off['makespan_s']:.0f} s without plans ahead, "
          f"{on['mpi_wait']['p50_s']:.0f}/{on['mpi_wait']['p90_s']:.0f}/{on['mpi_wait']['max_s']:.0f} s at "
          f"{on['makespan_s']:.0f} s with {res['ahead']}.", "",
          "So not the default (`--reserve-ahead` is opt-in): on the Aurora what-if it changes the p90 by 1-2 % "
          "either way and the makespan by at most 0.5 %; on the stream it costs 5 % of makespan (cores held "
          "for the wide steps, borrowed only by steps that end in time). Nowhere near the 5x target.", ""]
    L += list(NOTES)
    return "\n".join(L) + "\n"


def write(text: str) -> None:
    """Replace this subsection, or put it after the defer-widest one."""
    write_section(HEADING, text, HERE / "README.md", after=AFTER)


if __name__ == "__main__":
    sys.exit(main())
