"""The node window's choice of predecessor (fleet.core.window / windowpick): scheduler
CPU per decision and makespan, window 0 against the default window (each node's cores).

    python benchmarks/window_pick.py            # prints a table (writes nothing)
    python benchmarks/window_pick.py --quick    # smaller workloads
    python benchmarks/window_pick.py --seeds 6  # and the mix's makespan for 6 seeds (4,000 steps, 8 nodes)

Two workloads through `fleet.core.simulate.simulate` (the code behind `fleet simulate`),
each far more ready steps than cores, so the window queues a step behind most running
ones: reservations_whatif's starving stream (5,000 one-core steps of lognormal estimates
and 10 wide MPI steps on 32 Aurora nodes), and aurora_whatif's seeded 10,000-step mix
(chains, ensembles, MPI steps) on 16 Aurora nodes. CPU is process_time of one simulate(),
the best of `--repeat` runs (the machine is shared; the best is the least disturbed).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time

from aurora_whatif import aurora_nodes, workload  # noqa: E402 (benchmarks/ is sys.path[0])
from reservations_whatif import stream_workload  # noqa: E402

from fleet.core.graph import build_graph
from fleet.core.simulate import simulate


def measure(steps, nodes, window, repeat: int) -> dict:
    graph, problems = build_graph(steps)
    assert not problems, problems[:3]
    best, r = None, None
    for _ in range(repeat):
        gc.collect()
        c = time.process_time()
        r = simulate(steps, graph, nodes, window=window)
        cpu = time.process_time() - c
        best = cpu if best is None else min(best, cpu)
    return {"cpu_s": round(best, 3), "decisions": r.decisions, "us_per_decision": round(1e6 * best / r.decisions, 1),
            "makespan_s": round(r.makespan_s, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="half the steps")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=0, help="also the mix's makespan for seeds 1..N (smaller)")
    args = ap.parse_args(argv)
    k = 2 if args.quick else 1
    cases = [("stream, 32 nodes", stream_workload(5_000 // k, 10), aurora_nodes(32)),
             ("aurora mix, 16 nodes", workload(10_000 // k), aurora_nodes(16))]
    print(f"{'workload':<22} {'window':>6} {'steps':>6} {'CPU s':>7} {'decisions':>9} {'us/dec':>7} {'makespan s':>10}")
    for name, steps, nodes in cases:
        for window in (0, None):
            m = measure(steps, nodes, window, args.repeat)
            print(f"{name:<22} {'cores' if window is None else window:>6} {len(steps):>6} {m['cpu_s']:>7} "
                  f"{m['decisions']:>9} {m['us_per_decision']:>7} {m['makespan_s']:>10}", flush=True)
    for seed in range(1, args.seeds + 1):
        steps = workload(4_000, seed)
        graph, _ = build_graph(steps)
        spans = [simulate(steps, graph, aurora_nodes(8), window=w).makespan_s for w in (0, None)]
        print(f"mix seed {seed}, 4,000 steps, 8 nodes: makespan {spans[0]:.0f} s window 0, {spans[1]:.0f} s cores",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
