"""A big allocation joining, in the pure scheduler and in `fleet simulate`: what each
node's join costs before anything is submitted (benchmarks/README.md, "fleet simulate on
a million pretend nodes")."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

from click.testing import CliRunner

from coretools import node, suite  # noqa: E402

from fleet.cli import main
from fleet.core.scheduler import NodeJoined, Scheduler, Start, submission

SIMULATE = str(Path("fleet", "core", "simulate.py"))


def test_nodes_that_join_before_anything_is_submitted_cost_no_scheduling_pass():
    # (each join ran a whole pass over nothing: 1,000,000 of them in `fleet simulate`)
    sched = Scheduler()
    for i in range(50):
        assert sched.handle(NodeJoined(node(f"n{i}", 2)), 0.0) == []
    assert sched._res.waiting.passno == 0  # (Reservations.begin counts the passes)
    out = sched.handle(submission(suite({"id": "a", "cores": 2}, {"id": "b", "cores": 2}).steps), 0.0)
    assert sorted(d.step for d in out if isinstance(d, Start)) == ["a", "b"]
    assert sched._res.waiting.passno == 1
    late = sched.handle(NodeJoined(node("late", 2)), 1.0)  # (once there are steps, a join is a pass as ever)
    assert late == [] and sched._res.waiting.passno == 2


def test_no_cyclic_collection_walks_the_heap_while_a_simulation_runs(tmp_path):
    # (each full collection walked every pretend node again: half the CPU time on 1,000,000 nodes)
    p = tmp_path / "s.toml"
    p.write_text('[suite]\nname = "s"\n[[steps]]\nid = "a"\ncommand = "x"\nestimate = 2\n')
    inside: list[int] = []

    def collecting(phase, info):
        f = sys._getframe(1)
        while phase == "start" and f is not None:
            if f.f_code.co_filename.endswith(SIMULATE) and f.f_code.co_name == "simulate":  # (not pretend_nodes)
                inside.append(info["generation"])
                return
            f = f.f_back
    gc.callbacks.append(collecting)
    try:
        r = CliRunner().invoke(main, ["simulate", str(p), "--nodes", "20000", "--cores-per-node", "2"])
    finally:
        gc.callbacks.remove(collecting)
    assert r.exit_code == 0, r.output
    assert "makespan" in r.output and inside == []
    assert gc.isenabled()  # (on again after it)
