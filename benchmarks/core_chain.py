"""The pure scheduler core with chains in the node window, at scale (issue 12, item 4).

    python benchmarks/core_chain.py [--nodes 1000] [--steps 300000] [--depths 1,4,16]
                                                             # results/core_chain.json

A real Scheduler with the live default window (each node's cores times the depth,
fleet.core.windowchain), NODES nodes of 64 cores, STEPS one-core steps with an estimate
of 1 s, entered as the coordinator enters them (chunks of 2,000). The pool is kept full:
each turn (30 ms of pretend time) the 200 oldest running steps end, in start order, and
the steps queued behind them begin (as their nodes would start them). Measured: the CPU
of the handle() calls per step (process time, the core alone: no messages, no files),
the decisions by kind, and the most steps queued at once. Depth 1 is the window as it
was; each depth is a fresh scheduler in this one process, in turn.
"""

from __future__ import annotations

import argparse
import collections
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _nodebench as nb  # noqa: E402

from fleet.core.decisions import EnterMore, Entering, Exits, GoOn, NodeJoined, StepExited, Submitted  # noqa: E402
from fleet.core.resources import NodeSpec  # noqa: E402
from fleet.core.scheduler import Scheduler  # noqa: E402
from fleet.core.suite import parse_suite  # noqa: E402

ENDS_PER_TURN = 200


def run(nodes: int, steps: int, depth: int) -> dict:
    specs = tuple(parse_suite({"steps": [{"id": "s/{i}", "array": f"1-{steps}", "command": "true", "estimate": 1}]},
                              Path("/run/s.toml")).steps)
    sched = Scheduler(window=None, depth=depth)
    for i in range(nodes):
        sched.handle(NodeJoined(NodeSpec(f"n{i:05d}", tuple(range(64)), (), 256 << 30)), 0.0)
    now = 1.0
    cpu = time.process_time
    t0 = cpu()
    out = sched.handle(Submitted(specs, {s.id: s.deps for s in specs}, frozenset(), chunk=2000,
                                 order=tuple(s.id for s in specs)), now)
    while any(isinstance(d, Entering) and d.entered < d.total for d in out):
        out = sched.handle(EnterMore(), now)
    entered = cpu() - t0
    gc.collect()
    gc.freeze()
    running: collections.deque = collections.deque()
    kinds: collections.Counter = collections.Counter()
    most_queued = 0
    t0 = cpu()
    while not sched.finished():
        for d in out:
            kinds[type(d).__name__] += 1
        running.extend(d for d in out if type(d).__name__ in ("Start", "Begin"))
        most_queued = max(most_queued, sched.window.queued())
        now += 0.03
        if any(isinstance(d, GoOn) for d in out):
            ev = Exits(())
        else:
            ended = [running.popleft() for _ in range(min(ENDS_PER_TURN, len(running)))]
            ev = Exits(tuple(StepExited(d.step, d.attempt, "succeeded") for d in ended))
        out = sched.handle(ev, now)
    t = cpu() - t0
    for d in out:
        kinds[type(d).__name__] += 1
    gc.unfreeze()
    return {"depth": depth, "nodes": nodes, "steps": steps, "entering_cpu_s": round(entered, 2),
            "cpu_us_per_step": round(t / steps * 1e6, 1), "most_queued": most_queued,
            "decisions": dict(sorted(kinds.items()))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=300_000)
    ap.add_argument("--depths", default="1,4,16")
    args = ap.parse_args()
    rows = []
    for depth in (int(d) for d in args.depths.split(",")):
        row = run(args.nodes, args.steps, depth)
        print(row, file=sys.stderr, flush=True)
        rows.append(row)
    res = {"benchmark": "core_chain", "command": "python benchmarks/core_chain.py " + " ".join(sys.argv[1:]),
           "date": nb.today(), "machine": nb.machine(), "runs": rows}
    print(f"wrote {nb.write_result('core_chain', res).relative_to(nb.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
