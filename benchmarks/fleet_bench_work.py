"""A fixed amount of single-threaded numpy work, the same for every system that
peer_compare.py measures (module `fleet_bench_work`, importable by agents, zygotes,
the fork-floor loop and the Parsl workers when benchmarks/ is on PYTHONPATH).

Whoever imports it should have set OMP/OPENBLAS/MKL_NUM_THREADS=1 first (fleet's
children get their own thread count, 1 on a one-core pretend node, from fleet itself).
"""

import time

import numpy
import scipy.linalg  # noqa: F401  (the preloaded set: numpy and scipy.linalg)

SIZE = 128  # a 128 x 128 float64 matmul: ~4 MFLOP, well under 1 ms on one core


def matmul(n: int = SIZE, reps: int = 1) -> float:
    """`reps` products of two fixed n x n matrices (made afresh each call: part of the work)."""
    rng = numpy.random.default_rng(0)
    a, b = rng.random((n, n)), rng.random((n, n))
    c = a
    for _ in range(reps):
        c = a @ b
    return float(c[0, 0])


def calibrate(target_s: float = 0.005, n: int = SIZE) -> dict:
    """The reps of matmul(n, reps) that take `target_s` of this process's CPU, and what
    one call then costs (CPU and wall, median of 20 calls)."""
    matmul(n, 50)  # warm the BLAS (its buffers, the CPU's caches)
    t = time.process_time()
    matmul(n, 200)
    per_rep = (time.process_time() - t) / 200
    reps = max(1, round(target_s / per_rep))
    cpu, wall = [], []
    for _ in range(20):
        c0, w0 = time.process_time(), time.perf_counter()
        matmul(n, reps)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    cpu.sort()
    wall.sort()
    return {"n": n, "reps": reps, "cpu_s": cpu[10], "wall_s": wall[10]}
