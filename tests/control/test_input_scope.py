"""Which steps must have their inputs on disk before a run: those it would start. An
input no step produces is looked for only for the steps a submission would start: a
step left out by `--only` or `--shard`, or skipped as already done, does not refuse the
run for a dataset it alone reads. Real `fleet run`s with embedded local fleets."""

from __future__ import annotations

import subprocess

from fleetharness import fleet, records, write_suite

from fleet.wire import events as E

SUITE = '''[suite]
name = "scope"
run_dir = "run"
[[steps]]
id = "needsext"
command = "cat ../../data/in.txt"
inputs = ["data/in.txt"]
task = "1"
[[steps]]
id = "fl"
command = "true"
task = "0"
'''


def ran(run) -> list[str]:
    return sorted(e.step for e in records(run) if isinstance(e, E.Exit))


def refused_for_missing_input(r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 2, r.stdout + r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, r.stderr
    assert "step 'needsext': field 'inputs': 'data/in.txt' is produced by no step and does not exist" in errors[0]
    assert "nothing was started" in r.stderr


def test_a_missing_input_refuses_only_a_run_that_would_start_the_step_reading_it(tmp_path):
    suite = write_suite(tmp_path / "s.toml", SUITE)
    run = tmp_path / "run"
    r = fleet("run", str(suite), "--only", "fl", cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ran(run) == ["fl"]
    r = fleet("run", str(suite), "--shard", "0/2", "--force", cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ran(run) == ["fl", "fl"]
    # The step that reads it, selected, or in its shard, or in the whole suite: refused.
    refused_for_missing_input(fleet("run", str(suite), "--only", "needsext", cwd=tmp_path, timeout=60))
    refused_for_missing_input(fleet("run", str(suite), "--shard", "1/2", cwd=tmp_path, timeout=60))
    refused_for_missing_input(fleet("run", str(suite), cwd=tmp_path, timeout=60))
    assert ran(run) == ["fl", "fl"], "a refusal starts nothing"


def test_a_step_already_done_is_not_refused_for_an_input_removed_since(tmp_path):
    suite = write_suite(tmp_path / "s.toml", SUITE)
    run = tmp_path / "run"
    (run / "data").mkdir(parents=True)
    (run / "data" / "in.txt").write_text("dataset\n")
    r = fleet("run", str(suite), cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ran(run) == ["fl", "needsext"]
    (run / "data" / "in.txt").unlink()
    r = fleet("run", str(suite), cwd=tmp_path, timeout=90)  # nothing to start: both are done
    assert r.returncode == 0, r.stdout + r.stderr
    assert ran(run) == ["fl", "needsext"]
    # Asked to run it again, it reads the input: refused.
    refused_for_missing_input(fleet("run", str(suite), "--force", cwd=tmp_path, timeout=60))
