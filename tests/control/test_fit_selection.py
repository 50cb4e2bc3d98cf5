"""Which steps must fit the allocation: those the run would start. A selection (`--only`,
`--with-deps`, `--shard`) is checked on its own; a step that already succeeded is
skipped, so it need not fit; a step that would start and can never fit still refuses
the run before anything starts. Real `fleet run`s with embedded local fleets, and one
fleet that `fleet up` started (its coordinator checks the submission)."""

from __future__ import annotations

import subprocess

import pytest
from fleetharness import assert_nothing_left, fleet, records, write_suite

from fleet.node.probe import usable_cores
from fleet.wire import events as E

CORES = len(usable_cores())
needs_two_cores = pytest.mark.skipif(CORES < 2, reason="two pretend nodes need two cores")

# `wide` needs every core of this machine: it fits a local fleet of one pretend node,
# never one of two (nor, with NEVER cores, any).
SUITE = '''[suite]
name = "fit"
run_dir = "run"
[[steps]]
id = "wide"
command = "echo wide > wide.txt"
cores = {wide}
outputs = ["steps/wide/wide.txt"]
[[steps]]
id = "reads"
command = "cat ../wide/wide.txt"
inputs = ["steps/wide/wide.txt"]
[[steps]]
id = "small"
command = "echo small"
'''


def ran(run) -> list[str]:
    return sorted(e.step for e in records(run) if isinstance(e, E.Exit))


def refused_for_wide(r: subprocess.CompletedProcess, run) -> None:
    assert r.returncode == 2, r.stdout + r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "step 'wide': field 'cores': can never run on this allocation" in errors[0], r.stderr
    assert r.stderr.strip().endswith("1 problem found; nothing was started"), r.stderr
    assert "starting an embedded fleet" not in r.stderr


def test_only_runs_a_step_that_fits_though_an_unselected_step_never_could(tmp_path):
    suite = write_suite(tmp_path / "s.toml", SUITE.format(wide=CORES + 1))
    run = tmp_path / "run"
    r = fleet("run", str(suite), "--only", "small", cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ran(run) == ["small"]
    assert "wide" not in r.stdout + r.stderr
    # A selected step that can never fit is refused, and so is one a selected step
    # depends on that --with-deps would start.
    before = (run / "events.jsonl").read_bytes()
    refused_for_wide(fleet("run", str(suite), "--only", "wide", cwd=tmp_path, timeout=60), run)
    refused_for_wide(fleet("run", str(suite), "--only", "reads", "--with-deps", cwd=tmp_path, timeout=60), run)
    refused_for_wide(fleet("run", str(suite), cwd=tmp_path, timeout=60), run)
    assert (run / "events.jsonl").read_bytes() == before, "a refusal starts nothing"


def test_a_shard_runs_when_only_another_shard_has_a_step_that_never_fits(tmp_path):
    suite = write_suite(tmp_path / "s.toml", SUITE.format(wide=CORES + 1).replace(
        'id = "wide"', 'id = "wide"\ntask = "1"').replace('id = "small"', 'id = "small"\ntask = "0"').replace(
        'id = "reads"', 'id = "reads"\ntask = "1"'))
    r = fleet("run", str(suite), "--shard", "0/2", cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ran(tmp_path / "run") == ["small"]
    refused_for_wide(fleet("run", str(suite), "--shard", "1/2", cwd=tmp_path, timeout=60), tmp_path / "run")


@needs_two_cores
def test_a_wide_step_that_already_succeeded_need_not_fit_a_smaller_allocation_until_it_would_run_again(tmp_path):
    suite = write_suite(tmp_path / "s.toml", SUITE.format(wide=CORES))
    run = tmp_path / "run"
    refused_for_wide(fleet("run", str(suite), "--nodes", "2", "--only", "reads", "--with-deps",
                           cwd=tmp_path, timeout=60), run)
    assert not run.exists()
    r = fleet("run", str(suite), "--nodes", "1", "--only", "wide", cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    # On two pretend nodes `wide` fits neither, but it succeeded as it is: skipped, not started.
    for selection in (("--only", "reads", "--with-deps"), ()):
        r = fleet("run", str(suite), "--nodes", "2", *selection, cwd=tmp_path, timeout=90)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "skipped    wide" in r.stdout, r.stdout
    assert ran(run) == ["reads", "small", "wide"]
    # Forced, or changed, it would run again: refused.
    refused_for_wide(fleet("run", str(suite), "--nodes", "2", "--force", cwd=tmp_path, timeout=60), run)
    suite.write_text(suite.read_text().replace("echo wide >", "echo wider >"))
    refused_for_wide(fleet("run", str(suite), "--nodes", "2", "--only", "reads", "--with-deps",
                           cwd=tmp_path, timeout=60), run)


def test_a_fleet_that_is_up_checks_only_the_selection_against_its_nodes(tmp_path):
    suite = write_suite(tmp_path / "s.toml", SUITE.format(wide=CORES + 1))
    run = tmp_path / "run"
    fleet("up", "--local", "--nodes", "1", "--run-dir", str(run), cwd=tmp_path, check=True, timeout=60)
    try:
        r = fleet("run", str(suite), "--only", "small", cwd=tmp_path, timeout=90)
        assert r.returncode == 0, r.stdout + r.stderr
        r = fleet("run", str(suite), "--only", "wide", cwd=tmp_path, timeout=60)
        assert r.returncode == 2 and "step 'wide': field 'cores': can never run" in r.stderr, r.stdout + r.stderr
    finally:
        fleet("down", "--run-dir", str(run), cwd=tmp_path, timeout=60)
    assert ran(run) == ["small"]
    assert_nothing_left(run)
