"""The pure scheduler core's CPU per step, per tree, trees alternated (issue 12's
<= 100 us of coordinator CPU per step, of which this is one part).

One process per tree (PYTHONPATH=tree, so each tree's fleet is the one imported)
drives a real fleet.core.scheduler.Scheduler as the coordinator does, with no I/O:
NODES nodes of 64 cores join; one submission of STEPS one-core steps comes in as a
Submitted of 2,000 steps a part (fleet.control.intake.CHUNK) and EnterMore until it
is in ("enter": per step); then loop turns, each one Exits of the steps that the turn
before started (all succeeded, in a fixed shuffled order: zero-length steps), with
the pass bounded to PASS starts (as a turn's worth: the pool never fills, every step
is placed by best fit as in benchmarks/control_scale.py), until every step is done
("cycle": per step). The window is the coordinator's default (the node's cores).
CPU time (time.process_time) of the handle() calls only; the collector is frozen
after the nodes join and the suite is read, as fleet.control.heap does for a
submission.

Besides the figures, each tree prints a digest (sha256) of the repr of every decision
of the run, in order: equal digests mean the trees decided exactly the same.

    python benchmarks/core_step.py --trees /tmp/base,. [--rounds 4] [--out FILE]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import random
import sys
import time
from pathlib import Path

import _trees  # noqa: E402

NODES, STEPS, PASS, CHUNK, REPEAT = 1000, 50_000, 200, 2000, 3


def _run() -> tuple[float, float, str]:
    from fleet.core.decisions import EnterMore, Entering, Exits, NodeJoined, StepExited, Submitted
    from fleet.core.resources import NodeSpec
    from fleet.core.scheduler import Scheduler
    from fleet.core.suite import parse_suite

    specs = tuple(parse_suite({"steps": [{"id": "s/{i}", "array": f"1-{STEPS}", "command": "true"}]},
                              Path("/run/s.toml")).steps)
    sched = Scheduler(window=None)
    sched.pass_starts = PASS
    digest = hashlib.sha256()
    for i in range(NODES):
        digest.update(repr(sched.handle(NodeJoined(NodeSpec(f"n{i:05d}", tuple(range(64)), (), 256 << 30)), 0.0))
                      .encode())
    gc.collect()
    gc.freeze()
    rng = random.Random(12)
    cpu = time.process_time
    now = 1.0
    t0 = cpu()
    out = sched.handle(Submitted(specs, {s.id: s.deps for s in specs}, frozenset(), chunk=CHUNK,
                                 order=tuple(s.id for s in specs)), now)  # (deps first: the coordinator's)
    while any(isinstance(d, Entering) and d.entered < d.total for d in out):
        digest.update(repr(out).encode())
        out = sched.handle(EnterMore(), now)
    enter = cpu() - t0
    cycle = 0.0
    while not sched.finished():
        digest.update(repr(out).encode())
        started = [d for d in out if type(d).__name__ in ("Start", "Begin")]
        rng.shuffle(started)
        now += 0.001
        ev = Exits(tuple(StepExited(d.step, d.attempt, "succeeded") for d in started))
        t0 = cpu()
        out = sched.handle(ev, now)
        cycle += cpu() - t0
    digest.update(repr(out).encode())
    return enter / STEPS * 1e6, cycle / STEPS * 1e6, digest.hexdigest()[:16]


def jobs() -> dict:
    """This tree's best us per step of each phase (of REPEAT runs), and its digest."""
    best: dict = {}
    digests = set()
    for _ in range(REPEAT):
        enter, cycle, digest = _run()
        digests.add(digest)
        best["enter (us/step)"] = round(min(enter, best.get("enter (us/step)", enter)), 2)
        best["cycle (us/step)"] = round(min(cycle, best.get("cycle (us/step)", cycle)), 2)
        gc.unfreeze()
        gc.collect()
    assert len(digests) == 1, digests  # the same run decides the same, every time
    best["digest"] = digests.pop()
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", help="comma-separated trees holding fleet/")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", default="")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(jobs()))
        return 0
    best = _trees.best_per_tree(__file__, args.trees, args.rounds)
    result = {"command": "python benchmarks/core_step.py " + " ".join(sys.argv[1:]), "rounds": args.rounds,
              "nodes": NODES, "steps": STEPS, "pass_starts": PASS, "chunk": CHUNK, "repeat": REPEAT,
              "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "loadavg": os.getloadavg(),
              "best": best,
              "total_us_per_step": {t: round(b["enter (us/step)"] + b["cycle (us/step)"], 2) for t, b in best.items()},
              "same_decisions": len({b["digest"] for b in best.values()}) == 1}
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
