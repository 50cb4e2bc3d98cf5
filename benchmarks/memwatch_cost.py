"""What the agent's memory watchdog costs a node: CPU per sample, and CPU % at its
sampling interval (fleet.node.memwatch.WATCH_S), with N steps running; and what each
of the counts of fleet.node.memmeasure costs per process.

Each "step" is a real process in a session of its own (a `sleep`, as a command step
is); the watchdog samples them exactly as an agent does (Enforcer.sample: one pass over
the node's processes, a getsid each, RSS of each watched step's processes), with a
limit none reaches. CPU is this process's (user + system) over the samples.

The counts (``--counts``): this process plays a zygote with numpy and scipy.linalg
preloaded and forks the step of the audit's finding (it touches 90 MiB, then forks 3
children that each touch 30 MiB more); each way of reading a process's memory is timed
on the step's first process and on one child, and the whole count of the step
(memmeasure.used) with a limit each bound decides, and one only smaps decides.

    python benchmarks/memwatch_cost.py [--steps 1,16,64,256] [--samples 200] [--counts]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import time

import psutil

from fleet.node import memlimit, memmeasure, memwatch

MIB = 1 << 20


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


def _cpu_ms(fn, n: int) -> float:
    fn()  # warm
    c0 = time.process_time()
    for _ in range(n):
        fn()
    return round((time.process_time() - c0) / n * 1000, 3)


def _the_step() -> tuple[int, list[int]]:
    """Fork the finding's step; (its pid, [its pid and its children's]) once all touched."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.setsid()
        data = b"\x01" * (90 * MIB)
        kids = []
        for _ in range(3):
            kid = os.fork()
            if kid == 0:
                own = b"\x02" * (30 * MIB)
                os.write(w, b"k")
                time.sleep(600)
                os._exit(len(data) + len(own) & 1)
            kids.append(kid)
        os.write(w, (" ".join(map(str, [os.getpid(), *kids])) + "\n").encode())
        time.sleep(600)
        os._exit(0)
    got = b""
    while got.count(b"k") < 3 or b"\n" not in got:
        got += os.read(r, 4096)
    return pid, [int(p) for p in got.replace(b"k", b"").split(b"\n")[0].split()]


def counts(samples: int) -> list[dict]:
    import numpy  # noqa: F401  (the zygote's preload)
    import scipy.linalg  # noqa: F401
    me = os.getpid()
    leader, pids = _the_step()
    try:
        rows = []
        for who, pid in (("the step's first process", pids[0]), ("a child of it", pids[1])):
            with open(f"/proc/{pid}/maps") as f:
                mappings = sum(1 for _ in f)
            inherited = memmeasure._parent_starts(me)
            rows.append(dict(process=who, mappings=mappings,
                             statm_ms=_cpu_ms(lambda: memmeasure.rss(pid), samples),
                             smaps_rollup_ms=_cpu_ms(lambda: memmeasure._rollup(pid), samples),
                             smaps_count_ms=_cpu_ms(lambda: memmeasure._by_mapping(pid, inherited), samples)))
        with open(f"/proc/{me}/maps") as f:
            zygote_mappings = sum(1 for _ in f)

        def fresh() -> None:  # each sample reads the zygote's maps anew (memmeasure.FRESH_S)
            memmeasure._parent = (float("-inf"), 0, frozenset())
        rows.append(dict(process="the zygote (its maps)", mappings=zygote_mappings,
                         maps_ms=_cpu_ms(lambda: fresh() or memmeasure._parent_starts(me), samples)))
        for limit, decided in ((1 << 40, "RSS"), (60 * MIB, "USS"), (400 * MIB, "PSS"), (150 * MIB, "smaps")):
            fresh()
            got = memmeasure.used(pids, limit, me)
            ms = _cpu_ms(lambda limit=limit: fresh() or memmeasure.used(pids, limit, me), samples)
            rows.append(dict(step="4 processes", limit_mib=limit // MIB, decided_by=decided,
                             counted_mib=round(got / MIB, 1), cpu_ms_per_sample=ms,
                             cpu_percent_at_interval=round(100 * ms / 1000 / memwatch.WATCH_S, 2)))
        return rows
    finally:
        os.killpg(leader, signal.SIGKILL)
        os.waitpid(leader, 0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", default="1,16,64,256")
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--counts", action="store_true", help="time the counts of fleet.node.memmeasure instead")
    args = ap.parse_args()
    if args.counts:
        rows = counts(args.samples)
    else:
        rows = [measure(int(n), args.samples) for n in args.steps.split(",")]
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
