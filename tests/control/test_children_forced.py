"""`fleet run --force` and the children of the steps it reruns, through the real `fleet`
CLI: real processes, real files. Before 2026-12-06 a forced parent ran again but every
child that had succeeded before was skipped (its marker still said done)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from children_steps import ran
from fleetharness import assert_nothing_left, fleet, write_suite
from fleet.wire import records

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fleet's nodes need Linux")

# p submits c0 and c1, each of which submits its own c0 and c1: 7 steps, 6 of them children.
NESTED = """
[[steps]]
id = "p"
call = "children_steps:parent"
args = { n = 2, depth = 1 }
"""
CHILDREN = ["p/c0", "p/c0/c0", "p/c0/c1", "p/c1", "p/c1/c0", "p/c1/c1"]


def runs_of_children(run_dir: Path) -> Counter:
    return Counter(x["step"] for x in ran(run_dir) if x["what"] in ("child", "submitted") and x["step"] != "p")


def audited(run_dir: Path, tmp_path: Path) -> dict:
    r = fleet("audit", str(run_dir), "--json", cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def test_fleet_run_force_runs_a_parents_children_again_and_their_records_say_forced(tmp_path):
    suite = write_suite(tmp_path / "s.toml", NESTED)
    run_dir = tmp_path / "run"

    def run(*extra: str):
        r = fleet("run", str(suite), "--run-dir", str(run_dir), *extra, cwd=tmp_path, timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    run()
    assert runs_of_children(run_dir) == Counter(dict.fromkeys(CHILDREN, 1))
    out = run("--force")
    assert "skipped" not in out and "7 succeeded" in out, out
    assert runs_of_children(run_dir) == Counter(dict.fromkeys(CHILDREN, 2))
    for step in CHILDREN:  # why it ran again, for fleet audit
        assert [a.get("rerun") for a in records.attempts(run_dir, step)] == ["", "forced"], step
    out = run("--force", "--only", "p")  # the parent selected: its family forced with it
    assert "skipped" not in out and "7 succeeded" in out, out
    assert runs_of_children(run_dir) == Counter(dict.fromkeys(CHILDREN, 3))
    audit = audited(run_dir, tmp_path)
    assert audit["ok"] and not audit["duplicates"], audit
    assert {s: audit["steps"][s]["reruns"] for s in ["p", *CHILDREN]} == dict.fromkeys(["p", *CHILDREN], 2)
    assert "1 already done" in run(), "a run without --force skips the parent, children and all"
    assert runs_of_children(run_dir) == Counter(dict.fromkeys(CHILDREN, 3))
    # Children that ran again were recorded in the journal, as the suite's steps are, not
    # claimed per step in files of their own (a later fleet then skipped the second --force).
    assert not sorted(run_dir.glob("steps/**/.fleet/attempt.*")), sorted(run_dir.glob("steps/**/.fleet/*"))
    assert_nothing_left(run_dir)


def test_on_a_live_fleet_a_forced_parent_reruns_its_children_once_even_when_it_is_retried(tmp_path):
    # Attempt 1 of p fails after submitting; attempt 2 submits the same children again:
    # those that ran for this forced run are not run a second time.
    suite = write_suite(tmp_path / "s.toml", """
[[steps]]
id = "p"
call = "children_steps:parent"
args = { n = 3, fail_once = true }
retries = 1
""")
    run_dir = tmp_path / "run"
    kids = ["p/c0", "p/c1", "p/c2"]
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True, timeout=60)
    try:
        for extra, times in (((), 1), (("--force",), 2), (("--force", "--only", "p"), 3), ((), 3)):
            r = fleet("run", str(suite), "--run-dir", str(run_dir), *extra, cwd=tmp_path, timeout=180)
            assert r.returncode == 0, r.stdout + r.stderr
            children = Counter(x["step"] for x in ran(run_dir) if x["what"] == "child")
            assert children == Counter(dict.fromkeys(kids, times)), (extra, children, r.stdout)
    finally:
        assert fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60).returncode == 0
    for step in kids:
        assert [a.get("rerun") for a in records.attempts(run_dir, step)] == ["", "forced", "forced"], step
    audit = audited(run_dir, tmp_path)
    assert audit["ok"] and not audit["duplicates"], audit
    assert_nothing_left(run_dir)
