"""Call targets for benchmarks/children.py (importable by zygotes when benchmarks/ is on
PYTHONPATH; the benchmark sets that up)."""

import json
import os
import time

import fleet


def noop(ctx):
    """Nothing: a child whose cost is fleet's own."""


def parent(ctx, n: int = 1000):
    """Submit n no-op children in one ctx.submit and wait; note the times."""
    if ctx.phase == 0:
        t0 = time.time()
        ctx.submit([{"id": f"k{i}", "call": "fleet_bench_children:noop"} for i in range(n)])
        t1 = time.time()
        with open(os.path.join(ctx.workdir, "submit.json"), "w") as f:
            json.dump({"start": t0, "end": t1, "n": n}, f)
        raise fleet.WaitForChildren()
    with open(os.path.join(ctx.workdir, "resumed.json"), "w") as f:
        json.dump({"at": time.time(), "children": len(ctx.children)}, f)
