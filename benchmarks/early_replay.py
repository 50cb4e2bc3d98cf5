"""The coordinator's held reports of queued steps handed over many turns (fleet.control.early).

    python benchmarks/early_replay.py [--held 20000,100000] [--work-us 100] [--rev REV]
                                                             # results/early_replay.json

A pass that makes thousands of queued steps run at once (a full node window at 10,000
nodes) frees their held Started reports together; the coordinator hands them on over
several turns, each up to its time (50 ms here). Each report's handler is emulated by
spinning WORK_US of CPU (the coordinator's handling of a Started is of that order at
1,000 agents). Measured: the process CPU of all the replays less the handlers' spin,
per report handed, for this tree's fleet.control.early and for the one at REV (git show,
loaded as a module beside it). The scheduler is a stand-in that says every step runs:
this measures Early's own bookkeeping, not the scheduler.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fleet.wire import messages as P  # noqa: E402

TURN_S = 0.05


class Running:
    """Every step has left the queue: all its reports may be handed."""

    @staticmethod
    def state_of(step):
        return "running"


def early_at(rev: str):
    """fleet.control.early as it is at `rev`, loaded under another name."""
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:fleet/control/early.py"], check=True,
                          capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "early_old.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("early_old", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def measure(mod, held: int, work_s: float) -> dict:
    early = mod.Early()
    for i in range(held):
        early.held.append(("n", P.Started(step=f"s{i}", attempt=1, pid=1, pgid=1, at=0.0), 0.0))
        early.steps[f"s{i}"] = 1

    def handle(node, msg, now):
        end = time.perf_counter() + work_s
        while time.perf_counter() < end:
            pass
    turns, t0 = 0, time.process_time()
    while early:
        early.replay(Running(), handle, handle, lambda: None, time.monotonic() + TURN_S)
        turns += 1
    cpu = time.process_time() - t0
    return {"held": held, "turns": turns, "cpu_s": round(cpu, 3),
            "overhead_us_per_report": round((cpu - held * work_s) / held * 1e6, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--held", default="20000,100000")
    ap.add_argument("--work-us", type=float, default=100.0)
    ap.add_argument("--rev", default="f55e1a6", help="the tree to compare with (its early.py)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "early_replay.json"))
    a = ap.parse_args()
    import fleet.control.early as now
    trees = {a.rev: early_at(a.rev), "this tree": now}
    rows = [dict(tree=name, **measure(mod, int(n), a.work_us / 1e6))
            for n in a.held.split(",") for name, mod in trees.items()]
    for r in rows:
        print(f"{r['tree']:>10}  {r['held']:>7} held  {r['turns']:>4} turns  "
              f"{r['overhead_us_per_report']:>7} us a report besides its handler")
    Path(a.out).write_text(json.dumps({"command": " ".join(["python", "benchmarks/early_replay.py", *sys.argv[1:]]),
                                       "work_us": a.work_us, "turn_s": TURN_S, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
