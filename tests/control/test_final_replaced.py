"""A step that failed and later succeeded keeps its done marker alone: the final.json of
the failure goes with the marker's write (the user guide: a step's .fleet directory
holds done.json or final.json), whether the success comes in a new fleet (which found
the final.json listing the step's directory at submission) or in the fleet that wrote
it (fleet up, two runs)."""

from __future__ import annotations

import json

from fleetharness import assert_nothing_left, fleet, write_suite

from fleet.wire import records

SUITE = """
[suite]
name = "again"
[[steps]]
id = "needs-flag"
command = "test -e {flag}"
[[steps]]
id = "other"
command = "true"
"""


def files(run_dir, step: str) -> set[str]:
    d = records.fleet_dir(run_dir, step)
    return {p.name for p in d.iterdir()} & {records.DONE, records.FINAL}


def test_a_failed_step_that_succeeds_in_a_later_fleet_keeps_its_done_marker_and_no_final(tmp_path):
    run_dir, flag = tmp_path / "run", tmp_path / "flag"
    suite = write_suite(tmp_path / "s.toml", SUITE.format(flag=flag))
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, timeout=90)
    assert r.returncode != 0 and files(run_dir, "needs-flag") == {records.FINAL}, r.stdout + r.stderr
    flag.touch()
    fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True, timeout=90)
    assert files(run_dir, "needs-flag") == {records.DONE}
    assert files(run_dir, "other") == {records.DONE}
    a = json.loads(fleet("audit", str(run_dir), "--json", cwd=tmp_path, timeout=60).stdout)
    assert a["steps"]["needs-flag"]["status"] == "succeeded" and a["steps"]["needs-flag"]["attempts"] == 2
    assert_nothing_left(run_dir)


def test_a_failed_step_that_succeeds_in_the_same_fleet_keeps_its_done_marker_and_no_final(tmp_path):
    run_dir, flag = tmp_path / "run", tmp_path / "flag"
    suite = write_suite(tmp_path / "s.toml", SUITE.format(flag=flag))
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True, timeout=60)
    try:
        r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
        assert r.returncode != 0 and files(run_dir, "needs-flag") == {records.FINAL}, r.stdout + r.stderr
        flag.touch()
        fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=90)
        assert files(run_dir, "needs-flag") == {records.DONE}  # (written before the run heard it finished)
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert files(run_dir, "needs-flag") == {records.DONE}
    assert_nothing_left(run_dir)
