"""Steps whose demands all differ (memory per step): the same decisions as a base tree,
and what a pass costs.

    python benchmarks/distinct_demands.py --trees /tmp/base,.             # decisions: digests per tree
    python benchmarks/distinct_demands.py --trees /tmp/base,. --scale 500,1000,2000 [--scale-trees .]
    python benchmarks/distinct_demands.py --no-digests --shape memcores --scale 1000,2000,4000 --scale-trees /tmp/base,.

`--trees`: for each tree, a child process (PYTHONPATH=tree, so that tree's fleet is
imported) runs `fleet.core.simulate.simulate` with its decision log on a set of
workloads - the audit's repro (N one-core steps, memory 1000+i MiB, 4 nodes x 64 cores,
256 GiB), the same with one memory, mixed cores / memory / GPUs / spanning MPI steps
with dependencies and priorities, a memory-bound mix, steps waiting past
`reserve_after`, steps that run alone, an allocation end, aurora_whatif's seeded
workload on 48 of its nodes and reservations_whatif's starving stream - each with
reservations on and off, in each `--order`, with the node window on (each node's
cores, as `fleet simulate`) and off, some with `--reserve-ahead`. It prints, per run,
the decision count and a digest (sha256) of the repr of every (time, decision) in
order; equal digests: the same decisions, in the same order, at the same times.

`--scale`: the repro at each N (distinct memory, `fleet simulate`'s defaults: window of
each node's cores, reservations after 600 s), per tree: CPU seconds of the simulation
and the fit checks (`_Node.fits` calls, counted by wrapping it) per decision; with
`--shape memcores`, steps of distinct cores and memory on nodes with GPUs (memory runs
out first). Since 2026-12-07 a step held back by a reservation is not recorded again
when only the reservation's step changes: digests against a tree before that differ in
the runs with reservations (their starts, ends and makespans do not).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
GiB, MiB = 2**30, 2**20
ORDERS = ("setup", "critical-path", "critical-then-smallest", "defer-widest")


def _digest(r) -> str:
    h = hashlib.sha256()
    for now, d in r.log:
        h.update(f"{now!r} {d!r}\n".encode())
    return h.hexdigest()[:16]


def distinct(n: int, same: bool = False, est=lambda i: 1 + i % 50):
    """The audit's repro: n one-core steps, memory 1000+i MiB (or all 1000 MiB)."""
    from fleet.core.suite import StepSpec
    return [StepSpec(id=f"s{i}", order=i, command="true", estimate=est(i),
                     memory=(1000 + (0 if same else i)) * MiB) for i in range(n)]


