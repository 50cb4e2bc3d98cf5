"""What the coordinator's memory holds after a big run, by the line that allocated it.

    python benchmarks/coord_memory.py [--agents 100] [--steps 100000] [--repo DIR ...]

For each checkout (--repo, default this one; its benchmarks/ must have the tracemalloc hook
of _simagents.py) two runs of control_scale.py with simulated agents and zero-length steps:
- untraced: the coordinator's peak RSS (VmHWM), the figure that matters;
- under tracemalloc (FLEET_BENCH_TRACEMALLOC, benchmarks/_simagents.py): the Python
  objects it still holds when told to stop, every step done, by allocating line, and
  the traced peak. Tracing slows the run several times, so its timings mean nothing.

Writes results/coord_memory.json (and prints it). Bytes held per step = held / steps.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _run(repo: Path, agents: int, steps: int, traced: str | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="coordmem-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as tmp:
        out = Path(tmp) / "out.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_BENCH_TRACEMALLOC")}
        if traced:
            env["FLEET_BENCH_TRACEMALLOC"] = traced
        cmd = [sys.executable, str(repo / "benchmarks" / "control_scale.py"), "--agents", str(agents),
               "--steps", str(steps), "--duration", "0", "--agent-timeout", "120", "--timeout", "1500",
               "--idle", "2", "--work", str(Path(tmp) / "work"), "--out", str(out)]
        subprocess.run(cmd, env=env, cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=3000, check=True)
        return json.loads(out.read_text())


def _held(snap_path: str, steps: int, top: int) -> dict:
    stats = tracemalloc.Snapshot.load(snap_path).statistics("lineno")
    total = sum(s.size for s in stats)
    return {"held_mib": round(total / 2**20, 1), "held_bytes_per_step": round(total / steps),
            "top": [{"line": f"{Path(s.traceback[0].filename).as_posix().split('/fleet/', 1)[-1]}:{s.traceback[0].lineno}",
                     "mib": round(s.size / 2**20, 2), "blocks": s.count, "bytes_per_step": round(s.size / steps)}
                    for s in stats[:top]]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=100)
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--repo", action="append", help="checkouts to measure, in this order (default: this one)")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--out", default=str(HERE / "results" / "coord_memory.json"))
    args = ap.parse_args()
    runs = []
    for repo in [Path(r).resolve() for r in (args.repo or [str(HERE.parent)])]:
        commit = subprocess.run(["git", "-C", str(repo), "describe", "--always", "--dirty"],
                                capture_output=True, text=True).stdout.strip()
        plain = _run(repo, args.agents, args.steps, None)
        with tempfile.TemporaryDirectory(prefix="coordmem-snap-") as tmp:
            snap = f"{tmp}/coord.snap"
            traced = _run(repo, args.agents, args.steps, snap)
            peak = json.loads(Path(snap + ".json").read_text())
            held = _held(snap, args.steps, args.top)
        ok = plain["events"]["succeeded_steps"] == traced["events"]["succeeded_steps"] == args.steps
        runs.append({"repo": str(repo), "commit": commit, "all_succeeded": ok,
                     "peak_rss_mib": plain["coordinator_peak_rss_mib"],
                     "peak_rss_bytes_per_step": round(plain["coordinator_peak_rss_mib"] * 2**20 / args.steps),
                     "traced_peak_mib": round(peak["peak_traced_mib"], 1), **held})
    res = {"agents": args.agents, "steps": args.steps, "load_at_end": os.getloadavg()[0], "runs": runs,
           "command": "python benchmarks/coord_memory.py " + " ".join(sys.argv[1:])}
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))
    return 0 if all(r["all_succeeded"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
