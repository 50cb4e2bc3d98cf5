"""Reservations (EASY backfill) on the Aurora-sized what-if: wide MPI steps' waits and
the makespan without and with them, and the scheduler's cost per decision.

    python benchmarks/reservations_whatif.py           # writes benchmarks/results/reservations_whatif.json
    python benchmarks/reservations_whatif.py --quick   # 10k steps, writes nothing

1. The workload and allocation of benchmarks/aurora_whatif.py (10,624 pretend Aurora
   nodes, the seeded 100,000-step mix), run through `fleet.core.simulate.simulate` (the
   code behind `fleet simulate`) twice: `reserve_after=None` (greedy backfill, as
   before) and the default (reservations after 600 s; the MPI steps have priority 2,
   above the rest, so they get theirs at once). For every MPI step: its start minus the
   end of its last dependency (how long it waited once ready); p50, p90, max.
2. The cost of a decision: aurora_whatif's "blocked" scenario (16 nodes, 100,000
   independent steps all ready at once, 5 % of them 64-rank MPI steps of priority 2),
   every `Scheduler.handle` call after a step exit timed, with and without reservations.
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

from aurora_whatif import (CORES, GPUS, MEM, aurora_nodes, blocked_workload, cpu_name, pass_costs,  # noqa: E402
                           workload)
from readme_section import write_section  # noqa: E402

from fleet.core.graph import build_graph
from fleet.core.reservations import RESERVE_AFTER_S
from fleet.core.simulate import pretend_nodes, simulate

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "reservations_whatif.json"
SECTION = "## Reservations on the Aurora-sized what-if (EASY backfill)"
MODES = (("without", None), ("with", RESERVE_AFTER_S))


def _pct(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(len(xs) * q))] if xs else 0.0


def mpi_waits(result, steps, graph) -> dict:
    ends = result.steps
    w = sorted(ends[s.id].start_s - max([0.0] + [ends[d].end_s for d in graph.deps[s.id]])
               for s in steps if s.mpi and s.id in ends)
    return {"steps": len(w), "p50_s": round(_pct(w, 0.5), 1), "p90_s": round(_pct(w, 0.9), 1),
            "max_s": round(w[-1], 1) if w else 0.0}


WINDOWS = ((0, 500), (500, 1500), (1500, 2500), (2500, 3500), (3500, 4500), (4500, 6000), (6000, 10000))


def busy(result, cores: int) -> dict:
    """The share of the allocation's cores busy in each window of the schedule."""
    out = {}
    for a, b in WINDOWS:
        used = sum(max(0.0, min(b, s.end_s) - max(a, s.start_s)) * s.cores for s in result.steps.values())
        out[f"{a}-{b}"] = round(used / (cores * (b - a)), 3)
    return out


def by_kind(result, steps, cores: int) -> dict:
    """Where the cores went while the wide steps queued: the share of the allocation's
    cores busy with MPI steps and with every other step in each window. Reservations
    only keep narrow steps off what a wide one needs, so the narrow share bounds what
    they can give back to the wide steps."""
    mpi = {s.id for s in steps if s.mpi}
    out = {}
    for a, b in WINDOWS:
        use = [0.0, 0.0]
        for sid, s in result.steps.items():
            use[sid not in mpi] += max(0.0, min(b, s.end_s) - max(a, s.start_s)) * s.cores
        out[f"{a}-{b}"] = {"mpi": round(use[0] / (cores * (b - a)), 4), "other": round(use[1] / (cores * (b - a)), 4)}
    return out


class HeldMeter:
    """Core-seconds held by reservations (idle unless lent) and plans made, measured by
    wrapping Reservations.begin (called once per pass) and ._make for one run."""

    def __init__(self):
        self.core_s, self.plans, self._last = 0.0, 0, None

    def __enter__(self):
        from fleet.core.reservations import Reservations
        self._orig = begin, make = Reservations.begin, Reservations._make
        meter = self

        def wrapped(res, pool, now, classes):
            if meter._last is not None:
                meter.core_s += meter._last[1] * (now - meter._last[0])
            begin(res, pool, now, classes)
            meter._last = (now, res.held_cores)

        def counted(res, *a):
            meter.plans += 1
            return make(res, *a)
        Reservations.begin, Reservations._make = wrapped, counted
        return self

    def __exit__(self, *exc):
        from fleet.core.reservations import Reservations
        Reservations.begin, Reservations._make = self._orig


