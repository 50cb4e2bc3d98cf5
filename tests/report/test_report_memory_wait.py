"""A step that declares memory and waits for it, through a real `fleet run` on this
machine's one node and `fleet report`: its wait is for memory, not for "a node that
would hold it whole" (the scheduler said whole_node of every step that declared memory,
and the report's reclassification, rebuilding the free resources just after that
instant, already counted a step the same pass started after it)."""

from __future__ import annotations

import json
import os

from fleetharness import assert_nothing_left, events, fleet, write_suite

from fleet.core import waits as W
from fleet.node.probe import node_memory


def test_a_step_declaring_memory_that_a_free_core_could_take_waited_for_memory_on_a_one_node_fleet(tmp_path):
    # One node (this machine's cores, its available memory M): "m1" and "m2" each declare
    # 0.6 M (both cannot run at once, either can alone: the probe's M may move a little);
    # "m4" declares 0.05 M and takes the second core in the pass where "m2" waits.
    if (os.cpu_count() or 1) < 2 or node_memory() < 2**30:
        import pytest
        pytest.skip("needs 2 cores and 1 GiB of available memory")
    big, small = int(node_memory() * 0.6), int(node_memory() * 0.05)
    suite = write_suite(tmp_path / "s.toml", f'''
[suite]
name = "memwait"
[defaults]
command = "sleep 1"
estimate = 1
[[steps]]
id = "m1"
memory = {big}
[[steps]]
id = "m2"
memory = {big}
[[steps]]
id = "m4"
memory = {small}
''')
    run_dir = tmp_path / "run"
    fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=120)
    waits = [e for e in events(run_dir) if e.get("kind") == "wait" and e.get("step") == "m2"]
    assert waits and waits[0].get("cause") == W.MEMORY, waits
    j = json.loads(fleet("report", str(run_dir), "--json", cwd=tmp_path, check=True, timeout=60).stdout)
    assert "memory" in j["waits"] and "whole node" not in j["waits"], j["waits"]
    text = fleet("report", str(run_dir), cwd=tmp_path, check=True, timeout=60).stdout
    assert "a node that would hold it whole" not in text, text
    assert_nothing_left(run_dir)
