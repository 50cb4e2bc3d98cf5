"""`fleet simulate` with and without reservations, through the real command line."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from fleet.cli import main

# The case: a priority-1, 8-core step ready at 2.2 s behind 300 one-core steps.
SUITE = """
    [suite]
    name = "starve"

    [[steps]]
    id = "setup"
    command = "x"
    priority = 1
    estimate = 2.2

    [[steps]]
    id = "wide"
    command = "x"
    cores = 8
    priority = 1
    estimate = 5
    deps = ["setup"]

    [[steps]]
    id = "n{i}"
    array = "1-300"
    command = "x"
    estimate = 2.75
    """


def run(tmp_path: Path, *args: str):
    p = tmp_path / "suite.toml"
    p.write_text(textwrap.dedent(SUITE))
    # No node window: these figures are the reservations' alone (with the default window
    # see tests/core/test_simulate_window.py).
    return CliRunner().invoke(main, ["simulate", str(p), "--nodes", "1", "--cores-per-node", "8", "--window", "0",
                                     *args], env=dict.fromkeys(("FLEET_MACHINE", "SLURM_JOB_ID", "PBS_JOBID")))


def test_simulate_starts_the_wide_step_at_the_first_ends_with_reservations_and_last_without(tmp_path):
    on = run(tmp_path, "--json")
    off = run(tmp_path, "--json", "--no-reservations")
    assert on.exit_code == 0 and off.exit_code == 0, on.output + off.output
    assert json.loads(on.output)["steps"]["wide"]["start_s"] == 2.75
    assert json.loads(off.output)["steps"]["wide"]["start_s"] > 100


def test_compare_reservations_shows_both_runs_of_the_same_suite(tmp_path):
    r = run(tmp_path, "--compare-reservations", "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["reserve_after_s"] == 600.0 and got["wide_cores"] == 4
    assert got["without"]["wide_waits"]["max_s"] > 100
    assert got["with"]["wide_waits"]["max_s"] < 1
    assert got["with"]["makespan_s"] == got["without"]["makespan_s"]
    text = run(tmp_path, "--compare-reservations")
    assert text.exit_code == 0, text.output
    lines = text.output.splitlines()
    assert lines[0] == "reservations (reserve after 600 s); wide steps: 4 cores or more; window 0 a node; machine local"
    assert lines[2].split()[0] == "without" and lines[3].split()[0] == "with"


def test_reserve_after_takes_seconds_and_refuses_a_negative_value(tmp_path):
    assert run(tmp_path, "--reserve-after", "30").exit_code == 0
    bad = run(tmp_path, "--reserve-after", "-1")
    assert bad.exit_code == 2 and "--reserve-after" in bad.output


# The audit's case: a two-core step listed after 24 one-core steps that became ready with it.
CROWD = """
    [suite]
    name = "crowd"

    [[steps]]
    id = "offset"
    command = "sleep 0.35"
    estimate = 0.35
    priority = 1

    [[steps]]
    id = "narrow/{i}"
    array = "1-24"
    command = "sleep 0.7"
    estimate = 0.7

    [[steps]]
    id = "wide"
    command = "true"
    cores = 2
    estimate = 1
    """


def test_compare_reservations_shows_reserve_after_helping_a_wide_step_listed_after_narrow_ones(tmp_path):
    p = tmp_path / "crowd.toml"
    p.write_text(textwrap.dedent(CROWD))
    r = CliRunner().invoke(main, ["simulate", str(p), "--nodes", "1", "--cores-per-node", "2",
                                  "--compare-reservations", "--reserve-after", "2", "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["without"]["wide_waits"]["max_s"] == pytest.approx(8.75)
    # Reserved once it has waited 2 s; it starts behind the two steps already handed to
    # the node (the default window). It once started last, as without reservations.
    assert got["with"]["wide_waits"]["max_s"] == pytest.approx(3.15)
    assert got["with"]["makespan_s"] == pytest.approx(9.75) == got["without"]["makespan_s"]
