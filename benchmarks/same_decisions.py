"""Whether two trees' schedulers decide exactly the same, on the Aurora-sized what-if.

    python benchmarks/same_decisions.py --trees /tmp/base,. [--out FILE]

For each tree, a child process (PYTHONPATH=tree, so that tree's fleet is imported)
runs `fleet.core.simulate.simulate` with its decision log on aurora_whatif's
allocation (10,624 nodes) and seeded 100,000-step workload in the runs of
wide_wait.py that the README quotes (setup order without reservations, makespan
18,393 s; defer-widest with, 16,499 s), plus critical-then-smallest with reservations,
and reservations_whatif's starving stream with every node's window of steps handed ahead (32
nodes, 50,000 narrow and 40 wide steps). It prints each run's makespan, decision
count, and a digest (sha256) of the repr of every (time, decision) in order. Equal
digests: the same decisions, in the same order, at the same times.
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


def _digest(r) -> str:
    h = hashlib.sha256()
    for now, d in r.log:
        h.update(f"{now!r} {d!r}\n".encode())
    return h.hexdigest()[:16]


def one() -> dict:
    """This tree's runs."""
    sys.path.insert(0, str(HERE))
    from aurora_whatif import aurora_nodes, workload
    from reservations_whatif import stream_workload

    from fleet.core.graph import build_graph
    from fleet.core.reservations import RESERVE_AFTER_S
    from fleet.core.simulate import simulate

    out = {}
    steps = workload(100_000)
    graph, _ = build_graph(steps)
    nodes = aurora_nodes()
    for order, ra in (("setup", None), ("defer-widest", RESERVE_AFTER_S), ("critical-then-smallest", RESERVE_AFTER_S)):
        t = time.process_time()
        r = simulate(steps, graph, nodes, keep_log=True, reserve_after=ra, order=order)
        out[f"aurora {order}/{'with' if ra else 'without'}"] = {
            "makespan_s": round(r.makespan_s, 1), "decisions": r.decisions, "digest": _digest(r),
            "cpu_s": round(time.process_time() - t, 1)}
        del r
    steps = stream_workload(50_000, 40)
    graph, _ = build_graph(steps)
    t = time.process_time()
    r = simulate(steps, graph, aurora_nodes(32), keep_log=True, reserve_after=RESERVE_AFTER_S, window=None,
                 order="defer-widest")
    out["stream defer-widest/with, window"] = {"makespan_s": round(r.makespan_s, 1), "decisions": r.decisions,
                                               "digest": _digest(r), "cpu_s": round(time.process_time() - t, 1)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", default=".")
    ap.add_argument("--out", default="")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one()))
        return 0
    runs = {}
    for tree in args.trees.split(","):
        tree = str(Path(tree).resolve())
        env = dict(os.environ, PYTHONPATH=tree)
        p = subprocess.run([sys.executable, __file__, "--one"], env=env, capture_output=True, text=True,
                           timeout=3000, check=True, cwd="/")
        runs[tree] = json.loads(p.stdout)
    keys = next(iter(runs.values())).keys()
    same = {k: len({json.dumps({f: v[k][f] for f in ("makespan_s", "decisions", "digest")}) for v in runs.values()})
            == 1 for k in keys}
    result = {"command": "python benchmarks/same_decisions.py " + " ".join(sys.argv[1:]),
              "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "loadavg": os.getloadavg(),
              "runs": runs, "same": same}
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
