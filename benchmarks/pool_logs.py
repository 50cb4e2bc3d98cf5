"""Memory the scheduler's pool keeps after a million steps have come and gone.

    PYTHONPATH=<tree> python benchmarks/pool_logs.py <label>

1,000 nodes of 64 cores, 64,000 one-core steps placed, then a million times one
released and another placed; tracemalloc counts what is allocated during the
million and still held at the end, and the pool's two change logs' lengths.
"""
import sys, tracemalloc, time
from fleet.core.resources import Pool, NodeSpec, Demand
pool = Pool()
for i in range(1000):
    pool.add(NodeSpec(f"n{i}", tuple(range(64)), (), 64 << 30))
d = Demand(1)
held = [pool.place(d) for _ in range(64000)]
tracemalloc.start()
t = time.process_time()
for k in range(1_000_000):
    pool.release(held[k % 64000]); held[k % 64000] = pool.place(d)
cpu = time.process_time() - t
cur, peak = tracemalloc.get_traced_memory()
print(f"{sys.argv[1]}: {cur/2**20:.1f} MiB held after 1M releases+places (peak {peak/2**20:.1f}); logs {len(pool.releases)}, {len(pool._changed)} entries")
