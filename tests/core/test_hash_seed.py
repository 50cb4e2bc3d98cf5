"""Determinism across processes: the same suite on the same allocation makes the same
decisions whatever the interpreter's string hash seed. The core's other determinism
tests compare two runs in one process, where every set of step ids iterates the same
way both times; a decision that depended on such an order would differ only between
processes with different PYTHONHASHSEED values, which is what every new fleet is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Runs in a child process: benchmarks/aurora_whatif.py's seeded workload (chains,
# fan-in ensembles around wide MPI steps, GPU batches; some steps too wide for this
# allocation) on 24 of its nodes, simulated with the decision log kept, in several of
# the scheduler's modes. Prints, per mode, the decision count and a digest of every
# (time, decision) in order.
CHILD = r"""
import hashlib, json, sys
sys.path.insert(0, "benchmarks")
from aurora_whatif import aurora_nodes, workload
from fleet.core.graph import build_graph
from fleet.core.simulate import simulate

steps = workload(4000)
graph, _ = build_graph(steps)
nodes = aurora_nodes(24)
modes = {
    "setup, reservations, windows of depth 2": dict(window=None, depth=2),
    "defer-widest, 2 reservations ahead": dict(order="defer-widest", reserve_ahead=2),
    "critical-then-smallest, no reservations, drained at the end": dict(
        order="critical-then-smallest", reserve_after=None, end_s=20000.0, drain_before_s=600.0),
}
out = {}
for name, kw in modes.items():
    r = simulate(steps, graph, nodes, keep_log=True, **kw)
    h = hashlib.sha256()
    for now, d in r.log:
        h.update(f"{now!r} {d!r}\n".encode())
    out[name] = [r.decisions, round(r.makespan_s, 3), h.hexdigest()]
print(json.dumps(out))
"""


def _decisions(seed: str) -> dict:
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=600, start_new_session=True)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_the_same_suite_makes_the_same_decisions_under_any_hash_seed():
    runs = {seed: _decisions(seed) for seed in ("1", "2", "4242")}
    first = runs["1"]
    assert len(first) == 3 and all(count > 1000 for count, _, _ in first.values()), first
    for seed, run in runs.items():
        assert run == first, (seed, run, first)