def mixed(n: int, seed: int = 11, memory_bound: bool = False, alone: bool = False):
    """Mixed cores, memory, GPUs, spanning MPI steps, dependencies and priorities."""
    import random
    from fleet.core.suite import StepSpec
    rng = random.Random(seed)
    steps = []
    for i in range(n):
        kw: dict = {"estimate": rng.choice((None, 1.0, 5.0, 30.0, 120.0, round(rng.uniform(1, 300), 1)))}
        r = rng.random()
        if r < 0.06:
            kw.update(cores=rng.choice((16, 32, 64, 96)), span=True, mpi=True, threads=rng.choice((1, 2, 4)),
                      memory=rng.choice((None, rng.randint(8, 64) * GiB)))
            kw["ranks"] = max(1, kw["cores"] // kw["threads"])
            kw["min_ranks"] = kw["ranks"]
            kw["min_cores"] = kw["cores"]
        elif r < 0.16:
            kw.update(cores=rng.choice((1, 2, 4)), gpus=rng.choice((1, 2)), memory=rng.choice((None, 8 * GiB)))
        else:
            c = rng.choice((1, 1, 1, 2, 4, 8))
            mem = (rng.randint(2, 12) * GiB + i * MiB) if memory_bound else rng.choice((None, (500 + i) * MiB))
            kw.update(cores=c, min_cores=c, memory=mem)
        if alone and rng.random() < 0.01:
            kw["concurrent"] = False
        if i and rng.random() < 0.3:
            kw["deps"] = tuple(sorted({f"m{rng.randrange(max(0, i - 50), i)}" for _ in range(rng.randint(1, 2))}))
        steps.append(StepSpec(id=f"m{i}", order=i, command="true", priority=rng.choice((1, 2, 3, 3, 3, 4)), **kw))
    return steps


def _runs():
    """(name, steps factory, nodes factory, simulate keywords) of the decision comparison."""
    sys.path.insert(0, str(HERE))
    from aurora_whatif import aurora_nodes, workload
    from reservations_whatif import stream_workload
    from fleet.core.simulate import pretend_nodes
    four = lambda: pretend_nodes(4, 64, 256 * GiB)  # noqa: E731
    gpus = lambda: pretend_nodes(6, 64, 192 * GiB, 4)  # noqa: E731
    small = lambda: pretend_nodes(4, 32, 48 * GiB, 2)  # noqa: E731
    out = []
    for w in (None, 0):
        for ra in (600.0, None):
            out.append((f"repro 1000 window={w} reserve={ra}", lambda: distinct(1000), four,
                        dict(window=w, reserve_after=ra)))
    out.append(("repro 1000 one memory", lambda: distinct(1000, same=True), four, dict(window=None)))
    out.append(("repro 1200 on 16 cores, past reserve_after", lambda: distinct(1200), lambda: pretend_nodes(1, 16, 64 * GiB),
                dict(window=None)))
    out.append(("repro 800 reserve_after 20", lambda: distinct(800, est=lambda i: 1 + (i * 37) % 90), four,
                dict(window=None, reserve_after=20.0)))
    for order in ORDERS:
        for w in (None, 0):
            for ra in (600.0, 30.0, None):
                out.append((f"mixed 1500 {order} window={w} reserve={ra}", lambda: mixed(1500), gpus,
                            dict(window=w, reserve_after=ra, order=order)))
    for ra in (600.0, None):
        out.append((f"memory-bound 1200 reserve={ra}", lambda: mixed(1200, 5, memory_bound=True), small,
                    dict(window=None, reserve_after=ra)))
    out.append(("mixed 1200 with steps that run alone", lambda: mixed(1200, 3, alone=True), gpus, dict(window=None)))
    out.append(("mixed 1500 reserve-ahead 2", lambda: mixed(1500, 9), gpus, dict(window=None, reserve_ahead=2)))
    out.append(("mixed 1500 allocation end", lambda: mixed(1500, 13), gpus,
                dict(window=None, end_s=900.0, drain_before_s=60.0)))
    out.append(("mixed 1500 window depth 3", lambda: mixed(1500, 17), gpus, dict(window=None, depth=3)))
    for order in ("setup", "defer-widest"):
        for ra in (600.0, None):
            out.append((f"aurora 4000 on 48 nodes {order} reserve={ra}", lambda: workload(4000),
                        lambda: aurora_nodes(48), dict(window=0, reserve_after=ra, order=order)))
    out.append(("aurora 4000 on 48 nodes window", lambda: workload(4000), lambda: aurora_nodes(48),
                dict(window=None, order="critical-then-smallest")))
    out.append(("stream 3000+8 on 4 nodes, window", lambda: stream_workload(3000, 8), lambda: aurora_nodes(4),
                dict(window=None, order="defer-widest")))
    return out


def one() -> dict:
    """This tree's digests."""
    from fleet.core.graph import build_graph
    from fleet.core.simulate import simulate
    out = {}
    for name, steps_of, nodes_of, kw in _runs():
        steps = steps_of()
        graph, _ = build_graph(steps)
        t = time.process_time()
        r = simulate(steps, graph, nodes_of(), keep_log=True, **kw)
        out[name] = {"decisions": r.decisions, "makespan_s": round(r.makespan_s, 3), "digest": _digest(r),
                     "cpu_s": round(time.process_time() - t, 2)}
        print(name, out[name], file=sys.stderr, flush=True)
    return out


def memcores(n: int):
    """Steps of distinct cores and memory (1-16 cores, 16-63 GiB and i MiB): memory, not
    cores, is what runs out, so thousands of classes wait with cores free."""
    from fleet.core.suite import StepSpec
    return [StepSpec(id=f"s{i}", order=i, command="true", estimate=1 + i % 50, cores=1 + i % 16,
                     memory=(16 + (i * 7) % 48) * GiB + i * MiB) for i in range(n)]


SHAPES = {"distinct": (distinct, 0), "memcores": (memcores, 8)}  # steps, GPUs a node


def scale(n: int, shape: str = "distinct") -> dict:
    """The repro (or `shape`) at n steps: CPU and fit checks per decision, and the
    decisions by kind."""
    from fleet.core import resources
    from fleet.core.graph import build_graph
    from fleet.core.simulate import pretend_nodes, simulate
    calls = [0]
    fits = resources._Node.fits

    def counted(self, d):
        calls[0] += 1
        return fits(self, d)

    resources._Node.fits = counted
    make, gpus = SHAPES[shape]
    steps = make(n)
    graph, _ = build_graph(steps)
    t = time.process_time()
    r = simulate(steps, graph, pretend_nodes(4, 64, 256 * GiB, gpus), window=None, keep_log=True)
    cpu = time.process_time() - t
    resources._Node.fits = fits
    kinds: dict = {}
    for _, d in r.log:
        kinds[type(d).__name__] = kinds.get(type(d).__name__, 0) + 1
    return {"n": n, "shape": shape, "cpu_s": round(cpu, 2), "decisions": r.decisions, "by_kind": kinds,
            "fit_checks": calls[0], "fit_checks_per_decision": round(calls[0] / r.decisions, 2),
            "makespan_s": r.makespan_s}


def _child(tree: str, args: list[str], timeout: float) -> dict:
    env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()))
    p = subprocess.run([sys.executable, __file__, *args], env=env, stdout=subprocess.PIPE, text=True,
                       timeout=timeout, check=True, cwd="/")
    return json.loads(p.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", default=".", help="comma-separated trees whose decisions are compared")
    ap.add_argument("--scale", default="", help="comma-separated N for the cost figures (none: skip)")
    ap.add_argument("--scale-trees", default="", help="trees for --scale (default: --trees)")
    ap.add_argument("--shape", default="distinct", choices=sorted(SHAPES),
                    help="--scale's steps: the repro (distinct memory, 1 core) or memcores (1-16 cores and memory)")
    ap.add_argument("--no-digests", action="store_true", help="only the cost figures")
    ap.add_argument("--out", default="")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--one-scale", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one()))
        return 0
    if args.one_scale:
        print(json.dumps(scale(args.one_scale, args.shape)))
        return 0
    trees = args.trees.split(",")
    result: dict = {"command": "python benchmarks/distinct_demands.py " + " ".join(sys.argv[1:]),
                    "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "loadavg_start": os.getloadavg()}
    same = True
    if not args.no_digests:
        runs = {t: _child(t, ["--one"], 7200) for t in trees}
        names = next(iter(runs.values())).keys()
        result["digests"] = runs
        result["same"] = {k: len({(v[k]["decisions"], v[k]["digest"]) for v in runs.values()}) == 1 for k in names}
        same = all(result["same"].values())
    if args.scale:
        result["scale"] = {t: [_child(t, ["--one-scale", n, "--shape", args.shape], 7200) for n in args.scale.split(",")]
                           for t in (args.scale_trees or args.trees).split(",")}
    result["loadavg_end"] = os.getloadavg()
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
