"""What a lost node and a big cancel cost the scheduler core, at scale (pure core, no I/O).

    PYTHONPATH=<tree> python benchmarks/pending_scale.py --nodes 10000 --steps 1000000 --lose 100 --cancel 0
    PYTHONPATH=<tree> python benchmarks/pending_scale.py --nodes 100 --steps 60000 --lose 100 --cancel 0
    PYTHONPATH=<tree> python benchmarks/pending_scale.py --nodes 100 --steps 40000 --lose 0 --cancel 20000
    PYTHONPATH=<tree> python benchmarks/pending_scale.py --nodes 1 --steps 20000 --resubmit

Nodes of 64 cores join, one-core steps are submitted (entered whole), the nodes run
full; then `--lose` nodes are lost one at a time (the last loss of every node leaves
each pending step unrunnable), or `--cancel` ready steps are cancelled in one Cancel,
or (`--resubmit`) the suite is submitted again with every definition changed (each
ready step is replaced by a new generation).
Prints one JSON line: the seconds each scheduler call took (the loop turn it holds).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "core"))

from coretools import suite  # noqa: E402

from fleet.core.decisions import Cancel, EnterMore, NodeJoined, NodeLost, submission  # noqa: E402
from fleet.core.scheduler import Scheduler  # noqa: E402
from fleet.core.simulate import pretend_nodes  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--steps", type=int, default=60000)
    ap.add_argument("--lose", type=int, default=0)
    ap.add_argument("--cancel", type=int, default=0)
    ap.add_argument("--resubmit", action="store_true")
    a = ap.parse_args()
    s = Scheduler(reserve_after=None)
    nodes = pretend_nodes(a.nodes, 64)
    for n in nodes:
        s.handle(NodeJoined(n), 0.0)
    s.handle(submission(suite(*[dict(id=f"s{i}") for i in range(a.steps)]).steps), 1.0)
    while s.entering():
        s.handle(EnterMore(), 1.0)
    before = dict(s.counts())
    losses = []
    for n in nodes[:a.lose]:
        t = time.perf_counter()
        s.handle(NodeLost(n.name), 2.0)
        losses.append(time.perf_counter() - t)
    cancel_s = None
    if a.cancel:
        ready = [v.id for v in s.views() if v.state == "ready"][:a.cancel]
        t = time.perf_counter()
        s.handle(Cancel(tuple(ready), "benchmark"), 3.0)
        cancel_s = time.perf_counter() - t
    tree = str(Path(__import__("fleet").__file__).parent)
    resubmit_s = None
    if a.resubmit:
        changed = suite(*[dict(id=f"s{i}", command="changed") for i in range(a.steps)]).steps
        t = time.perf_counter()
        s.handle(submission(changed), 4.0)
        while s.entering():
            s.handle(EnterMore(), 4.0)
        resubmit_s = time.perf_counter() - t
    rev = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    if subprocess.run(["git", "-C", tree, "diff", "--quiet", "HEAD", "--", "."]).returncode:
        rev += "+changes"
    print(json.dumps(dict(tree=rev, nodes=a.nodes, steps=a.steps, before=before, after=s.counts(),
                          losses=len(losses), loss_total_s=round(sum(losses), 3),
                          loss_max_s=round(max(losses), 3) if losses else None,
                          loss_median_s=round(sorted(losses)[len(losses) // 2], 4) if losses else None,
                          cancelled=a.cancel, cancel_s=round(cancel_s, 3) if cancel_s is not None else None,
                          resubmit_s=round(resubmit_s, 3) if resubmit_s is not None else None,
                          python=platform.python_version())))


if __name__ == "__main__":
    main()
