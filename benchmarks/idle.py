"""Node agents (d): what an idle fleet costs in CPU.

    python benchmarks/idle.py                 # writes benchmarks/results/idle.json
    python benchmarks/idle.py --seconds 60    # a longer window

`fleet up --nodes 2 --preload numpy,scipy.linalg`, nothing submitted; after a short
settle, the CPU time of the coordinator, both agents and both zygotes is read at the
start and end of the window from /proc/PID/task/*/schedstat (nanoseconds on a CPU,
every thread: libzmq's I/O threads too; psutil's cpu_times, in 10 ms ticks, is kept
as a cross-check), with their context switches (wakeups). Target (issue 3): the
whole fleet under 1% of one core.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _nodebench as nb  # noqa: E402


def task_totals(pid: int) -> tuple[float, int, int]:
    """(CPU seconds, context switches, threads) summed over every thread of pid, from
    /proc/PID/task/*/schedstat (nanoseconds on CPU) and .../status."""
    cpu_ns = switches = threads = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            cpu_ns += int((task / "schedstat").read_text().split()[0])
            for line in (task / "status").read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    switches += int(line.split()[1])
            threads += 1
        except (OSError, ValueError, IndexError):
            pass  # a thread that just ended
    return cpu_ns / 1e9, switches, threads


def window(roles: dict[int, str], seconds: float) -> tuple[dict, float]:
    procs = {pid: psutil.Process(pid) for pid in roles}

    def snap():
        out = {}
        for pid, p in procs.items():
            t = p.cpu_times()
            out[pid] = (*task_totals(pid), t.user + t.system)
        return out

    a, t0 = snap(), time.perf_counter()
    time.sleep(seconds)
    b, t1 = snap(), time.perf_counter()
    wall = t1 - t0
    per = {}
    for pid, role in roles.items():
        cpu = b[pid][0] - a[pid][0]
        per[f"{role} ({pid})"] = {"cpu_s": round(cpu, 5), "pct_of_core": round(100 * cpu / wall, 4),
                                  "psutil_cpu_times_s": round(b[pid][3] - a[pid][3], 3),
                                  "wakeups_per_s": round((b[pid][1] - a[pid][1]) / wall, 1),
                                  "threads": b[pid][2]}
    return per, wall


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--settle", type=float, default=3.0)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    res = {"benchmark": "idle", "command": "python benchmarks/idle.py"
           + (f" --seconds {args.seconds:g}" if args.seconds != 20 else ""),
           "date": nb.today(), "machine": nb.machine(), "preload": list(nb.PRELOAD),
           "measure": "CPU: /proc/PID/task/*/schedstat run time deltas over the window (all "
                      "threads); wakeups: voluntary+nonvoluntary context switches, all threads"}
    with tempfile.TemporaryDirectory(prefix="fleet-bench-idle-") as tmp:
        fleet = nb.Fleet(Path(tmp) / "run", nodes=2)
        fleet.up()
        try:
            roles = fleet.roles()
            time.sleep(args.settle)
            per, wall = window(roles, args.seconds)
        finally:
            res["leftover_pids_killed"] = fleet.down()
    total = sum(v["cpu_s"] for v in per.values())
    res.update({"window_s": round(wall, 2), "settle_s": args.settle, "processes": per,
                "total_cpu_s": round(total, 4), "total_pct_of_core": round(100 * total / wall, 3),
                "target_pct_of_core": 1.0, "target_met": 100 * total / wall < 1.0})
    print(f"\nidle fleet (fleet up --nodes 2), {wall:.1f} s window:")
    print(f"{'':28s} {'CPU s':>8s} {'% core':>8s} {'wakeups/s':>10s} {'threads':>8s}")
    for name, v in per.items():
        print(f"{name:28s} {v['cpu_s']:8.3f} {v['pct_of_core']:8.3f} {v['wakeups_per_s']:10.1f} {v['threads']:8d}")
    print(f"{'total':28s} {total:8.3f} {res['total_pct_of_core']:8.3f}")
    print(f"\nidle fleet uses {res['total_pct_of_core']:.2f}% of one core "
          f"(target < 1%: {'met' if res['target_met'] else 'MISSED'})")
    if res["leftover_pids_killed"]:
        print(f"WARNING: fleet down left {res['leftover_pids_killed']} (killed)")
    if not args.no_write:
        print(f"wrote {nb.write_result('idle', res).relative_to(nb.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
