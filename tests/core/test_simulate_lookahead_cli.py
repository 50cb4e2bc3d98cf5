"""`fleet simulate --reserve-ahead`, through the real command line: a wide step after a
long setup step, on a node kept full by a stream of one-core steps."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from click.testing import CliRunner

from fleet.cli import main

SUITE = """
    [suite]
    name = "ahead"

    [[steps]]
    id = "setup"
    command = "x"
    estimate = 20

    [[steps]]
    id = "wide"
    command = "x"
    cores = 8
    estimate = 5
    deps = ["setup"]

    [[steps]]
    id = "n{i}"
    array = "1-300"
    command = "x"
    estimate = 10
    """


def run(tmp_path: Path, *args: str):
    p = tmp_path / "suite.toml"
    p.write_text(textwrap.dedent(SUITE))
    return CliRunner().invoke(main, ["simulate", str(p), "--nodes", "1", "--cores-per-node", "8", "--window", "0",
                                     *args])


def test_simulate_starts_the_wide_step_when_its_setup_ends_with_reserve_ahead_and_after_the_stream_without(tmp_path):
    off = run(tmp_path, "--json")
    on = run(tmp_path, "--json", "--reserve-ahead", "1")
    assert off.exit_code == 0 and on.exit_code == 0, off.output + on.output
    before, after = json.loads(off.output), json.loads(on.output)
    # Without: ready at 20 s, not yet old enough for a reservation, it waits behind the
    # whole stream (300 x 10 s on 8 cores).
    assert before["steps"]["wide"]["start_s"] > 300
    # With: its cores are drained while "setup" runs (the one-core steps ending by 20 s
    # borrow them), and it starts the moment it is ready.
    assert after["steps"]["wide"]["start_s"] == 20.0
    assert after["makespan_s"] <= before["makespan_s"]


def test_compare_reservations_shows_the_plans_ahead_in_the_with_row(tmp_path):
    r = run(tmp_path, "--compare-reservations", "--reserve-ahead", "1")
    assert r.exit_code == 0, r.output
    assert "reserve ahead 1" in r.output
