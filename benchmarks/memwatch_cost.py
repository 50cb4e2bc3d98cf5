"""What the agent's memory watchdog costs a node: CPU per sample, and CPU % at its
sampling interval (fleet.node.memwatch.WATCH_S), with N steps running.

Each "step" is a real process in a process group of its own (a `sleep`, as a command
step is); the watchdog samples them exactly as an agent does (Enforcer.sample: one
pass over the node's processes, RSS of each watched group's members), with a limit none
reaches. CPU is this process's (user + system) over the samples.

    python benchmarks/memwatch_cost.py [--steps 1,16,64,256] [--samples 200]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import time

import psutil

from fleet.node import memlimit, memwatch


def measure(n: int, samples: int) -> dict:
    procs = [subprocess.Popen(["sleep", "600"], start_new_session=True) for _ in range(n)]
    try:
        enf = memwatch.Enforcer(memlimit.Choice(memlimit.WATCHDOG))
        for i, p in enumerate(procs):
            enf.watched[(f"s{i}", 1)] = memwatch.Watched(p.pid, 1 << 40)
        enf.sample()  # warm
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(samples):
            enf.sample()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        per = cpu / samples
        return dict(steps=n, processes_on_node=len(psutil.pids()), samples=samples,
                    cpu_ms_per_sample=round(per * 1000, 3), wall_ms_per_sample=round(wall / samples * 1000, 3),
                    cpu_percent_at_interval=round(100 * per / memwatch.WATCH_S, 2), interval_s=memwatch.WATCH_S)
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", default="1,16,64,256")
    ap.add_argument("--samples", type=int, default=200)
    args = ap.parse_args()
    rows = [measure(int(n), args.samples) for n in args.steps.split(",")]
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
