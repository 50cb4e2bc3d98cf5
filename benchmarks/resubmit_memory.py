"""The coordinator's memory as the same suite is submitted again and again to one
long-lived fleet (a notebook's or a driver script's way), every step already done.

    python benchmarks/resubmit_memory.py [--steps 1000] [--submissions 40] [--work DIR]

Brings a local fleet of 2 nodes up (`fleet up --local --nodes 2 --run-dir DIR/run`),
runs a suite of --steps steps (`true` each) once with `fleet run`, then `fleet run`s
it --submissions times more (all skipped), and after each prints the coordinator's
RSS (VmRSS of its pid, from the connection file) and what its status says it keeps
(`submissions_kept`). Takes the fleet down at the end. Uses the fleet on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def fleet(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "fleet", *args], capture_output=True, text=True, timeout=timeout)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--submissions", type=int, default=40)
    ap.add_argument("--work", default="")
    a = ap.parse_args()
    work = Path(a.work or tempfile.mkdtemp(prefix="resubmit-"))
    work.mkdir(parents=True, exist_ok=True)
    run = work / "run"
    suite = work / "suite.toml"
    suite.write_text(f'[suite]\nname = "resubmit"\nrun_dir = "{run}"\n\n'
                     f'[[steps]]\nid = "s/{{i}}"\narray = "1-{a.steps}"\ncommand = "true"\n')
    up = fleet("up", "--local", "--nodes", "2", "--run-dir", str(run))
    if up.returncode:
        sys.exit(up.stderr)
    try:
        pid = json.loads((run / "fleet.json").read_text())["pid"]
        print(f"up: {rss_mb(pid):.1f} MB", flush=True)
        for i in range(a.submissions + 1):
            r = fleet("run", str(suite), "--run-dir", str(run))
            if r.returncode:
                sys.exit(r.stdout + r.stderr)
            st = json.loads(fleet("status", "--json", "--run-dir", str(run)).stdout)
            print(f"submission {i + 1}: {rss_mb(pid):.1f} MB  kept: {st.get('submissions_kept')}", flush=True)
    finally:
        fleet("down", "--run-dir", str(run))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
