"""A retried parent that submits its children again, changed, while one of them still
runs (defects found on 2026-12-07): the run ends, each child counted once, and a child
that ran on what a sibling made before that sibling ran again runs again after it.
Real `fleet run`s, each under a timeout; step functions in tests/children_steps.py."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from children_steps import ran
from fleetharness import assert_nothing_left, events, fleet, write_suite

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fleet's nodes need Linux")


def run(tmp_path: Path, call: str):
    suite = write_suite(tmp_path / "kids.toml", f"""[suite]
name = "kids"
run_dir = "kids"
[[steps]]
id = "p"
call = "children_steps:{call}"
retries = 1
""")
    return fleet("run", str(suite), "--nodes", "2", cwd=tmp_path, timeout=120), tmp_path / "kids"


def notes(run_dir: Path, step: str, what: str) -> list[dict]:
    return [x for x in ran(run_dir) if x["step"] == step and x["what"] == what]


def test_a_retried_parent_that_submits_a_running_child_again_changed_ends_with_each_child_counted_once(tmp_path):
    # (the child was listed twice in the submission, its end counted twice: "[2/2]" then
    # nothing, `fleet run` never returned and status said "5/4 finished (125%)")
    r, run_dir = run(tmp_path, "resubmits_changed")
    assert r.returncode == 0, r.stdout + r.stderr
    counted = re.findall(r"^\[\s*(\d+)/(\d+)\]\s+(\S+)\s+(\S+)", r.stdout, re.M)
    assert [c[1] for c in counted] == ["3"] * len(counted), r.stdout
    assert [(c[2], c[3]) for c in counted if c[2] != "retry"] == [
        ("succeeded", "p/c0"), ("succeeded", "p/c1"), ("succeeded", "p")], r.stdout
    assert "suite 'kids': 3 succeeded" in r.stdout, r.stdout
    # c0's first definition ran to its end, then its second; c1 waited, and ran once, as changed.
    assert [x["v"] for x in notes(run_dir, "p/c0", "child")] == [1, 2]
    assert [x["v"] for x in notes(run_dir, "p/c1", "child")] == [2]
    [resumed] = notes(run_dir, "p", "resumed")
    assert resumed["children"] == {"p/c0": "succeeded", "p/c1": "succeeded"}
    assert resumed["t"] > notes(run_dir, "p/c1", "ended")[-1]["t"]
    assert [e["outcome"] for e in events(run_dir) if e["kind"] == "exit" and e["step"] == "p/c0"] == [
        "succeeded", "succeeded"]
    assert_nothing_left(run_dir)


def test_a_running_child_whose_sibling_dep_its_retried_parent_changes_runs_again_on_the_deps_new_output(tmp_path):
    # (b, started on a's first output, was kept while a ran again: its success stood for
    # an output replaced since, and the parent's phase 1 went on with it)
    r, run_dir = run(tmp_path, "resubmits_dep_of_running")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "suite 'kids': 3 succeeded" in r.stdout, r.stdout
    assert [x["v"] for x in notes(run_dir, "p/a", "child")] == [1, 2]
    assert [x["saw"] for x in notes(run_dir, "p/b", "child")] == ["1", "2"]
    a_ended = notes(run_dir, "p/a", "ended")[-1]["t"]
    b_runs = notes(run_dir, "p/b", "child")
    assert b_runs[-1]["t"] > a_ended
    [resumed] = notes(run_dir, "p", "resumed")
    assert resumed["children"] == {"p/a": "succeeded", "p/b": "succeeded"}
    assert resumed["t"] > notes(run_dir, "p/b", "ended")[-1]["t"]
    assert_nothing_left(run_dir)