WINDOW: int | None = 0  # the node window (--window)


def aurora(n: int) -> dict:
    steps = workload(n)
    graph, problems = build_graph(steps)
    assert not problems, problems[:3]
    nodes = aurora_nodes()
    total = sum(len(x.cores) for x in nodes)
    # The work, in seconds of the whole allocation: what the wide steps queue behind.
    out = {"work_s": {"mpi": round(sum(s.cores * (s.estimate or 1.0) for s in steps if s.mpi) / total, 1),
                      "other": round(sum(s.cores * (s.estimate or 1.0) for s in steps if not s.mpi) / total, 1)}}
    for name, ra in MODES:
        gc.collect()
        t, c = time.perf_counter(), time.process_time()
        with HeldMeter() as held:
            r = simulate(steps, graph, nodes, reserve_after=ra, window=WINDOW)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        total = sum(len(x.cores) for x in nodes)
        out[name] = {"makespan_s": round(r.makespan_s, 1), "utilization": round(r.utilization, 5),
                     "mpi_wait": mpi_waits(r, steps, graph), "simulate_s": round(wall, 2),
                     "simulate_cpu_s": round(cpu, 2), "decisions": r.decisions,
                     "us_per_decision": round(1e6 * wall / r.decisions, 2),
                     "cores_busy": busy(r, total), "cores_busy_by_kind": by_kind(r, steps, total),
                     "held_share": round(held.core_s / (total * r.makespan_s), 5), "plans": held.plans}
        print(f"  aurora {n} {name}: {out[name]}", file=sys.stderr, flush=True)
        del r
    return out


def stream_workload(narrow: int, wide: int, seed: int = 7) -> list:
    """`narrow` one-core steps (priority 3, ~60 s median) all ready at once, and `wide`
    MPI steps of 128 ranks x 8 threads (priority 2, ~300 s), each after its own setup
    step, ending every 150 s: the wide ones become ready while the narrow ones keep
    every core busy (the issue's starving case, on 32 Aurora nodes)."""
    import random
    from fleet.core.suite import StepSpec
    rng = random.Random(seed)
    steps = []
    for i in range(wide):
        steps.append(StepSpec(id=f"setup{i:03d}", order=len(steps), call="b:setup", task="setup",
                              workdir=f"s/{i}", estimate=150.0 * (i + 1), priority=1))
        steps.append(StepSpec(id=f"wide{i:03d}", order=len(steps), command=("xhpcg",), task="wide",
                              workdir=f"w/{i}", cores=1024, min_cores=1024, mpi=True, span=True, ranks=128,
                              min_ranks=128, threads=8, priority=2, deps=(f"setup{i:03d}",),
                              estimate=round(min(1200.0, max(60.0, rng.lognormvariate(0, 0.5) * 300)), 1)))
    for i in range(narrow):
        steps.append(StepSpec(id=f"n{i:06d}", order=len(steps), call="b:analyse", task="n", workdir=f"n/{i}",
                              estimate=round(min(600.0, max(1.0, rng.lognormvariate(0, 1) * 60)), 1)))
    return steps


def stream(narrow: int, wide: int, nodes_n: int) -> dict:
    steps = stream_workload(narrow, wide)
    graph, problems = build_graph(steps)
    assert not problems, problems[:3]
    nodes = aurora_nodes(nodes_n)
    out = {"nodes": nodes_n, "narrow": narrow, "wide": wide}
    for name, ra in MODES:
        with HeldMeter() as held:
            r = simulate(steps, graph, nodes, reserve_after=ra, window=WINDOW)
        total = sum(len(x.cores) for x in nodes)
        out[name] = {"makespan_s": round(r.makespan_s, 1), "utilization": round(r.utilization, 5),
                     "mpi_wait": mpi_waits(r, steps, graph), "decisions": r.decisions,
                     "held_share": round(held.core_s / (total * r.makespan_s), 5), "plans": held.plans, "cores_busy": busy(r, total)}
        print(f"  stream {name}: {out[name]}", file=sys.stderr, flush=True)
    return out


