"""The warm peer of peer_compare.py: Parsl's HighThroughputExecutor with 2 workers on
this machine, run as its own process (peer_compare starts it in a new process group
and afterwards kills whatever of it is left, by pid).

    python benchmarks/_parslpeer.py '{"kind": "noop"|"numpy", "steps": 2000, "size": 128,
                                      "reps": 45, "run_dir": DIR, "warm": 40}'

Prints one JSON line: the timed run's wall (first submit -> last result), and the CPU
time of every process of the peer over it (this driver, which holds Parsl's DataFlowKernel;
the interchange; the worker pool's manager and its 2 workers), found by pid before the
run. The caller's environment sets OMP/OPENBLAS/MKL_NUM_THREADS=1 and puts benchmarks/
on PYTHONPATH; the workers inherit both. Before timing, `warm` tasks of the same kind
run, so the workers have imported numpy, scipy.linalg and fleet_bench_work (warm).
"""

from __future__ import annotations

import json
import os
import sys
import time

import parsl
import psutil
from parsl.config import Config
from parsl.executors import HighThroughputExecutor
from parsl.providers import LocalProvider


@parsl.python_app
def noop():
    """Nothing: what is measured around it is the peer's own cost."""


@parsl.python_app
def numpy_work(size, reps):
    """The same work as fleet's step and the floor's child (Parsl sends the function's
    code, so the import is inside)."""
    import fleet_bench_work
    return fleet_bench_work.matmul(size, reps)


def processes(run_dir: str) -> dict[int, str]:
    """pid -> role of every process of this peer: us, our descendants (the interchange),
    and the worker pool, which LocalProvider starts in a process group of its own
    (found by its command line, which names our run directory)."""
    me = psutil.Process()
    out = {me.pid: "driver (DataFlowKernel)"}
    for p in me.children(recursive=True):
        out[p.pid] = "interchange" if "interchange" in " ".join(p.cmdline()) else "driver child"
    for p in psutil.process_iter():
        try:
            if run_dir in " ".join(p.cmdline()) and "process_worker_pool" in " ".join(p.cmdline()):
                out[p.pid] = "worker pool manager"
                # Its spawned processes: the 2 workers, and the multiprocessing Manager
                # server that holds the pool's tasks-in-progress dict (a round trip per task).
                for c in p.children(recursive=True):
                    out[c.pid] = "workers + pool's multiprocessing Manager server"
        except psutil.Error:
            continue
    return out


def cpu(pids: dict[int, str]) -> dict[int, float]:
    out = {}
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            out[pid] = t.user + t.system
        except psutil.Error:
            pass
    return out


def busy() -> float:
    """CPU seconds the whole machine has been busy (for the load everything else adds)."""
    ct = psutil.cpu_times()
    return sum(getattr(ct, f) for f in ct._fields if f not in ("idle", "iowait", "guest", "guest_nice"))


def main() -> int:
    cfg = json.loads(sys.argv[1])
    config = Config(
        executors=[HighThroughputExecutor(
            label="htex", max_workers_per_node=2, cores_per_worker=1, cpu_affinity="block",
            address="127.0.0.1", provider=LocalProvider(init_blocks=1, min_blocks=1, max_blocks=1))],
        run_dir=cfg["run_dir"], strategy="none", usage_tracking=0, initialize_logging=False)
    t = time.perf_counter()
    dfk = parsl.load(config)
    try:
        if cfg["kind"] == "noop":
            def submit():
                return noop()
        else:
            def submit():
                return numpy_work(cfg["size"], cfg["reps"])
        for f in [submit() for _ in range(cfg["warm"])]:
            f.result(timeout=120)
        ready_s = time.perf_counter() - t
        pids = processes(cfg["run_dir"])
        before, busy0 = cpu(pids), busy()
        t0 = time.perf_counter()
        futures = [submit() for _ in range(cfg["steps"])]
        submitted = time.perf_counter() - t0
        for f in futures:
            f.result(timeout=600)
        wall = time.perf_counter() - t0
        after, busy1 = cpu(pids), busy()
    finally:
        dfk.cleanup()
    by_role: dict[str, float] = {}
    for pid, role in pids.items():
        if pid in before and pid in after:
            by_role[role] = by_role.get(role, 0.0) + after[pid] - before[pid]
    print(json.dumps({"steps": cfg["steps"], "wall_s": wall, "submit_s": submitted, "ready_s": ready_s, "machine_busy_s": busy1 - busy0,
                      "workers": 2, "cpu_s": by_role, "pids": sorted(pids)}), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PARSL_TRACKING", "false")
    sys.exit(main())
