"""The node window's order across demands at its worst: many ready classes ahead.

    PYTHONPATH=TREE python benchmarks/window_fair_wide.py K    # CPU of one simulate

K steps of 48 cores, each of its own memory (K classes of demand, each blocked until a
node is free), then 20,000 one-core steps of one demand, on 16 pretend 64-core nodes
with the window of each node's cores (as `fleet up`): each hand-over of a one-core step
looks at the first steps of the classes before it (fleet.core.windowfair.LOOKED_AT at
most). Prints the CPU seconds of `simulate` and the makespan; run it under two trees'
PYTHONPATH to compare.
"""

from __future__ import annotations

import sys
import time

import fleet
from fleet.core.graph import build_graph
from fleet.core.simulate import pretend_nodes, simulate
from fleet.core.suite import StepSpec

GiB, MiB = 2**30, 2**20


def main() -> None:
    k = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    steps = [StepSpec(id=f"w{i}", order=i, command="x", cores=48, memory=(1000 + i) * MiB, estimate=100.0)
             for i in range(k)]
    steps += [StepSpec(id=f"n{i}", order=k + i, command="x", cores=1, estimate=5.0) for i in range(20000)]
    graph, _ = build_graph(steps)
    t = time.process_time()
    r = simulate(steps, graph, pretend_nodes(16, 64, 256 * GiB), window=None)
    print(fleet.__file__, k, "cpu_s", round(time.process_time() - t, 2), "makespan_s",
          getattr(r, "makespan", None) or getattr(r, "makespan_s", None))


if __name__ == "__main__":
    main()
