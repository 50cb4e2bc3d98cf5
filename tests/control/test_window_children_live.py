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


def test_a_waiting_parents_children_and_its_resumption_start_before_the_steps_queued_behind_it(tmp_path):
    # The waitwindow audit's s1 (default window): the node started i1, queued behind p, as p
    # exited to wait; the children then queued behind unrelated steps, and the resumed
    # parent too (p ended two whole steps late). The suite reference: children run
    # depth-first, before new top-level work of the same priority; a step that goes on
    # runs before new ones of its priority start.
    body = """
[[steps]]
id = "p"
call = "children_steps:waves"
args = { durs = [1.0, 1.0], s = 0.5 }
[[steps]]
id = "i{i}"
array = "0-3"
call = "children_steps:nap"
args = { s = 3.0 }
"""
    suite = tmp_path / "s1.toml"
    suite.write_text(f'[suite]\nname = "s1"\nrun_dir = "s1"\n{body}')
    r = fleet("run", str(suite), "--nodes", "2", cwd=tmp_path, timeout=120)
    run_dir = tmp_path / "s1"
    assert r.returncode == 0, r.stdout + r.stderr
    recs = sorted(enumerate(events(run_dir)), key=lambda ie: (ie[1]["t"], ie[0]))  # (recorded order on ties)
    order = [(e["kind"], e["step"]) for _, e in recs if e["kind"] in ("start", "exit", "queued")]
    assert ("queued", "i1") in order  # the window was used: i1 handed to p's node behind it
    waited = order.index(("exit", "p"))
    starts = [s for k, s in order[waited:] if k == "start"]
    assert starts.index("p/w0c0") < min(starts.index(i) for i in starts if i.startswith("i")), order
    assert starts.index("p/w0c1") < min(starts.index(i) for i in starts if i.startswith("i")), order
    assert starts.index("p") < min(starts.index(i) for i in starts if i.startswith("i")), order
    assert set(ends(run_dir).values()) == {1} and len(ends(run_dir)) == 7
    assert_nothing_left(run_dir)
