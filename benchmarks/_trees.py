"""Jobs timed per tree: `script --one` in a child process per tree (PYTHONPATH=tree, so
each tree's fleet is the one imported), trees alternated every round, each job's best
(lowest) figure kept. Shared by msg_path_jobs.py and start_bookkeeping.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
