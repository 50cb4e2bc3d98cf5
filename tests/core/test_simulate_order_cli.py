"""`fleet simulate --order` and `--compare-orders`, through the real command line."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from click.testing import CliRunner

from fleet.cli import main

# 16 short one-core steps come first in setup order; "head" leads a 40 s chain.
SUITE = """
    [suite]
    name = "orders"

    [[steps]]
    id = "n{i}"
    array = "1-16"
    command = "x"
    estimate = 3

    [[steps]]
    id = "head"
    command = "x"
    estimate = 1

    [[steps]]
    id = "tail"
    command = "x"
    estimate = 40
    deps = ["head"]
    """


def run(tmp_path: Path, *args: str):
    p = tmp_path / "suite.toml"
    p.write_text(textwrap.dedent(SUITE))
    # With the default node window (each node's cores): it keeps the order (fleet.core.windowpick).
    # (no machine from the environment: the text names the one it keeps, local here)
    return CliRunner().invoke(main, ["simulate", str(p), "--nodes", "1", "--cores-per-node", "8", *args],
                              env=dict.fromkeys(("FLEET_MACHINE", "SLURM_JOB_ID", "PBS_JOBID")))


def test_critical_path_order_starts_the_long_chain_at_once_and_ends_the_suite_sooner(tmp_path):
    setup, ranked = run(tmp_path, "--json"), run(tmp_path, "--json", "--order", "critical-path")
    assert setup.exit_code == 0 and ranked.exit_code == 0, setup.output + ranked.output
    before, after = json.loads(setup.output), json.loads(ranked.output)
    assert before["steps"]["head"]["start_s"] == 6.0 and before["makespan_s"] == 47.0
    assert after["steps"]["head"]["start_s"] == 0.0 and after["makespan_s"] == 41.0


def test_compare_orders_shows_each_order_of_the_same_suite(tmp_path):
    r = run(tmp_path, "--compare-orders", "--json", "--no-reservations")
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["reserve_after_s"] is None
    assert {k: v["makespan_s"] for k, v in got["orders"].items()} == {
        "setup": 47.0, "critical-path": 41.0, "critical-then-smallest": 41.0, "defer-widest": 41.0}
    text = run(tmp_path, "--compare-orders")
    assert text.exit_code == 0, text.output
    lines = text.output.splitlines()
    assert lines[0] == "orders (reserve after 600 s); wide steps: 4 cores or more; window 8 a node; machine local"
    assert [ln.split()[:2] for ln in lines[2:]] == [["setup", "47.0"], ["critical-path", "41.0"],
                                                   ["critical-then-smallest", "41.0"], ["defer-widest", "41.0"]]


def test_compare_orders_names_the_reservations_planned_ahead_and_the_window_depth_its_runs_had(tmp_path):
    r = run(tmp_path, "--compare-orders", "--json", "--reserve-ahead", "3", "--window-depth", "2")
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert (got["reserve_ahead"], got["window"], got["window_depth"]) == (3, 16, 2)
    text = run(tmp_path, "--compare-orders", "--reserve-ahead", "3", "--window-depth", "2")
    assert text.exit_code == 0, text.output
    assert text.output.splitlines()[0] == ("orders (reserve after 600 s, reserve ahead 3); wide steps: 4 cores or "
                                           "more; window 16 a node, up to 2 behind a running step; machine local")


def test_an_unknown_order_is_refused_before_anything_runs(tmp_path):
    bad = run(tmp_path, "--order", "longest")
    assert bad.exit_code == 2 and "--order" in bad.output


# One 16-core node: "long" is the critical chain; "big" (12 cores x 5,000 s) is ready at
# once, eleven 12-core steps of 400 s once "prep" ends at 5 s. 12 spanning steps: the
# default share (9 %) defers one, the one with the most work off the critical chain.
WIDEST = """
    [suite]
    name = "widest"

    [[steps]]
    id = "long"
    command = "x"
    estimate = 20000

    [[steps]]
    id = "big"
    command = "x"
    cores = 12
    span = true
    estimate = 5000

    [[steps]]
    id = "prep"
    command = "x"
    estimate = 5

    [[steps]]
    id = "small{i}"
    array = "1-11"
    command = "x"
    cores = 12
    span = true
    estimate = 400
    deps = ["prep"]
    """


def test_defer_widest_order_holds_the_biggest_wide_step_so_the_smaller_ones_start_at_once(tmp_path):
    p = tmp_path / "suite.toml"
    p.write_text(textwrap.dedent(WIDEST))

    def sim(order):
        r = CliRunner().invoke(main, ["simulate", str(p), "--nodes", "1", "--cores-per-node", "16", "--json",
                                      "--order", order])
        assert r.exit_code == 0, r.output
        return json.loads(r.output)
    before, after = sim("critical-then-smallest"), sim("defer-widest")
    assert before["steps"]["big"]["start_s"] == 0.0 and before["steps"]["small1"]["start_s"] == 5000.0
    assert after["steps"]["small1"]["start_s"] == 5.0 and after["steps"]["small11"]["start_s"] == 4005.0
    assert after["steps"]["big"]["start_s"] == 4405.0  # held 400 s (the median wide step's), then after the smaller ones
    assert before["makespan_s"] == after["makespan_s"] == 20000.0
