"""The coordinator on a busy first node, with and without a core of its own.

    python benchmarks/coordinator_core.py                  # writes results/coordinator_core.json and its README section
    python benchmarks/coordinator_core.py --steps 20000 --rounds 1 --no-write   # a quick look

The control-scale run (benchmarks/control_scale.py: simulated agents over real ZeroMQ
with CURVE, one real coordinator) in three setups, alternated round by round:

- alone: nothing else runs (control_scale.py's own figures);
- shared: a CPU-bound process pinned to every CPU, as the steps of a first node whose
  agent offers every core; the coordinator unpinned (fleet up without --coordinator-cores);
- kept: the same on every CPU but the last, and the coordinator pinned to that one (what
  `fleet up --coordinator-cores 1` does: fleet.site.owncores).

Each burner's share of its CPU is its CPU time over the run's wall time: what a step
sharing a core with the coordinator is left. On this 2-CPU machine the load generators
(the other nodes, elsewhere on a real allocation) share the CPUs too, so in `kept` they
run beside a burner on CPU 0: the starts they can answer bound the rate as well.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

import control_scale
from _nodebench import machine, write_result
from readme_section import write_section

SETUPS = ("alone", "shared", "kept")
SECTION = "## The coordinator on a busy first node: a core of its own (`--coordinator-cores`)"
CPUS = sorted(os.sched_getaffinity(0))


@contextlib.contextmanager
def burners(cpus: list[int]):
    """A CPU-bound process pinned to each of `cpus`, each its own session; yields them."""
    procs = [subprocess.Popen(["taskset", "-c", str(c), sys.executable, "-c", "while True: pass"],
                              start_new_session=True) for c in cpus]
    try:
        yield procs
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=30)


def one(work: Path, setup: str, agents: int, steps: int, duration: float) -> dict:
    """One control-scale run in `setup`."""
    busy = {"alone": [], "shared": CPUS, "kept": CPUS[:-1]}[setup]
    control_scale.PREFIX.clear()
    if setup == "kept":
        control_scale.PREFIX["coordinator"] = ["taskset", "-c", str(CPUS[-1])]
    with burners(busy) as procs:
        t0, cpu0 = time.time(), [psutil.Process(p.pid).cpu_times() for p in procs]
        r = control_scale.case(work, agents, steps, duration, idle=0.0, timeout=900.0)
        wall = time.time() - t0
        shares = [round((sum(psutil.Process(p.pid).cpu_times()[:2]) - sum(c[:2])) / wall, 3)
                  for p, c in zip(procs, cpu0)]
    run = r["run"]
    after_s = run["t_done_polled"] - run["t_submit_reply"]
    return {"setup": setup, "burner_cpu_shares": shares,
            "starts_per_s_after_submission": r.get("starts_per_s_after_submission"),
            "coordinator_cpu_us_per_step_after_submission": r.get("coordinator_cpu_us_per_step_after_submission"),
            "coordinator_core_share_after_submission":
                round((run["coordinator_cpu_s"] - run["coordinator_cpu_submit_s"]) / after_s, 3) if after_s > 0 else None,
            "wall_s": r.get("wall_s"), "submit_s": run["submit_s"],
            "report_age_s": run["coordinator_loop"].get("report_age_s"),
            "max_loop_lag_s": run["coordinator_loop"].get("max_lag_s"),
            "status_during_run": run["status_during_run"], "each_step_once": r["events"]["each_step_once"],
            "counts": run["counts"]}


def section(res: dict) -> str:
    rows = ["| setup | round | starts/s after the submission | coordinator CPU / step (us) | coordinator's share of a core "
            "| burners' shares of their CPUs | report age (s) | status p50 / p99 (ms) |", "|---|---:|---:|---:|---:|---|---:|---|"]
    for r in res["runs"]:
        st = r["status_during_run"]
        rows.append(f"| {r['setup']} | {r['round']} | {r['starts_per_s_after_submission']:,.0f} | "
                    f"{r['coordinator_cpu_us_per_step_after_submission']} | {r['coordinator_core_share_after_submission']:.2f} | "
                    f"{', '.join(f'{x:.2f}' for x in r['burner_cpu_shares']) or '-'} | {r['report_age_s']} | "
                    f"{st.get('p50_ms'):.0f} / {st.get('p99_ms'):.0f} |")
    med, m = res["medians"], res["machine"]

    def span(setup: str, of) -> str:
        xs = [x for r in res["runs"] if r["setup"] == setup for x in of(r)]
        return f"{min(xs):.2f}-{max(xs):.2f}"
    own = lambda r: [r["coordinator_core_share_after_submission"]]  # noqa: E731
    return "\n".join([
        SECTION, "",
        f"{res['date']}, commit {m['code']['commit'][:7]} (fleet/ as in 992e366), {m['cpus']} CPUs ({m['cpu']}), "
        f"load average {m['loadavg_at_start'][0]} at the start:", "",
        f"    {res['command']}", "",
        "Results: `benchmarks/results/coordinator_core.json`. The control-scale run (benchmarks/control_scale.py: "
        f"{res['agents']:,} simulated agents of 64 cores over real ZeroMQ with CURVE, one real coordinator, "
        f"{res['steps']:,} steps of {res['duration']:g} s) in three setups, alternated round by round. alone: "
        "nothing else runs. shared: a CPU-bound process (a burner) pinned to every CPU, as the steps of a first node "
        "whose agent offers every core, and the coordinator unpinned (no `--coordinator-cores`). kept: a burner on "
        "every CPU but the last, and the coordinator pinned to the last (what `--coordinator-cores 1` does, "
        "fleet.site.owncores). A burner's share is its CPU time over the run's wall time. On these 2 CPUs the load "
        "generators (the other nodes, elsewhere on a real allocation) run here too: unpinned, beside the burners.",
        "", *rows, "", *([f"Note: {res['note']}.", ""] if res.get("note") else []),
        "Medians over the rounds: " + "; ".join(
            f"{k} {v['starts_per_s']:,.0f} starts/s with the coordinator at {v['core_share']:.2f} of a core"
            for k, v in med.items()) + f". kept against shared: {res['kept_over_shared']}x the starts a second.",
        "",
        f"- Shared, the coordinator gets {span('shared', own)} of a core (it takes {span('alone', own)} alone); the "
        f"burners, which stand for the first node's steps, keep {span('shared', lambda r: r['burner_cpu_shares'])} "
        "of their CPUs (they share with the load generators too, which a real first node's steps would not).",
        f"- Kept, the coordinator uses {span('kept', own)} of its core: below what it takes alone, so here it is "
        "not what bounds the rate; the load generators, left one CPU beside a burner, are. The ratio is what "
        "this machine can show, not the whole gain.",
    ]) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--duration", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-write", action="store_true", help="print the results only")
    ap.add_argument("--readme-only", action="store_true", help="rewrite the README section from the recorded results")
    args = ap.parse_args(argv)
    if args.readme_only:
        write_section(SECTION, section(json.loads((Path(__file__).parent / "results" / "coordinator_core.json").read_text())))
        return 0
    if len(CPUS) < 2:
        ap.error("needs at least 2 CPUs (one kept for the coordinator)")
    m = machine()
    runs = []
    for rnd in range(1, args.rounds + 1):
        for setup in SETUPS:
            with tempfile.TemporaryDirectory(prefix="fleet-owncore-", dir=control_scale.default_parent()) as tmp:
                r = one(Path(tmp), setup, args.agents, args.steps, args.duration)
            r["round"] = rnd
            runs.append(r)
            print(json.dumps(r), flush=True)
    med = {s: {"starts_per_s": statistics.median(r["starts_per_s_after_submission"] for r in runs if r["setup"] == s),
               "core_share": statistics.median(r["coordinator_core_share_after_submission"] for r in runs if r["setup"] == s)}
           for s in SETUPS}
    res = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": m, "agents": args.agents,
           "steps": args.steps, "duration": args.duration, "runs": runs, "medians": med,
           "kept_over_shared": round(med["kept"]["starts_per_s"] / med["shared"]["starts_per_s"], 2),
           "command": "python benchmarks/coordinator_core.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    if args.no_write:
        print(json.dumps(res["medians"]), res["kept_over_shared"])
        return 0
    write_result("coordinator_core", res)
    write_section(SECTION, section(res))
    return 0 if all(r["each_step_once"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
