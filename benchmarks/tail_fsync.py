"""A finished submission's last fsync, on a filesystem whose fsyncs are slow: how long
`fleet status` waits in the submission's tail, and how long the tail lasts.

    python benchmarks/tail_fsync.py --trees /tmp/base,. [--sleeps 200,2000] [--rounds 2] [--out FILE]

For each tree (PYTHONPATH=tree, so that tree's fleet runs), each emulated fsync time
(`FLEET_TEST_FSYNC_SLEEP_MS`, slept in every fsync of the journal) and each round: `fleet
up --local --nodes 1` in a fresh directory, `fleet run` of 4 steps of 0.1 s, and a
`Status` asked every 50 ms meanwhile from this process. The tail is from the first
answer that counts all 4 succeeded to the run's exit: `fleet run` returns only once
its outcomes are durable. Reported per run: the tail's length, its answers' count and
slowest, and the slowest answer of the whole run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fleet.control.client import Client, FleetError, find
from fleet.wire import messages as P

SUITE = """[suite]
name = "tail"
run_dir = "{run}"
[[steps]]
id = "t/{{i}}"
array = "1-4"
command = "sleep 0.1"
"""


def one(tree: str, sleep_ms: int) -> dict:
    env = dict(os.environ, PYTHONPATH=tree, FLEET_TEST_FSYNC_SLEEP_MS=str(sleep_ms))
    with tempfile.TemporaryDirectory() as d:
        run = Path(d) / "run"
        suite = Path(d) / "s.toml"
        suite.write_text(SUITE.format(run=run))
        fleet = [sys.executable, "-m", "fleet"]
        subprocess.run([*fleet, "up", "--local", "--nodes", "1", "--run-dir", str(run)], env=env, cwd=d,
                       check=True, capture_output=True, timeout=120, start_new_session=True)
        runner = None
        try:
            client = Client(find(run))  # (this tree's client: the protocol is the same)
            runner = subprocess.Popen([*fleet, "run", str(suite), "--run-dir", str(run)], env=env, cwd=d,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      start_new_session=True)
            answers, tail_from, deadline = [], None, time.monotonic() + 120
            while runner.poll() is None and time.monotonic() < deadline:
                t0 = time.monotonic()
                try:
                    counts = client.ask(P.Status(), timeout=60).status.get("counts", {})
                except FleetError:
                    counts = {}
                took = time.monotonic() - t0
                if counts.get("succeeded") == 4 and tail_from is None:
                    tail_from = t0
                answers.append((t0, took, tail_from is not None))
                time.sleep(0.05)
            runner.communicate(timeout=120)
            ended = time.monotonic()
            client.close()
        finally:
            if runner is not None and runner.poll() is None:
                os.killpg(runner.pid, 9)
                runner.communicate(timeout=30)
            subprocess.run([*fleet, "down", "--run-dir", str(run)], env=env, cwd=d, capture_output=True,
                           timeout=120, start_new_session=True)
        tail = [took for _, took, in_tail in answers if in_tail]
        return {"code": runner.returncode, "tail_s": round(ended - tail_from, 3) if tail_from else None,
                "tail_answers": len(tail), "tail_slowest_s": round(max(tail), 3) if tail else None,
                "run_slowest_s": round(max(took for _, took, _ in answers), 3) if answers else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", default=".")
    ap.add_argument("--sleeps", default="200,2000")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    trees = [str(Path(t).resolve()) for t in args.trees.split(",")]
    runs = []
    for ms in (int(x) for x in args.sleeps.split(",")):
        for r in range(args.rounds):
            for tree in trees:  # alternated
                runs.append({"tree": tree, "fsync_ms": ms, "round": r + 1, **one(tree, ms)})
                print(json.dumps(runs[-1]), flush=True)
    result = {"command": "python benchmarks/tail_fsync.py " + " ".join(sys.argv[1:]),
              "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "loadavg": os.getloadavg(), "runs": runs}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
