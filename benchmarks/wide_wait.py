"""The wide steps' p90 wait on the Aurora-sized what-if: the order "defer-widest"
(fleet.core.deferral) against the old default and the best earlier order, and a
tighter lower bound (one set of steps left out of every window).

    python benchmarks/wide_wait.py     # writes benchmarks/results/wide_wait_defer.json and its README subsection
    python benchmarks/wide_wait.py --ahead   # reservations planned ahead (fleet.core.lookahead):
                                             # results/wide_wait_ahead.json and its own subsection

Runs, one at a time, `fleet.core.simulate.simulate` on aurora_whatif's allocation and
seeded 100,000-step workload: setup order without reservations (the issue's base),
critical-then-smallest with reservations (the best before), defer-widest without and
with reservations. Wait = an MPI step's start minus the end of its last dependency.
Bounds, for the base run's ready times (wait_bound.py): the fluid bound of wide_order.py
(a different tenth left out in each window) and the one-set bound (linear program), and
how many steps the integer program lets wait at most the target (405 s) at once.
Two checks of why greedy misses it: the base run again with the non-MPI steps' memory
declarations above a core's share dropped (does memory fragmentation make the wide
steps wait?), and critical-then-smallest with the integer program's left-out steps
held offline (an extra dependency on a gate step ending at 4,000 s). And the starving
stream of reservations_whatif with 40 wide steps (so that some are deferred).
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

import numpy as np

from aurora_whatif import aurora_nodes, cpu_name, workload  # noqa: E402
from reservations_whatif import mpi_waits  # noqa: E402
from wait_bound import most_within, p_bound, p_bound_one_set  # noqa: E402
from wide_order import ready_times  # noqa: E402

from fleet.core.graph import build_graph
from fleet.core.reservations import RESERVE_AFTER_S
from fleet.core.simulate import simulate

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "wide_wait_defer.json"
HEADING = "## The widest steps held back on the Aurora-sized what-if: order defer-widest (2026-12-01)"
AFTER = "### Orders of ready steps and the wide steps' waits"
RUNS = (("setup", None), ("critical-then-smallest", RESERVE_AFTER_S), ("defer-widest", None),
        ("defer-widest", RESERVE_AFTER_S))
TARGET = 405.0  # 2023 s / 5
NOTE = ("- The hold and the work's horizon are the submission's median spanning-step estimate (1,757 s here), "
        "not constants. Variants measured the same day by hand (fleet.core.deferral patched in one process, "
        "reservations on): the old fixed rule (work up to 1,800 s, hold 2,400 s) p90 783 s at makespan 16735 s; "
        "held only while a non-deferred wide step is ready and waiting, up to the median 1224 s at 17225 s (up to "
        "2,400 s: 1203 s at 16937 s; up to the step's own estimate: 1213 s at 16974 s); held up to its own "
        "estimate unconditionally 783 s at 25285 s; up to the 75th percentile 783 s at 17677 s. Earlier (fixed "
        "rule): share 0.085 gives 717 s at 16499 s; cores x the whole estimate 1022-1118 s. The share (9 %) "
        "is still a constant, tied to the p90.")


def main() -> int:
    if "--ahead" in sys.argv[1:]:
        import wide_wait_ahead
        return wide_wait_ahead.main()
    load = os.getloadavg()
    steps = workload(100_000)
    graph, problems = build_graph(steps)
    assert not problems, problems[:3]
    nodes = aurora_nodes()
    total = sum(len(n.cores) for n in nodes)
    rows, base = {}, None
    for order, ra in RUNS:
        gc.collect()
        t = time.perf_counter()
        r = simulate(steps, graph, nodes, reserve_after=ra, order=order)
        key = f"{order}/{'with' if ra else 'without'}"
        rows[key] = {"makespan_s": round(r.makespan_s, 1), "mpi_wait": mpi_waits(r, steps, graph),
                     "simulate_s": round(time.perf_counter() - t, 1)}
        print(key, rows[key], file=sys.stderr, flush=True)
        if base is None:
            base = ready_times(r, steps, graph)
        del r
    ready, cores, dur = base
    t = time.perf_counter()
    bound = {"fluid_p90_s": p_bound(ready, cores, dur, total, 0.9),
             "one_set_p90_s": p_bound_one_set(ready, cores, dur, total, 0.9),
             "ilp_most_within_target": most_within(*[np.asarray(x, dtype=float) for x in (ready, cores, dur)], total,
                                                   TARGET, integral=True),
             "keep": int(len(ready) * 0.9) + 1, "s": 0.0}
    bound["s"] = round(time.perf_counter() - t, 1)
    res_checks = checks(steps, graph, nodes, total, base)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    res = {"benchmark": "wide_wait_defer", "command": "python benchmarks/wide_wait.py", "commit": commit,
           "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "machine": {"cpus": os.cpu_count(), "cpu": cpu_name(), "python": platform.python_version()},
           "load_average": {"start": [round(x, 2) for x in load], "end": [round(x, 2) for x in os.getloadavg()]},
           "runs": rows, "bound": bound, "checks": res_checks}
    RESULTS.write_text(json.dumps(res, indent=1) + "\n")
    text = section(res)
    print(text)
    write(text)
    return 0


def checks(steps, graph, nodes, total, base) -> dict:
    import dataclasses

    from fleet.core.suite import StepSpec
    share = {s.id for s in steps if not s.mpi and (s.memory or 0) > 10 * 2**30 * s.cores}
    light = [dataclasses.replace(s, memory=None) if s.id in share else s for s in steps]
    g2, _ = build_graph(light)
    r = simulate(light, g2, nodes, reserve_after=None)
    out = {"no_big_memory": {"steps_changed": len(share), "makespan_s": round(r.makespan_s, 1),
                             "mpi_wait": mpi_waits(r, light, g2)}}
    del r
    left: list = []
    most_within(*[np.asarray(x, dtype=float) for x in base], total, TARGET, integral=True, chosen=left)
    mpi = [s.id for s in steps if s.mpi]
    held = {mpi[i] for i in left}
    gate = StepSpec(id="gate", order=len(steps), task="gate", workdir="steps/gate", call="bench.tasks:analyse",
                    cores=1, min_cores=1, estimate=4000.0)
    gated = [dataclasses.replace(s, deps=s.deps + ("gate",)) if s.id in held else s for s in steps] + [gate]
    g3, _ = build_graph(gated)
    r = simulate(gated, g3, nodes, reserve_after=RESERVE_AFTER_S, order="critical-then-smallest")
    out["offline_hold"] = {"held": len(held), "makespan_s": round(r.makespan_s, 1),
                           "mpi_wait": mpi_waits(r, steps, graph)}  # waits from the real dependencies
    out["stream"] = stream_check()
    print(out, file=sys.stderr, flush=True)
    return out


def stream_check() -> dict:
    """The starving stream (reservations_whatif) with 40 wide steps, so that 3 are deferred."""
    from reservations_whatif import WINDOW, stream_workload
    steps = stream_workload(50_000, 40)
    graph, _ = build_graph(steps)
    out = {"narrow": 50_000, "wide": 40, "nodes": 32}
    for order in ("critical-then-smallest", "defer-widest"):
        r = simulate(steps, graph, aurora_nodes(32), reserve_after=RESERVE_AFTER_S, window=WINDOW, order=order)
        out[order] = {"makespan_s": round(r.makespan_s, 1), "mpi_wait": mpi_waits(r, steps, graph)}
    return out


def section(res: dict) -> str:
    rows, b = res["runs"], res["bound"]
    base = rows["setup/without"]
    L = [HEADING, "", f"{res['date']}, commit {res['commit']}, on {res['machine']['cpus']} cores, load average "
         f"{res['load_average']['start'][0]} at the start, {res['load_average']['end'][0]} at the end:", "",
         f"    {res['command']}", "", "Results: `benchmarks/results/wide_wait_defer.json`. The order defer-widest "
         "(fleet.core.deferral, `fleet simulate --order defer-widest`) on the 100,000-step workload; wait as above.", "",
         "| order | reservations | makespan (s) | vs base | wait p50 (s) | p90 (s) | max (s) | p90 cut |",
         "|---|---|---:|---:|---:|---:|---:|---:|"]
    for key, r in rows.items():
        order, name = key.split("/")
        w = r["mpi_wait"]
        L.append(f"| {order} | {name} | {r['makespan_s']:.0f} | {100 * (r['makespan_s'] / base['makespan_s'] - 1):+.1f} % "
                 f"| {w['p50_s']:.0f} | {w['p90_s']:.0f} | {w['max_s']:.0f} | "
                 f"{base['mpi_wait']['p90_s'] / w['p90_s']:.2f}x |")
    L += ["", f"Bounds for the base run's ready times (cores only, steps divisible): the fluid bound of wide_order.py "
          f"{b['fluid_p90_s']:.0f} s; with ONE set of steps left out of every window (linear program, "
          f"wait_bound.p_bound_one_set) {b['one_set_p90_s']:.0f} s; at a wait of {TARGET:.0f} s the integer program "
          f"keeps {b['ilp_most_within_target']:.0f} steps (p90 needs {b['keep']}): the 5x target is NOT ruled out by "
          f"them ({b['s']} s to compute)."]
    c = res["checks"]
    nb, oh, st = c["no_big_memory"], c["offline_hold"], c["stream"]
    L += ["", f"- Fragmentation is not the cause: with the {nb['steps_changed']} non-MPI steps that declare more "
          f"than 10 GiB a core (about a core's share) given their share instead, setup order without reservations gives p90 "
          f"{nb['mpi_wait']['p90_s']:.0f} s (base {base['mpi_wait']['p90_s']:.0f} s), makespan {nb['makespan_s']:.0f} s. "
          "(At its first wait, a wide step usually had enough free cores in all but not on nodes with the memory "
          "share for them; freed, those cores go to other steps.)",
          f"- Greedy starts miss the bound: holding offline (to a 4,000 s gate) the {oh['held']} steps the integer "
          f"program leaves out at {TARGET:.0f} s, critical-then-smallest with reservations gives p90 "
          f"{oh['mpi_wait']['p90_s']:.0f} s, makespan {oh['makespan_s']:.0f} s: reaching the bound needs planned "
          "start times, not an order of ready steps.",
          f"- The starving stream (reservations_whatif.stream_workload, 50,000 narrow steps, 40 wide ones of "
          f"~300 s, 32 nodes, reservations on): wide p90 {st['critical-then-smallest']['mpi_wait']['p90_s']:.0f} s "
          f"critical-then-smallest, {st['defer-widest']['mpi_wait']['p90_s']:.0f} s defer-widest (max "
          f"{st['defer-widest']['mpi_wait']['max_s']:.0f} s; with the old fixed 2,400 s hold, by hand: p90 2400 s, "
          "max 2865 s); makespans equal. Here the wide steps wait for the narrow stream, not for each other, so "
          "the hold only costs.",
          NOTE,
          "- Not done: waits count from the end of a step's dependencies, so holding a wide step's cheap "
          "predecessors back would meet any wait target without changing when it starts; that games the measure."]
    return "\n".join(L) + "\n"


def write(text: str) -> None:
    """Replace this subsection (up to the next heading), or put it after the orders one."""
    readme = HERE / "README.md"
    lines = readme.read_text().splitlines(keepends=True)
    start = next((i for i, x in enumerate(lines) if x.rstrip("\n") == HEADING), None)
    if start is None:
        after = next(i for i, x in enumerate(lines) if x.startswith(AFTER))
        start = end = next(i for i in range(after + 1, len(lines)) if lines[i].startswith("#"))
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("#")), len(lines))
    readme.write_text("".join(lines[:start]) + text + "\n" + "".join(lines[end:]))


if __name__ == "__main__":
    sys.exit(main())
