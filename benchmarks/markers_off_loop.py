"""Done markers written off the coordinator's loop (fleet.control.markwriter): the
coordinator's CPU and its loop thread's CPU per step, base tree against this one, and a
slow filesystem emulated (each marker's write sleeps FLEET_TEST_MARKER_SLEEP_MS ms),
markers on the loop (FLEET_MARKER_THREADS=0) against off it.

    python benchmarks/markers_off_loop.py --base /path/to/base/tree [--rounds 2]
        [--agents 1000] [--steps 100000] [--slow-ms 1] [--only cpu|slow]

Each case runs a tree's own copy of benchmarks/control_scale.py (PYTHONPATH = that
tree) with --out; the cases alternate (base first), `--rounds` times each. The base
tree needs this tree's control_scale.py (it measures the loop thread's CPU): copied
into it for the run if it lacks loop_cpu_s. Writes results/markers_off_loop.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _scale_extra import run_scale  # noqa: E402

REPO = HERE.parent
KEYS = ("steps_per_s_end_to_end", "starts_per_s", "starts_per_s_after_submission", "coordinator_cpu_us_per_step",
        "coordinator_cpu_us_per_step_after_submission", "coordinator_loop_cpu_us_per_step_after_submission",
        "wall_s")


def one(tree: Path, label: str, extra_env: dict, args, k: int) -> dict:
    work = Path(f"/dev/shm/markwriter-bench-{os.getpid()}-{k}")
    out = work.with_suffix(".json")
    cmd = [sys.executable, str(tree / "benchmarks" / "control_scale.py"), "--agents", str(args.agents), "--steps",
           str(args.steps), "--duration", "0", "--idle", str(args.idle), "--agent-timeout", "120", "--timeout",
           str(args.timeout), "--work", str(work), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(tree), **extra_env}
    t0 = time.time()
    r, code = run_scale(cmd, env, work, out, args.timeout + 120)
    run = r.get("run") or {}
    row = {"case": label, "tree": str(tree), "env": extra_env, "exit": code, "t": t0,
           **{key: r.get(key) for key in KEYS},
           # Submit -> the Progress answer that said done (polled each second): includes the
           # wait for the submission's markers to be written.
           "done_polled_s": round(run["t_done_polled"] - run["t_submit"], 1) if run.get("t_done_polled") else None,
           "status_during_run": run.get("status_during_run"), "coordinator_loop": run.get("coordinator_loop"),
           "each_step_once": (r.get("events") or {}).get("each_step_once"),
           "loadavg": [run.get("loadavg_at_submit"), run.get("loadavg_at_done")], "error": r.get("error")}
    print(json.dumps(row), flush=True)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the base tree (a checkout of main)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--idle", type=float, default=2.0)
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--slow-ms", type=float, default=1.0)
    ap.add_argument("--only", default="", help="cpu or slow (default both)")
    ap.add_argument("--out", default=str(HERE / "results" / "markers_off_loop.json"))
    args = ap.parse_args(argv)
    base = Path(args.base).resolve()
    script = base / "benchmarks" / "control_scale.py"
    if "loop_cpu_s" not in script.read_text():
        shutil.copy(HERE / "control_scale.py", script)  # (the measuring script only; base's fleet)
    cases = []
    if args.only in ("", "cpu"):
        cases += [(base, "base", {}), (REPO, "markers off the loop", {})]
    if args.only in ("", "slow"):
        ms = {"FLEET_TEST_MARKER_SLEEP_MS": f"{args.slow_ms:g}"}
        cases += [(REPO, f"{args.slow_ms:g} ms a file, on the loop", {**ms, "FLEET_MARKER_THREADS": "0"}),
                  (REPO, f"{args.slow_ms:g} ms a file, off the loop", ms)]
    rows = []
    k = 0
    for _ in range(args.rounds):
        for tree, label, extra in cases:
            k += 1
            rows.append(one(tree, label, extra, args, k))
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    base_commit = subprocess.run(["git", "-C", str(base), "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True).stdout.strip()
    res = {"benchmark": "markers_off_loop", "command": "python benchmarks/markers_off_loop.py " + " ".join(
        argv if argv is not None else sys.argv[1:]), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit, "base_commit": base_commit, "cpus": os.cpu_count(), "rows": rows}
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
