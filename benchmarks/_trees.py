"""Jobs timed per tree: `script --one` in a child process per tree (PYTHONPATH=tree, so
each tree's fleet is the one imported), trees alternated every round, each job's best
(lowest) figure kept; and their command line (`main`). Shared by msg_path_jobs.py and
start_bookkeeping.py."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def best_per_tree(script: str, trees: str, rounds: int) -> dict[str, dict]:
    """{tree: {job: best us}} for the comma-separated `trees`."""
    paths = [str(Path(t).resolve()) for t in trees.split(",")]
    best: dict[str, dict] = {t: {} for t in paths}
    for r in range(rounds):
        for tree in (paths if r % 2 == 0 else paths[::-1]):
            env = dict(os.environ, PYTHONPATH=tree)
            out = subprocess.run([sys.executable, script, "--one"], env=env, capture_output=True, text=True,
                                 timeout=600, check=True, cwd="/")
            for job, us in json.loads(out.stdout).items():
                best[tree][job] = min(us, best[tree].get(job, us))
    return best


def main(script: str, jobs, rounds: int, total=lambda b: sum(b.values())) -> int:
    """A per-tree jobs benchmark's command line: `--trees A,B [--rounds N] [--out FILE]`
    prints (and writes) each tree's best per job and its `total` per step; `--one` (the
    child) prints this tree's `jobs()`."""
    ap = argparse.ArgumentParser(description=(sys.modules["__main__"].__doc__ or "").splitlines()[0])
    ap.add_argument("--trees", help="comma-separated trees holding fleet/")
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--out", default="")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(jobs()))
        return 0
    best = best_per_tree(script, args.trees, args.rounds)
    result = {"command": f"python benchmarks/{Path(script).name} " + " ".join(sys.argv[1:]), "rounds": args.rounds,
              "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "loadavg": os.getloadavg()[0],
              "us_per_call_best": best, "total_per_step": {t: round(total(b), 2) for t, b in best.items()}}
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0
