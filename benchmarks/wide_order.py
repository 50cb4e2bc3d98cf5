"""The order of ready steps (fleet.core.ranks) and the wide steps' waits: does any order
of wide steps, with or without reservations, cut the Aurora what-if's p90 wait 5x with
the makespan within 2 %? And what bounds that wait at all?

    python benchmarks/wide_order.py           # writes benchmarks/results/wide_order.json
    python benchmarks/wide_order.py --quick   # 10k steps, writes nothing

Its README subsection sits at the end of reservations_whatif.py's section, which that
script rewrites whole: run this one after it.

1. The Aurora-sized what-if (benchmarks/aurora_whatif.py's allocation and seeded
   100,000-step workload) through `fleet.core.simulate.simulate`, in each order of
   fleet.core.ranks, without reservations and with the default ones. Wait = an MPI
   step's start minus the end of its last dependency; p50/p90/max.
2. For each run, a lower bound on the MPI steps' p50 and p90 wait under ANY order
   given that run's ready times (benchmarks/wait_bound.py: a fluid relaxation).
3. The starving stream of benchmarks/reservations_whatif.py in the same six ways.
4. The cost: us per decision over the whole simulate, the blocked scenario's
   (100,000 ready steps on 16 nodes, every pass timed) per order, and the ranking of a
   submission (fleet.core.ranks.upward_ranks) at 100,000 and 1,000,000 steps.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path

from aurora_whatif import CORES, GPUS, MEM, aurora_nodes, blocked_workload, cpu_name, drive, pass_costs, workload  # noqa: E402
from readme_section import write_section  # noqa: E402
from reservations_whatif import mpi_waits, stream_workload  # noqa: E402
from wait_bound import p_bound  # noqa: E402

from fleet.core.graph import build_graph
from fleet.core.ranks import MODES, upward_ranks
from fleet.core.reservations import RESERVE_AFTER_S
from fleet.core.simulate import pretend_nodes, simulate

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "wide_order.json"
SECTION = "### Orders of ready steps and the wide steps' waits (2026-11-30)"
RUNS = tuple((o, name, ra) for o in MODES for name, ra in (("without", None), ("with", RESERVE_AFTER_S)))


def ready_times(result, steps, graph):
    e = result.steps
    mp = [s for s in steps if s.mpi and s.id in e]
    return ([max([0.0] + [e[d].end_s for d in graph.deps[s.id]]) for s in mp], [e[s.id].cores for s in mp],
            [e[s.id].end_s - e[s.id].start_s for s in mp])


def runs(steps, nodes, bound: bool) -> dict:
    graph, problems = build_graph(steps)
    assert not problems, problems[:3]
    total = sum(len(x.cores) for x in nodes)
    out = {}
    for order, name, ra in RUNS:
        gc.collect()
        t = time.perf_counter()
        r = simulate(steps, graph, nodes, reserve_after=ra, order=order)
        wall = time.perf_counter() - t
        row = {"makespan_s": round(r.makespan_s, 1), "floor_s": round(r.floor_s, 1),
               "utilization": round(r.utilization, 5), "mpi_wait": mpi_waits(r, steps, graph),
               "simulate_s": round(wall, 2), "us_per_decision": round(1e6 * wall / r.decisions, 2)}
        if bound:
            ready, cores, dur = ready_times(r, steps, graph)
            row["bound_p50_s"] = round(p_bound(ready, cores, dur, total, 0.5), 1)
            row["bound_p90_s"] = round(p_bound(ready, cores, dur, total, 0.9), 1)
        out[f"{order}/{name}"] = row
        print(f"  {order}/{name}: {row}", file=sys.stderr, flush=True)
        del r
    return out


def blocked(n: int) -> dict:
    steps = blocked_workload(n)
    graph, _ = build_graph(steps)
    nodes = pretend_nodes(16, CORES, MEM, GPUS)
    out = {}
    for order in MODES:
        gc.collect()
        t = time.perf_counter()
        records, count = drive(steps, graph, nodes, order=order)
        wall = time.perf_counter() - t
        costs = pass_costs(records, n)
        out[order] = {"us_per_decision": round(1e6 * wall / count, 2),
                      **{k: costs[k] for k in ("us_per_exit_p50", "us_per_exit_p99", "us_per_decision_on_exit")}}
        print(f"  blocked {order}: {out[order]}", file=sys.stderr, flush=True)
    return out


class _Spec:
    __slots__ = ("id", "estimate")

    def __init__(self, sid, estimate):
        self.id, self.estimate = sid, estimate


def ranking(steps, graph) -> dict:
    t = time.perf_counter()
    upward_ranks(steps, graph.deps)
    out = {"steps": len(steps), "s": round(time.perf_counter() - t, 3)}
    big = [_Spec(f"c{i // 8}/s{i % 8}", float(i % 97)) for i in range(1_000_000)]  # chains of 8
    deps = {s.id: ((f"c{i // 8}/s{i % 8 - 1}",) if i % 8 else ()) for i, s in enumerate(big)}
    t = time.perf_counter()
    upward_ranks(big, deps)
    out["million_chains_s"] = round(time.perf_counter() - t, 3)
    return out


def _cut(rows: dict, base: str, row: str) -> str:
    a, b = rows[base], rows[row]
    p90 = a["mpi_wait"]["p90_s"] / b["mpi_wait"]["p90_s"] if b["mpi_wait"]["p90_s"] else float("inf")
    span = 100 * (b["makespan_s"] / a["makespan_s"] - 1)
    return f"p90 {p90:.2f}x, makespan {span:+.1f} %{' (target met)' if p90 >= 5 and abs(span) <= 2 else ''}"


def table(rows: dict, bound: bool) -> list[str]:
    head = "| order | reservations | makespan (s) | wait p50 (s) | p90 (s) | max (s) |"
    rule = "|---|---|---:|---:|---:|---:|"
    if bound:
        head += " bound p50 (s) | bound p90 (s) | us/decision |"
        rule += "---:|---:|---:|"
    L = [head, rule]
    for key, r in rows.items():
        order, name = key.split("/")
        w = r["mpi_wait"]
        line = (f"| {order} | {name} | {r['makespan_s']:.0f} | {w['p50_s']:.0f} | {w['p90_s']:.0f} | "
                f"{w['max_s']:.0f} |")
        if bound:
            line += f" {r['bound_p50_s']:.0f} | {r['bound_p90_s']:.0f} | {r['us_per_decision']} |"
        L.append(line)
    return L


def section(res: dict) -> str:
    a, st, m = res["aurora"], res["stream"], res["machine"]
    L = [SECTION, "", f"{res['date']}, on {m['cpus']} cores ({m['cpu']}), Python {m['python']}, load average "
         f"{res['load_average']['start'][0]} at the start, {res['load_average']['end'][0]} at the end "
         "(other work shared the machine: the seconds are noisy, the schedules are not):", "",
         f"    {res['command']}", "",
         "Results: `benchmarks/results/wide_order.json`. Each order of fleet.core.ranks (`fleet simulate "
         "--order`), without reservations and with the default ones; MPI steps' wait as above. "
         f"Floor (longest chain of estimates): {a['setup/without']['floor_s']:.0f} s. \"bound\": the least p50 / "
         "p90 wait ANY order could give with that run's ready times (benchmarks/wait_bound.py, a fluid "
         "relaxation: cores only, steps divisible, a different tenth of the steps left out in each window).", ""]
    L += table(a, True)
    L += ["", f"- Against the old default (setup order, no reservations): "
          + "; ".join(f"{k}: {_cut(a, 'setup/without', k)}" for k in a if k != "setup/without") + "."]
    L += ["", f"Starving stream ({st['nodes']} Aurora nodes, {st['narrow']:,} one-core steps, {st['wide']} MPI "
          "steps of 1,024 cores; reservations_whatif.py's `stream_workload`):", ""]
    L += table(st["runs"], False)
    L += ["", "- Reservations, same order: " + "; ".join(
        f"{o}: {_cut(st['runs'], o + '/without', o + '/with')}" for o in MODES) + ".",
          "- Against the old default (setup order, no reservations): " + "; ".join(
        f"{k}: {_cut(st['runs'], 'setup/without', k)}" for k in st["runs"] if k != "setup/without") + "."]
    b, rk = res["blocked"], res["ranking"]
    L.append(f"- Cost per decision, {res['steps']:,} ready steps on 16 nodes (blocked scenario, reservations on): "
             + ", ".join(f"{o} {v['us_per_decision']} us (a pass p50 {v['us_per_exit_p50']}, p99 "
                         f"{v['us_per_exit_p99']} us)" for o, v in b.items()) + ".")
    L.append(f"- Ranking a submission (upward_ranks, once per submission): {rk['s']} s for the {rk['steps']:,}-step "
             f"workload, {rk['million_chains_s']} s for 1,000,000 steps in chains of 8.")
    for note in res.get("notes", []):
        L.append(f"- {note}")
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10k steps; writes nothing")
    ap.add_argument("--note", action="append", default=[], help="a line for the README section")
    args = ap.parse_args(argv)
    n = 10_000 if args.quick else 100_000
    load = os.getloadavg()
    steps = workload(n)
    res = {"benchmark": "wide_order", "command": "python benchmarks/wide_order.py" + (" --quick" if args.quick else ""),
           "date": _dt.date.today().isoformat(),
           "machine": {"cpus": os.cpu_count(), "cpu": cpu_name(), "python": platform.python_version()},
           "steps": n, "reserve_after_s": RESERVE_AFTER_S, "aurora": runs(steps, aurora_nodes(), True),
           "stream": {"nodes": 32, "narrow": n // 2, "wide": 10,
                      "runs": runs(stream_workload(n // 2, 10), aurora_nodes(32), False)},
           "ranking": ranking(steps, build_graph(steps)[0]), "blocked": blocked(n)}
    res["load_average"] = {"start": [round(x, 2) for x in load], "end": [round(x, 2) for x in os.getloadavg()]}
    res["notes"] = args.note
    text = section(res)
    print(text)
    if not args.quick:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(res, indent=1) + "\n")
        write_section(SECTION, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