def blocked(n: int) -> dict:
    import aurora_whatif
    steps = blocked_workload(n)
    graph, problems = build_graph(steps)
    assert not problems
    nodes = pretend_nodes(16, CORES, MEM, GPUS)
    out = {}
    for name, ra in MODES:
        gc.collect()
        t = time.perf_counter()
        records, count = aurora_whatif.drive(steps, graph, nodes, reserve_after=ra)
        wall = time.perf_counter() - t
        costs = pass_costs(records, n)
        out[name] = {"drive_s": round(wall, 2), "decisions": count, "us_per_decision": round(1e6 * wall / count, 2),
                     **{k: costs[k] for k in ("us_per_exit_p50", "us_per_exit_p99", "us_per_decision_on_exit")}}
        print(f"  blocked {n} {name}: {out[name]}", file=sys.stderr, flush=True)
        del records
    return out


def section(res: dict) -> str:
    a, b, m = res["aurora"], res["blocked"], res["machine"]
    wo, wi = a["without"], a["with"]
    L = [SECTION, "",
         f"{res['date']}, on {m['cpus']} cores ({m['cpu']}), Python {m['python']}, load average "
         f"{res['load_average']['start'][0]} at the start:", "",
         f"    {res['command']}", "",
         "Results: `benchmarks/results/reservations_whatif.json`. The allocation and the seeded",
         f"{res['steps']:,}-step workload of the Aurora-sized what-if above, simulated without reservations",
         "(greedy backfill, `--no-reservations`) and with them (the default; the MPI steps have",
         "priority 2, above the rest, so each gets its reservation as soon as it cannot start).",
         "Wait = an MPI step's start minus the end of its last dependency.", "",
         "| | makespan (s) | utilization | MPI steps | wait p50 (s) | p90 (s) | max (s) | simulate (s) | us/decision |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in ("without", "with"):
        r = a[name]
        w = r["mpi_wait"]
        L.append(f"| {name} reservations | {r['makespan_s']:.0f} | {100 * r['utilization']:.1f} % | {w['steps']} | "
                 f"{w['p50_s']:.0f} | {w['p90_s']:.0f} | {w['max_s']:.0f} | {r['simulate_s']} | {r['us_per_decision']} |")
    cut = wo["mpi_wait"]["p90_s"] / wi["mpi_wait"]["p90_s"] if wi["mpi_wait"]["p90_s"] else float("inf")
    span = 100 * (wi["makespan_s"] / wo["makespan_s"] - 1)
    L += ["", "Share of the cores busy (without reservations), by window of the schedule (s): "
          + ", ".join(f"{k} {100 * v:.0f} %" for k, v in wo["cores_busy"].items()) + ".",
          "", f"- Aurora what-if: p90 wait of the MPI steps cut {cut:.2f}x (target >= 5x); makespan {span:+.2f} % "
              f"(target within 2 %): {'met' if cut >= 5 and abs(span) <= 2 else 'MISSED'}."]
    st = res.get("stream")
    if st:
        so, si = st["without"], st["with"]
        scut = so["mpi_wait"]["p90_s"] / si["mpi_wait"]["p90_s"] if si["mpi_wait"]["p90_s"] else float("inf")
        sspan = 100 * (si["makespan_s"] / so["makespan_s"] - 1)
        L.append(f"- Starving stream ({st['nodes']} Aurora nodes, {st['narrow']:,} one-core steps ready at once, "
                 f"{st['wide']} MPI steps of 128 ranks x 8 threads becoming ready every 150 s; `stream_workload`): "
                 f"wide wait p50/p90/max {so['mpi_wait']['p50_s']:.0f}/{so['mpi_wait']['p90_s']:.0f}/"
                 f"{so['mpi_wait']['max_s']:.0f} s without, {si['mpi_wait']['p50_s']:.0f}/{si['mpi_wait']['p90_s']:.0f}/"
                 f"{si['mpi_wait']['max_s']:.0f} s with: p90 cut {scut:.1f}x; makespan {so['makespan_s']:.0f} -> "
                 f"{si['makespan_s']:.0f} s ({sspan:+.1f} %).")
    L += diagnosis(res)
    bo, bi = b["without"], b["with"]
    L.append(f"- Cost per decision, {res['blocked_steps']:,} ready steps on 16 nodes (aurora_whatif's \"blocked\" "
             f"scenario): {bi['us_per_decision']} us with reservations, {bo['us_per_decision']} us without "
             f"(whole drive); after step exits {bi['us_per_decision_on_exit']} vs {bo['us_per_decision_on_exit']} us, "
             f"a pass p50 {bi['us_per_exit_p50']} vs {bo['us_per_exit_p50']} us, p99 {bi['us_per_exit_p99']} vs "
             f"{bo['us_per_exit_p99']} us.")
    for note in res.get("notes", []):
        L.append(f"- {note}")
    return "\n".join(L) + "\n"


def diagnosis(res: dict) -> list[str]:
    """The measured reasons the Aurora target is out of reach of any reservation policy."""
    a, st = res["aurora"], res.get("stream")
    wo, wi = a["without"], a["with"]
    hot = [k for k, v in wo["cores_busy"].items() if v >= 0.98]
    other = max((wo["cores_busy_by_kind"][k]["other"] for k in hot), default=0.0)
    L = [f"- Why the Aurora target is out of reach: the MPI steps' work is {a['work_s']['mpi']:,.0f} s of the whole "
         f"allocation, everything else {a['work_s']['other']:,.0f} s. While the cores are >= 98 % busy "
         f"({', '.join(hot)} s), steps other than MPI ones hold at most {100 * other:.2f} % of them: the wide "
         "steps queue behind each other, not behind narrow steps, and a reservation (which only keeps other "
         "steps off what a wide one needs) can only reorder wide steps among themselves. Cores held idle by "
         f"reservations: {100 * wi['held_share']:.2f} % of cores x makespan; the makespan difference is which of "
         "the few 14,400 s MPI steps (each the head of the longest chain) the reordering starts later."]
    L.append(f"- Reservations planned on the Aurora what-if: {wi['plans']} (each walks the running steps and "
             f"tries placements on a projection of the nodes with room: the extra simulate time with them).")
    if st:
        def done(r):
            return sum(v * (b - a) for (a, b), v in zip(WINDOWS, r["cores_busy"].values()) if b <= 2500)

        def pct(r):
            return ", ".join(f"{k} {100 * v:.0f}" for k, v in r["cores_busy"].items() if v)
        L.append(f"- Starving stream: cores held idle by reservations {100 * st['with']['held_share']:.1f} % of cores "
                 f"x makespan; % of cores busy by window (s) without: {pct(st['without'])}; with: {pct(st['with'])}. "
                 f"Work done by 2,500 s, in seconds of all the cores: {done(st['without']):.0f} without, "
                 f"{done(st['with']):.0f} with; what differs after is the ragged tail (which long one-core steps "
                 "happen to start last), not the held cores.")
    return L


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10k steps; writes nothing")
    ap.add_argument("--note", action="append", default=[], help="a line for the README section")
    ap.add_argument("--window", default="0", help="steps per node handed ahead (fleet.core.window; "
                    "'cores': each node's cores, as `fleet up`); default 0")
    args = ap.parse_args(argv)
    global WINDOW
    WINDOW = None if args.window == "cores" else int(args.window)
    n = 10_000 if args.quick else 100_000
    load = os.getloadavg()
    res = {"benchmark": "reservations_whatif",
           "command": "python benchmarks/reservations_whatif.py" + (" --quick" if args.quick else "")
                      + (f" --window {args.window}" if args.window != "0" else ""),
           "date": _dt.date.today().isoformat(),
           "machine": {"cpus": os.cpu_count(), "cpu": cpu_name(), "python": platform.python_version()},
           "steps": n, "blocked_steps": n, "reserve_after_s": RESERVE_AFTER_S,
           "aurora": aurora(n), "stream": stream(n // 2, 10, 32), "blocked": blocked(n),
           "load_average": {"start": [round(x, 2) for x in load], "end": [round(x, 2) for x in os.getloadavg()]},
           "notes": args.note}
    text = section(res)
    print(text)
    if not args.quick:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(res, indent=1) + "\n")
        write_section(SECTION, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
