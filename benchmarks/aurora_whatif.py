"""Aurora-sized what-if: the pure scheduler on 10,624 pretend nodes and 100,000 steps.

    python benchmarks/aurora_whatif.py            # full run, writes benchmarks/results/aurora_whatif.json
    python benchmarks/aurora_whatif.py --quick    # smaller figures, for a smoke test (writes nothing)

Everything runs in one process, in this order:

1. "aurora" scenarios: 10,624 nodes of 104 cores and 6 GPUs (1135 GiB of memory, one
   node in nine 1007 GiB), with a seeded workload of 10,000 and then 100,000 steps run
   through `fleet.core.simulate.simulate` (the code behind `fleet simulate`). The 10k
   workload is the first 10k steps of the same generator, so the mix is the same.
2. "blocked" scenarios: far more ready steps than cores. 16 nodes of the same shape
   (1,664 cores) and 10,000 / 100,000 steps that are all ready at once, driven event by
   event with every `Scheduler.handle` call timed, so the cost of one pass can be
   compared while ~10k versus ~100k steps wait.

Memory: `peak_rss_mib` is resource.getrusage(RUSAGE_SELF).ru_maxrss, the whole
process's peak resident set (interpreter, generated steps, graph, scheduler and
result), read after each scenario (it only grows). `tracemalloc_peak_mib` (unless
--no-tracemalloc) is the peak of Python allocations made inside one `simulate()` call
of the 100k workload, measured in a separate, untimed re-run because tracing slows
allocation down.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import hashlib
import heapq
import json
import os
import platform
import random
import resource
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

from readme_section import write_section  # noqa: E402 (benchmarks/ is sys.path[0])

from fleet.core.graph import build_graph
from fleet.core.ranks import ordered
from fleet.core.reservations import RESERVE_AFTER_S
from fleet.core.scheduler import NodeJoined, Scheduler, Start, StepExited, Submitted
from fleet.core.simulate import pretend_nodes, simulate
from fleet.core.suite import StepSpec

GiB = 2**30
AURORA_NODES = 10_624
CORES, GPUS = 104, 6
MEM, MEM_SMALL = 1135 * GiB, 1007 * GiB
SEED = 20240611

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "aurora_whatif.json"
README = HERE / "README.md"
SECTION = "## Aurora-sized what-if (scheduler)"


# --- the allocation -------------------------------------------------------------------

def aurora_nodes(n: int = AURORA_NODES):
    """n Aurora nodes; one in nine (indices 8, 17, ...) has the smaller memory."""
    return pretend_nodes(n, CORES, MEM, GPUS, memory_of={i: MEM_SMALL for i in range(8, n, 9)})


# --- the workload -------------------------------------------------------------------------

def _estimate(rng: random.Random, median: float, lo: float, hi: float) -> float:
    """A log-normal duration around `median`, clipped, rounded to 0.1 s."""
    return round(min(hi, max(lo, rng.lognormvariate(0.0, 1.0) * median)), 1)


def workload(n: int, seed: int = SEED) -> list[StepSpec]:
    """`n` steps in setup order, deterministic in (n, seed); a prefix of a larger n.

    Groups, drawn at random:
    - chains (72 %): 2-8 one-core Python `call` steps, each depending on the one before;
      one in ten starts after an earlier MPI step.
    - ensembles (18 %): a one-core setup step, 16-128 one-core prep steps after it, one
      wide spanning MPI step (64-2048 ranks x 1-8 threads; a third of them GPU codes with
      8 threads and half a GPU per rank) after all of them (fan-in),
      then 4-16 one-core analysis steps that read its output (file dependency), and
      sometimes a GPU step after those.
    - GPU batches (10 %): 4-24 independent GPU steps (1-16 cores, 1-6 GPUs, some with
      declared memory).
    Some one-core steps declare 2 or 4 GiB; the rest take their proportional share.
    """
    rng = random.Random(seed)
    steps: list[StepSpec] = []
    mpi_ids: list[str] = []
    g = 0

    def add(**kw) -> str:
        sid = kw.pop("id")
        steps.append(StepSpec(id=sid, order=len(steps), task=sid, workdir=f"steps/{sid}", **kw))
        return sid

    def small(sid: str, deps=(), inputs=(), est: float = 60.0) -> str:
        mem = rng.choices((None, 2 * GiB, 4 * GiB), (0.8, 0.15, 0.05))[0]
        return add(id=sid, call="bench.tasks:analyse", args={"sample": sid}, cores=1, min_cores=1,
                   memory=mem, deps=tuple(deps), inputs=tuple(inputs),
                   estimate=_estimate(rng, est, 1.0, 3600.0))

    def gpu(sid: str, deps=()) -> str:
        c = rng.choice((1, 2, 4, 8, 16))
        ngpu = rng.choices((1, 2, 6), (0.6, 0.25, 0.15))[0]
        mem = rng.choice((None, None, 64 * GiB, 256 * GiB))
        return add(id=sid, call="bench.tasks:train", args={"model": sid}, cores=c, min_cores=c,
                   gpus=ngpu, memory=mem, deps=tuple(deps),
                   estimate=_estimate(rng, 600.0, 30.0, 7200.0))

    while len(steps) < n:
        g += 1
        kind = rng.choices(("chain", "ensemble", "gpu"), (0.72, 0.18, 0.10))[0]
        if kind == "chain":
            prev = [rng.choice(mpi_ids)] if mpi_ids and rng.random() < 0.1 else []
            for k in range(rng.randint(2, 8)):
                prev = [small(f"c{g}/s{k}", prev)]
        elif kind == "ensemble":
            setup = small(f"e{g}/setup", est=10.0)
            prep = [small(f"e{g}/prep{k:03d}", [setup]) for k in range(rng.randint(16, 128))]
            ranks = rng.choice((64, 128, 256, 512, 1024, 2048))
            if rng.random() < 1 / 3:  # a GPU code: 8 threads and half a GPU per rank
                threads, ngpu = 8, ranks // 2
            else:
                threads, ngpu = rng.choice((1, 1, 2, 4, 8)), 0
            sim = add(id=f"e{g}/mpi", command=("xhpcg", "--in", f"e{g}/in"), cores=ranks * threads,
                      min_cores=ranks * threads // 2, gpus=ngpu, mpi=True, span=True, ranks=ranks,
                      min_ranks=ranks // 2, threads=threads, deps=tuple(prep),
                      outputs=(f"e{g}/fields.h5",), priority=2,
                      estimate=_estimate(rng, 1800.0, 120.0, 14400.0))
            mpi_ids.append(sim)
            post = [small(f"e{g}/post{k:02d}", inputs=[f"e{g}/fields.h5"])
                    for k in range(rng.randint(4, 16))]
            if rng.random() < 0.3:
                gpu(f"e{g}/infer", post)
        else:
            for k in range(rng.randint(4, 24)):
                gpu(f"g{g}/t{k:02d}")
    return steps[:n]


def mix(steps: list[StepSpec]) -> dict:
    return {
        "steps": len(steps),
        "one_core": sum(1 for s in steps if s.cores == 1 and not s.gpus and not s.mpi),
        "gpu": sum(1 for s in steps if s.gpus and not s.mpi),
        "mpi_spanning": sum(1 for s in steps if s.mpi),
        "mpi_with_gpus": sum(1 for s in steps if s.mpi and s.gpus),
        "mpi_ranks_max": max((s.ranks for s in steps if s.mpi), default=0),
        "with_deps": sum(1 for s in steps if s.deps or s.inputs),
        "declared_memory": sum(1 for s in steps if s.memory is not None),
    }


def blocked_workload(n: int, seed: int = SEED) -> list[StepSpec]:
    """`n` independent steps, all ready at once, in a handful of demand classes."""
    rng = random.Random(seed + 1)
    steps = []
    for i in range(n):
        r = rng.random()
        kw: dict = dict(cores=1, min_cores=1)
        if r < 0.80:
            kw["memory"] = rng.choices((None, 2 * GiB), (0.9, 0.1))[0]
        elif r < 0.95:
            kw.update(cores=8, min_cores=8, gpus=1)
        else:
            kw.update(cores=64, min_cores=64, mpi=True, span=True, ranks=64, min_ranks=64,
                      priority=2)
        call = None if kw.get("mpi") else "bench.tasks:analyse"
        command = ("xhpcg",) if kw.get("mpi") else None
        steps.append(StepSpec(id=f"b{i:06d}", order=i, call=call, command=command, task="b",
                              workdir=f"steps/b{i:06d}", estimate=_estimate(rng, 60.0, 1.0, 3600.0),
                              **kw))
    return steps


# --- measuring ------------------------------------------------------------------------------

def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def schedule_digest(result) -> str:
    """A fingerprint of the whole schedule (node(s), cores, start, end of every step)."""
    h = hashlib.sha256()
    for sid in sorted(result.steps):
        s = result.steps[sid]
        h.update(f"{sid} {','.join(s.nodes)} {s.cores} {s.start_s!r} {s.end_s!r}\n".encode())
    return h.hexdigest()


def drive(steps, graph, nodes, reserve_after=RESERVE_AFTER_S, order: str = "setup"):
    """`simulate`'s loop, event by event, timing every StepExited pass.

    Returns (records, decisions in all): one record per exit event, (seconds in
    Scheduler.handle, decisions it returned, steps submitted but not yet started just
    before it). `reserve_after` and `order` are the scheduler's (None: no reservations;
    fleet.core.ranks)."""
    dur = {s.id: (s.estimate if s.estimate is not None else 1.0) for s in steps}
    sched = ordered(Scheduler(reserve_after), order)
    count = 0
    for nd in nodes:
        count += len(sched.handle(NodeJoined(nd), 0.0))
    ends: list = []
    seq = 0
    unstarted = len(steps)
    records: list[tuple[float, int, int]] = []
    clock = time.perf_counter

    def act(ds, now):
        nonlocal seq, unstarted, count
        count += len(ds)
        for d in ds:
            if type(d) is Start:
                heapq.heappush(ends, (now + dur[d.step], seq, d.step, d.attempt))
                seq += 1
                unstarted -= 1

    act(sched.handle(Submitted(tuple(steps), graph.deps), 0.0), 0.0)
    while ends:
        now, _, sid, attempt = heapq.heappop(ends)
        before = unstarted
        t = clock()
        ds = sched.handle(StepExited(sid, attempt, "succeeded"), now)
        records.append((clock() - t, len(ds), before))
        act(ds, now)
    assert sched.finished()
    return records, count


def _us(x: float) -> float:
    return round(1e6 * x, 2)


def pass_costs(records, n: int) -> dict:
    """Per exit event (one scheduling pass): distribution, and the mean by how many
    steps were still waiting (submitted, not started) at the time."""
    t = sorted(r[0] for r in records)
    out = {
        "exit_events": len(records),
        "us_per_exit_p50": _us(t[len(t) // 2]),
        "us_per_exit_p99": _us(t[int(len(t) * 0.99)]),
        "us_per_exit_mean": _us(statistics.fmean(t)),
        "us_per_decision_on_exit": _us(sum(t) / max(1, sum(r[1] for r in records))),
    }
    bins = []
    for lo, hi in ((0.5, 1.01), (0.1, 0.5), (0.0, 0.1)):
        rec = [r for r in records if lo * n <= r[2] < hi * n]
        sel = [r[0] for r in rec]
        if sel:
            bins.append({"waiting": f"{int(lo * n)}-{min(n, int(hi * n))}", "events": len(sel),
                         "decisions": sum(r[1] for r in rec),
                         "us_per_decision": _us(sum(sel) / max(1, sum(r[1] for r in rec))),
                         "us_per_exit_mean": _us(statistics.fmean(sel)),
                         "us_per_exit_p50": _us(sorted(sel)[len(sel) // 2])})
    out["by_waiting"] = bins
    return out


WINDOW: int | None = 0  # the node window of the aurora scenarios (--window)


def run_aurora(n: int, nodes) -> dict:
    t0 = time.perf_counter()
    steps = workload(n)
    t1 = time.perf_counter()
    graph, problems = build_graph(steps)
    t2 = time.perf_counter()
    if problems:
        raise SystemExit(f"the generated workload is invalid: {problems[:3]}")
    c2 = time.process_time()
    r = simulate(steps, graph, nodes, window=WINDOW)
    sim_s = time.perf_counter() - t2
    sim_cpu = time.process_time() - c2
    starts = len(r.steps)
    # How long each MPI step waited once its inputs were done (greedy backfill at work).
    waits = sorted(r.steps[s.id].start_s - max([0.0] + [r.steps[d].end_s for d in graph.deps[s.id]])
                   for s in steps if s.mpi and s.id in r.steps)
    out = {
        "scenario": f"aurora-{n // 1000}k",
        "nodes": len(nodes), "cores": sum(len(x.cores) for x in nodes),
        "mix": mix(steps),
        "generate_s": round(t1 - t0, 3), "build_graph_s": round(t2 - t1, 3),
        "simulate_s": round(sim_s, 3), "simulate_cpu_s": round(sim_cpu, 3),
        "events": len(nodes) + 1 + starts,
        "decisions": r.decisions, "starts": starts,
        "decisions_per_s": round(r.decisions / sim_s),
        "us_per_decision": round(1e6 * sim_s / r.decisions, 2),
        "makespan_s": r.makespan_s, "floor_s": r.floor_s,
        "utilization": round(r.utilization, 5),
        "unrunnable": len(r.unrunnable), "blocked": len(r.blocked),
        "mpi_wait_once_ready_s": {"median": waits[len(waits) // 2] if waits else 0.0,
                                  "p90": waits[int(len(waits) * 0.9)] if waits else 0.0,
                                  "max": waits[-1] if waits else 0.0},
        "schedule_sha256": schedule_digest(r),
        "peak_rss_mib": round(rss_mib(), 1),
    }
    del r
    gc.collect()
    records, count = drive(steps, graph, nodes)
    assert count == out["decisions"], (count, out["decisions"])
    out.update(pass_costs(records, n))
    del records, graph, steps
    gc.collect()
    return out


def run_blocked(n: int, nodes) -> dict:
    steps = blocked_workload(n)
    graph, problems = build_graph(steps)
    assert not problems
    t0, c0 = time.perf_counter(), time.process_time()
    records, count = drive(steps, graph, nodes)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out = {
        "scenario": f"blocked-{n // 1000}k",
        "nodes": len(nodes), "cores": sum(len(x.cores) for x in nodes),
        "ready_at_start": n,
        "drive_s": round(wall, 3), "drive_cpu_s": round(cpu, 3),
        "decisions": count,
        "decisions_per_s": round(count / wall),
        "us_per_decision": round(1e6 * wall / count, 2),
        "peak_rss_mib": round(rss_mib(), 1),
    }
    out.update(pass_costs(records, n))
    del records, graph, steps
    gc.collect()
    return out


def traced_peak(n: int, nodes) -> float:
    steps = workload(n)
    graph, _ = build_graph(steps)
    gc.collect()
    tracemalloc.start()
    r = simulate(steps, graph, nodes, window=WINDOW)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del r
    return round(peak / 2**20, 1)


# --- reporting ---------------------------------------------------------------------------------

def table(rows: list[dict]) -> str:
    head = (f"{'scenario':<13} {'steps':>7} {'wall s':>7} {'CPU s':>7} {'decisions':>9} {'dec/s':>7} "
            f"{'us/dec':>7} {'us/pass p50':>11} {'p99':>7} {'peak RSS':>9}")
    lines = [head, "-" * len(head)]
    for r in rows:
        steps = r["mix"]["steps"] if "mix" in r else r["ready_at_start"]
        wall = r.get("simulate_s", r.get("drive_s"))
        cpu = r.get("simulate_cpu_s", r.get("drive_cpu_s"))
        lines.append(f"{r['scenario']:<13} {steps:>7} {wall:>7.2f} {cpu:>7.2f} {r['decisions']:>9} "
                     f"{r['decisions_per_s']:>7} {r['us_per_decision']:>7} {r['us_per_exit_p50']:>11} "
                     f"{r['us_per_exit_p99']:>7} {r['peak_rss_mib']:>6.0f}MiB")
    return "\n".join(lines)


def readme_section(res: dict) -> str:
    a = {r["scenario"]: r for r in res["aurora"]}
    b = {r["scenario"]: r for r in res["blocked"]}
    big, small = a.get("aurora-100k"), a.get("aurora-10k")
    bb, bs = b.get("blocked-100k"), b.get("blocked-10k")
    m = res["machine"]
    L = [SECTION, "",
         f"{res['date']}, on {m['cpus']} cores ({m['cpu']}), Python {m['python']}:", "",
         "    python benchmarks/aurora_whatif.py", "",
         "Results: `benchmarks/results/aurora_whatif.json`. Allocation: 10,624 pretend nodes of 104",
         "cores and 6 GPUs, 1135 GiB each except one node in nine with 1007 GiB. Workload",
         "(seeded; StepSpec objects, graph from `build_graph`): chains of one-core Python `call`",
         "steps; ensembles of prep steps -> one wide spanning MPI step (64-2048 ranks, a third",
         "using GPUs) -> analysis steps that read its output; GPU steps. The 10k workload is the",
         "first 10k steps of the 100k one. \"wall\" is one `fleet.core.simulate.simulate` call, node",
         "joins included; \"us/pass\" times each step-exit event in `Scheduler.handle` (a second,",
         "instrumented run of the same events). \"blocked\": 16 such nodes (1,664 cores) and 10k",
         "or 100k independent steps all ready at once. Peak RSS is `ru_maxrss` of the whole",
         "process (generated steps, graph and result included), read after each scenario;",
         "tracemalloc is the peak of Python allocations inside one 100k `simulate()` (separate run).",
         "",
         "| scenario | steps | wall (s) | CPU (s) | decisions | decisions/s | us/decision | us/pass p50 | p99 | peak RSS (MiB) |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res["aurora"] + res["blocked"]:
        steps = r["mix"]["steps"] if "mix" in r else r["ready_at_start"]
        wall = r.get("simulate_s", r.get("drive_s"))
        cpu = r.get("simulate_cpu_s", r.get("drive_cpu_s"))
        L.append(f"| {r['scenario']} | {steps:,} | {wall:.2f} | {cpu:.2f} | {r['decisions']:,} | {r['decisions_per_s']:,} | "
                 f"{r['us_per_decision']} | {r['us_per_exit_p50']} | {r['us_per_exit_p99']} | "
                 f"{r['peak_rss_mib']:.0f} |")
    L.append("")
    if big:
        L.append(f"- 100k steps: {big['simulate_s']:.1f} s and {big['peak_rss_mib']:.0f} MiB peak RSS"
                 + (f" ({res['tracemalloc_peak_mib']:.0f} MiB traced in `simulate()`)" if res.get("tracemalloc_peak_mib") else "")
                 + f"; target under 60 s and 2 GiB: {'met' if res['target_met'] else 'MISSED'}. "
                 f"{big['mix']['mpi_spanning']} MPI steps ({big['mix']['mpi_with_gpus']} with GPUs), "
                 f"{big['mix']['gpu']} other GPU steps; makespan {big['makespan_s']:.0f} s against a "
                 f"dependency floor of {big['floor_s']:.0f} s.")
    if big and small:
        L.append(f"- Cost of a decision, 10k vs 100k steps: {small['us_per_decision']} vs {big['us_per_decision']} us "
                 f"over the whole simulation (fixed costs such as the 10,624 node joins weigh more in the "
                 f"small run); {small['us_per_decision_on_exit']} vs {big['us_per_decision_on_exit']} us in the "
                 f"passes after step exits; a pass (p50) {small['us_per_exit_p50']} vs {big['us_per_exit_p50']} us. "
                 f"By steps still waiting in the 100k run: "
                 + ", ".join(f"{x['us_per_decision']} us per decision while {x['waiting']} wait"
                             for x in big["by_waiting"])
                 + " (the cost follows the kind of decision, not the queue: late passes mostly record one "
                 "exit each, and place the wide MPI steps, whose placement orders the nodes).")
        w = big["mpi_wait_once_ready_s"]
        L.append(f"- Wide steps wait under greedy backfill: once its inputs are done an MPI step waits "
                 f"{w['median']:.0f} s (median), {w['p90']:.0f} s (p90), {w['max']:.0f} s (max) in the 100k run.")
    if bb and bs:
        hi, lo = bb["by_waiting"][0], bb["by_waiting"][-1]
        L.append(f"- Far more ready steps than cores: a pass costs {bs['us_per_exit_p50']} us (p50) with "
                 f"10k ready, {bb['us_per_exit_p50']} us with 100k; per decision {bs['us_per_decision_on_exit']} vs "
                 f"{bb['us_per_decision_on_exit']} us; in the 100k run {hi['us_per_decision']} us per decision "
                 f"while {hi['waiting']} steps wait, {lo['us_per_decision']} us while {lo['waiting']} do.")
    la = res["load_average"]
    L.append(f"- The machine is shared: load average {la['start'][0]} at the start, {la['end'][0]} at the end; "
             f"decisions/s and us figures are from wall time, so they are pessimistic when it is busy "
             f"(CPU is the process's own time).")
    for note in res.get("notes", []):
        L.append(f"- {note}")
    return "\n".join(L) + "\n"


def write_readme(section: str) -> None:
    """Add or replace only our own section of benchmarks/README.md."""
    write_section(SECTION, section, README)


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1k and 10k steps; writes nothing")
    ap.add_argument("--no-tracemalloc", action="store_true", help="skip the traced re-run")
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--json", metavar="PATH", help="also write the results here")
    ap.add_argument("--note", action="append", default=[], help="a line for the README section")
    ap.add_argument("--window", default="0", help="steps per node handed ahead in the aurora scenarios "
                    "(fleet.core.window; 'cores': each node's cores, as `fleet up`); default 0")
    args = ap.parse_args(argv)
    global WINDOW
    WINDOW = None if args.window == "cores" else int(args.window)
    sizes = (1_000, 10_000) if args.quick else (10_000, 100_000)

    t_start = time.perf_counter()
    load_start = os.getloadavg()
    nodes = aurora_nodes()
    aurora = []
    for n in sizes:
        aurora.append(run_aurora(n, nodes))
        print(f"  aurora {n}: {aurora[-1]['simulate_s']:.2f} s", file=sys.stderr, flush=True)
    small_nodes = pretend_nodes(16, CORES, MEM, GPUS)
    blocked = []
    for n in sizes:
        blocked.append(run_blocked(n, small_nodes))
        print(f"  blocked {n}: {blocked[-1]['drive_s']:.2f} s", file=sys.stderr, flush=True)
    peak_rss = rss_mib()
    traced = None if args.no_tracemalloc else traced_peak(sizes[-1], nodes)

    big = aurora[-1]
    import fleet
    res = {
        "benchmark": "aurora_whatif",
        "command": "python benchmarks/aurora_whatif.py" + (" --quick" if args.quick else "")
                   + (f" --window {args.window}" if args.window != "0" else ""),
        "date": _dt.date.today().isoformat(),
        "machine": {"cpus": os.cpu_count(), "cpu": cpu_name(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "fleet": str(Path(fleet.__file__).parent),
        "seed": SEED,
        "memory_measure": "peak_rss_mib = getrusage(RUSAGE_SELF).ru_maxrss (whole process, "
                          "read after each scenario, monotonic); tracemalloc_peak_mib = peak "
                          "traced Python allocations during one simulate() of the largest "
                          "aurora workload, separate untimed run",
        "aurora": aurora,
        "blocked": blocked,
        "peak_rss_mib": round(peak_rss, 1),
        "tracemalloc_peak_mib": traced,
        "target": {"simulate_s": 60, "memory_mib": 2048},
        "target_met": big["simulate_s"] < 60 and big["peak_rss_mib"] < 2048,
        "total_benchmark_s": round(time.perf_counter() - t_start, 1),
        "load_average": {"start": [round(x, 2) for x in load_start],
                         "end": [round(x, 2) for x in os.getloadavg()]},
        "notes": args.note,
    }
    print(table(aurora + blocked))
    print(f"peak RSS {peak_rss:.0f} MiB"
          + (f"; tracemalloc peak in one {sizes[-1]:,}-step simulate() {traced:.0f} MiB" if traced else "")
          + f"; target {'met' if res['target_met'] else 'MISSED'}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    if not (args.quick or args.no_write):
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(res, indent=1) + "\n")
        write_readme(readme_section(res))
        print(f"wrote {RESULTS.relative_to(HERE.parent)} and {README.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
