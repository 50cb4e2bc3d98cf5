"""`fleet audit` through the real command on what `fleet run` and `fleet step --record`
leave: a success after a forced rerun that failed is a rerun, not a DUPLICATE; a step
that succeeded under a newer definition than --suite's is `changed`, not missing; and a
run directory of `fleet step --record` outcomes alone audits its steps."""

from __future__ import annotations

import json
from pathlib import Path

from fleetharness import assert_nothing_left, fleet, write_suite

# x fails while the run directory holds a file named `fail` (its work directory is
# run/steps/x), so one suite can succeed, fail, then succeed again.
FLAKY = """
[suite]
name = "flaky"
[[steps]]
id = "x"
command = "test ! -e ../../fail"
"""


def audit(run_dir: Path, cwd: Path, *extra: str) -> tuple[int, dict, str]:
    """(exit status, the --json answer, the text answer)."""
    j = fleet("audit", str(run_dir), "--json", *extra, cwd=cwd, timeout=60)
    t = fleet("audit", str(run_dir), *extra, cwd=cwd, timeout=60)
    assert j.returncode == t.returncode, (j.stdout, j.stderr, t.stdout)
    return j.returncode, json.loads(j.stdout), t.stdout


def test_a_success_after_a_forced_rerun_that_failed_is_a_rerun_not_a_duplicate(tmp_path):
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "d.toml", FLAKY)
    fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=90)
    (run_dir / "fail").touch()
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--force", cwd=tmp_path, timeout=90)
    assert r.returncode == 1 and "1 failed" in r.stdout, r.stdout
    (run_dir / "fail").unlink()
    fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=90)
    code, a, text = audit(run_dir, tmp_path)
    assert code == 0 and a["duplicates"] == [], text
    x = a["steps"]["x"]
    assert (x["status"], x["successes"], x["reruns"], x["duplicates"], x["attempts"]) == ("succeeded", 2, 1, 0, 3)
    assert "DUPLICATE" not in text and "rerun 1 time(s)" in text, text
    assert_nothing_left(run_dir)


def test_fleet_step_record_outcomes_alone_are_audited_and_a_recorded_rerun_after_a_failure_is_no_duplicate(
        tmp_path):
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "d.toml", FLAKY + """
[[steps]]
id = "bad"
command = "false"
""")
    step = lambda sid: fleet("step", str(suite), sid, "--run-dir", str(run_dir), "--record",  # noqa: E731
                             cwd=tmp_path, timeout=60)
    assert step("x").returncode == 0 and step("bad").returncode == 1
    code, a, text = audit(run_dir, tmp_path)
    assert code == 0 and {s: v["status"] for s, v in a["steps"].items()} == {"x": "succeeded", "bad": "failed"}, text
    assert "no steps" not in text
    (run_dir / "fail").touch()  # x recorded again: a failure, then a success
    assert step("x").returncode == 1
    (run_dir / "fail").unlink()
    assert step("x").returncode == 0
    code, a, text = audit(run_dir, tmp_path)
    assert code == 0 and a["duplicates"] == [], text
    x = a["steps"]["x"]
    assert (x["status"], x["successes"], x["reruns"], x["duplicates"]) == ("succeeded", 2, 1, 0), text


def test_a_step_that_succeeded_under_a_newer_definition_is_changed_under_the_old_suite_not_missing(tmp_path):
    run_dir = tmp_path / "run"
    one = write_suite(tmp_path / "one.toml", FLAKY.replace("test ! -e ../../fail", "echo one"))
    two = write_suite(tmp_path / "two.toml", FLAKY.replace("test ! -e ../../fail", "echo two"))
    for suite in (one, two):
        fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=90)
    code, a, text = audit(run_dir, tmp_path, "--suite", str(one))
    assert code == 0 and a["missing"] == [], text
    x = a["steps"]["x"]
    assert (x["status"], x["successes"], x["reruns"]) == ("changed", 2, 1), text
    assert "another definition" in x["reason"] and a["counts"] == {"changed": 1}
    code, a, text = audit(run_dir, tmp_path, "--suite", str(two))  # the newest: succeeded
    assert code == 0 and a["steps"]["x"]["status"] == "succeeded", text
    # A failure under the newest definition since is what the step is now.
    write_suite(two, FLAKY.replace("test ! -e ../../fail", "echo two; false"))
    fleet("run", str(two), "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
    code, a, text = audit(run_dir, tmp_path, "--suite", str(one))
    assert code == 0 and a["steps"]["x"]["status"] == "failed", text
    assert_nothing_left(run_dir)
