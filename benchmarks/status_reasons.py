"""What `fleet status`'s "ready, not started" part costs the coordinator: the first step
of each class of demand (fleet.core.queueview) with its reason, and the reservations,
against the number of ready steps and of classes.

    python benchmarks/status_reasons.py      # writes benchmarks/results/status_reasons.json

A real Scheduler, built through its handlers: one node of 64 cores holding one step of
all 64 (so nothing else starts), then READY steps submitted, spread over CLASSES
distinct core counts (each a class of demand), and one pass so each class's first step
has its Wait. Timed: Scheduler.waiting_heads(now, 50) and reservations(), the calls
the status answer makes, median of 21, in this process (the loop's own thread does the
same work).
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "core"))
from coretools import node, suite  # noqa: E402

from fleet.control.status import STATUS_READY  # noqa: E402
from fleet.core.scheduler import NodeJoined, Scheduler, StepExited, submission  # noqa: E402

CASES = ((10_000, 1), (10_000, 64), (200_000, 1), (200_000, 64))


def build(ready: int, classes: int) -> Scheduler:
    sched = Scheduler()
    sched.handle(NodeJoined(node("n1", 64)), 0.0)
    sched.handle(submission(suite({"id": "all", "cores": 64, "estimate": 100}).steps), 0.0)
    tables = ({"id": f"s{i}", "cores": 1 + i % classes} for i in range(ready))
    sched.handle(submission(suite(*tables).steps), 1.0)
    sched.handle(StepExited("missing", 1, "succeeded"), 2.0)  # (ignored: a pass, nothing frees)
    return sched


def timed(fn, reps: int = 21) -> float:
    runs = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return statistics.median(runs)


def main() -> None:
    rows = []
    for ready, classes in CASES:
        sched = build(ready, classes)
        assert sched.counts().get("ready") == ready
        heads = timed(lambda: sched.waiting_heads(10.0, STATUS_READY))
        res = timed(sched.reservations)
        rows.append({"ready": ready, "classes": classes, "listed": len(sched.waiting_heads(10.0, STATUS_READY)),
                     "waiting_heads_us": round(heads * 1e6, 1), "reservations_us": round(res * 1e6, 2)})
        print(rows[-1], flush=True)
    out = {"benchmark": "status_reasons", "command": "python benchmarks/status_reasons.py",
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "python": platform.python_version(),
           "rows": rows}
    path = Path(__file__).resolve().parent / "results" / "status_reasons.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
