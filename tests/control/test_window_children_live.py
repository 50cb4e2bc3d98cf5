"""The node window with steps that wait for their children (fleet.core.phases,
fleet.core.windoworder, fleet.node.queued), through the real CLI: real processes, order
and counts read from events.jsonl, no timing thresholds. Step functions live in
tests/children_steps.py."""

from __future__ import annotations

import collections
import sys

import pytest
from fleetharness import assert_nothing_left, events, fleet

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fleet's nodes need Linux")


def ends(run_dir) -> collections.Counter:
    """How often each step ended for good (its exits other than going on)."""
    return collections.Counter(e["step"] for e in events(run_dir) if e["kind"] == "exit" and e["outcome"] != "wait")


def test_a_chain_three_deep_around_waiting_parents_finishes_and_every_step_ends_once(tmp_path):
    # The waitwindow audit's s6r: with --window-depth 3 the core took back i3 from the middle
    # of i1 -> i3 -> q/w0c1 -> p/w0c0 on node2, the node queued it again behind p/w0c0 and
    # its zygote walked that cycle for ever (100% CPU): the run never ended.
    body = """
[[steps]]
id = "p"
call = "children_steps:waves"
args = { durs = [0.5, 4.0] }
[[steps]]
id = "q"
call = "children_steps:waves"
args = { durs = [0.3, 0.3], waves = 2, nested = true }
[[steps]]
id = "d"
call = "children_steps:nap"
args = { s = 0.1 }
deps = ["p", "q"]
[[steps]]
id = "i{i}"
array = "0-3"
call = "children_steps:nap"
args = { s = 1.0 }
"""
    suite = tmp_path / "s6.toml"
    suite.write_text(f'[suite]\nname = "s6"\nrun_dir = "s6"\n{body}')
    r = fleet("run", str(suite), "--nodes", "2", "--window-depth", "3", cwd=tmp_path, timeout=120)
    run_dir = tmp_path / "s6"
    assert r.returncode == 0, r.stdout + r.stderr
    assert any(e["kind"] == "queued" for e in events(run_dir))  # the window was used
    done = ends(run_dir)
    assert set(done.values()) == {1} and len(done) == 15, done  # p, q and their children, q/w0c0's, d, i0-i3
    assert_nothing_left(run_dir)
