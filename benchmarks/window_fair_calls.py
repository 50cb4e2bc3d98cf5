"""Calls a step of the core with the node window across demands (fleet.core.windowfair).

    python benchmarks/window_fair_calls.py [--window N|cores]   # default: cores, as `fleet up`

Runs fleet.core.simulate on 50 pretend nodes of 64 cores with 60,000 one-core steps in
setup order: 20,000 of default memory (a), 20,000 with `memory = "64MiB"` (m, another
demand), 20,000 of default memory again (b, a's demand); estimates 1-7 s. Prints the
makespan and the Python calls a step counted by cProfile (not timed: the count does not
depend on the machine's load). The b steps come after the m steps in the order, and
with a window they used to be handed ahead behind a's steps while m's waited.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
from pathlib import Path

from fleet.core.graph import build_graph
from fleet.core.simulate import pretend_nodes, simulate
from fleet.core.suite import parse_suite

N = 20_000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", default="cores", help="steps per node handed ahead ('cores' or a number; 0: none)")
    args = ap.parse_args()
    window = None if args.window == "cores" else int(args.window)
    tables = [{"id": f"a{i}", "command": "x", "estimate": 1 + i % 7} for i in range(N)]
    tables += [{"id": f"m{i}", "command": "x", "estimate": 2 + i % 5, "memory": "64MiB"} for i in range(N)]
    tables += [{"id": f"b{i}", "command": "x", "estimate": 1 + i % 3} for i in range(N)]
    suite = parse_suite({"steps": tables}, Path("/x/s.toml"))
    graph, _ = build_graph(list(suite.steps))
    prof = cProfile.Profile()
    prof.enable()
    r = simulate(suite.steps, graph, pretend_nodes(50, 64, 64 * 2**30), window=window)
    prof.disable()
    calls = pstats.Stats(prof).total_calls
    print(f"window {args.window}: makespan {r.makespan_s:.0f} s, calls a step {calls / (3 * N):.1f}")


if __name__ == "__main__":
    main()
