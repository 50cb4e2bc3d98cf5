"""What-if (an experiment, not a mode of fleet): how much of the throughput in
startup_throughput.py goes to the coordinator's per-step files?

    python benchmarks/whatif_store_io.py      # writes benchmarks/results/whatif_store_io.json

For every step the coordinator claims it (fleet.control.store.claim: marker check, mkdir,
O_EXCL claim file, attempt count) before sending the Launch, and when it exits writes
an attempt record, the done marker and releases the claim, all before it decides the
next step. This runs the same 2,000 no-op steps as startup_throughput.py on two
coordinators side by side (alternating, three pairs): fleet as it is, and a
coordinator whose `store.claim` always answers "ours" and whose `record_attempt`,
`write_done` and `release` do nothing (patched in the coordinator process only; agents,
zygotes and steps unchanged). Written for the store API at the time (2026-11-30): if
those names change, update the patch below.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _nodebench as nb  # noqa: E402
from startup_throughput import write_suite  # noqa: E402

COORDINATOR = r"""
import sys
from fleet.control import coordinator
from fleet.control import store
if sys.argv[1] == "no-store-io":
    store.claim = lambda *a, **k: store.Claim(store.Claim.OURS)
    store.record_attempt = store.write_done = store.release = lambda *a, **k: None
sys.exit(coordinator.main(sys.argv[2:]))
"""


def one(mode: str, work: Path, steps: int) -> dict:
    run_dir = work / "run"
    run_dir.mkdir(parents=True)
    suite = work / "noop.toml"
    write_suite(suite, steps)
    env = nb.bench_env()
    # The arguments `fleet up` gives its coordinator (fleet.control.client.up).
    coord = subprocess.Popen(
        [sys.executable, "-c", COORDINATOR, mode, "--run-dir", str(run_dir), "--nodes", "2",
         "--machine", "local", "--preload", ",".join(nb.PRELOAD), "--connection-name", "fleet.json",
         "--join-timeout", "120"],
        env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    fleet = nb.Fleet(run_dir)
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "fleet.json").exists():
            if coord.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the {mode} coordinator did not come up")
            time.sleep(0.05)
        fleet.pids = {p.pid for p in fleet.processes()}
        r = nb.run(nb.fleet_cli("run", str(suite), "--run-dir", str(run_dir)), timeout=900, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if r.returncode:
            raise RuntimeError(f"fleet run exited {r.returncode} ({mode})")
    finally:
        leftovers = fleet.down()
        try:
            coord.wait(timeout=30)
        except subprocess.TimeoutExpired:
            nb.kill_group(coord.pid)
            coord.wait(timeout=10)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    starts = [e["t"] for e in events if e["kind"] == "start"]
    exits = [e for e in events if e["kind"] == "exit"]
    turn = []
    by_node: dict[str, list] = {}
    for e in exits:
        by_node.setdefault(e["node"], []).append(e)
    for recs in by_node.values():
        recs.sort(key=lambda e: e["decided_at"])
        turn += [b["decided_at"] - a["t"] for a, b in zip(recs, recs[1:])]
    return {"mode": mode, "steps_per_s": round(len(exits) / (max(e["t"] for e in exits) - min(starts)), 1),
            "startup_ms_median": round(nb.median([e["startup_s"] for e in exits]) * 1e3, 3),
            "coordinator_turnaround_ms_median": round(nb.median(turn) * 1e3, 3),
            "leftover_pids_killed": leftovers}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    res = {"benchmark": "whatif_store_io", "command": "python benchmarks/whatif_store_io.py",
           "date": nb.today(), "machine": nb.machine(), "steps": args.steps}
    runs = []
    with tempfile.TemporaryDirectory(prefix="fleet-bench-whatif-") as tmp:
        for k in range(args.pairs):
            for mode in ("as-is", "no-store-io"):
                print(f"{mode} ({k + 1}/{args.pairs}) ...", file=sys.stderr, flush=True)
                runs.append(one(mode, Path(tmp) / f"{mode}{k}", args.steps))
    pairs = [(runs[i], runs[i + 1]) for i in range(0, len(runs), 2)]
    gains = [b["steps_per_s"] / a["steps_per_s"] for a, b in pairs]
    res.update({"runs": runs, "gain_median": round(nb.median(gains), 3),
                "gains": [round(g, 3) for g in gains]})
    print(f"\n{'':24s} {'steps/s':>9s} {'start p50 ms':>13s} {'coordinator turnaround p50 ms':>30s}")
    for r in runs:
        print(f"{r['mode']:24s} {r['steps_per_s']:9.1f} {r['startup_ms_median']:13.2f} "
              f"{r['coordinator_turnaround_ms_median']:30.3f}")
    print(f"\nwithout the per-step store I/O: x{res['gain_median']:.2f} throughput (median of pairs {res['gains']})")
    if not args.no_write:
        print(f"wrote {nb.write_result('whatif_store_io', res).relative_to(nb.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
