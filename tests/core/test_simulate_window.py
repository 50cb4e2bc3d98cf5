"""`fleet simulate` with a node window (fleet.core.window), through the real command
line: the same default as `fleet up` (each node's cores), the same commitments (a step
handed to a node ahead starts there the moment its predecessor ends, unless cores free
elsewhere first: then it is taken back), the predecessor expected to end soonest, and
`--window 0` gives the window-less figures."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from click.testing import CliRunner

from fleet.cli import main

# Two one-core nodes: "long" and "short" start at once (priority 1 first); "next" is handed to the node
# whose step is expected to end soonest (short's), so it runs 1-2 s there, not 10-11 s behind "long".
SUITE = """
    [suite]
    name = "window"

    [[steps]]
    id = "long"
    command = "x"
    priority = 1
    estimate = 10

    [[steps]]
    id = "short"
    command = "x"
    priority = 2
    estimate = 1

    [[steps]]
    id = "next"
    command = "x"
    priority = 3
    estimate = 1
    """


def simulate(tmp_path: Path, *args: str, suite: str = SUITE, nodes: str = "2", cores: str = "1") -> dict:
    p = tmp_path / "suite.toml"
    p.write_text(textwrap.dedent(suite))
    r = CliRunner().invoke(main, ["simulate", str(p), "--nodes", nodes, "--cores-per-node", cores, "--json", *args])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_by_default_simulate_hands_a_step_ahead_behind_the_running_step_expected_to_end_soonest(tmp_path):
    out = simulate(tmp_path)
    assert out["window"] == 1  # the node's cores, as `fleet up`'s default
    st = out["steps"]
    assert st["long"] == {"node": "node1", "cores": 1, "start_s": 0.0, "end_s": 10.0}
    assert st["short"] == {"node": "node2", "cores": 1, "start_s": 0.0, "end_s": 1.0}
    assert st["next"] == {"node": "node2", "cores": 1, "start_s": 1.0, "end_s": 2.0}
    assert out["makespan_s"] == 10.0  # as with --window 0 (it was 11 s behind "long")
    assert simulate(tmp_path, "--window", "0")["makespan_s"] == 10.0


def test_a_step_handed_ahead_behind_a_long_step_is_taken_back_when_another_node_frees_first(tmp_path):
    # "short" has no estimate: it counts as ending last, so "next" is handed to long's node (10 s);
    # when "short" (1 s in simulate) ends first, "next" is taken back and runs on the free node at
    # once. It used to start there only when "long" ended, at 10 s.
    suite = SUITE.replace("priority = 2\n    estimate = 1", "priority = 2")
    out = simulate(tmp_path, suite=suite)
    assert out["steps"]["next"] == {"node": "node2", "cores": 1, "start_s": 1.0, "end_s": 2.0}
    assert out["makespan_s"] == 10.0 == simulate(tmp_path, "--window", "0", suite=suite)["makespan_s"]


def test_with_window_0_simulate_gives_the_window_less_answer(tmp_path):
    out = simulate(tmp_path, "--window", "0")
    assert out["window"] == 0
    assert out["steps"]["next"] == {"node": "node2", "cores": 1, "start_s": 1.0, "end_s": 2.0}
    assert out["makespan_s"] == 10.0  # as before simulate modelled the window


def test_the_summary_in_words_says_the_window(tmp_path):
    p = tmp_path / "suite.toml"
    p.write_text(textwrap.dedent(SUITE))
    r = CliRunner().invoke(main, ["simulate", str(p), "--nodes", "2", "--cores-per-node", "1", "--window", "0"])
    assert r.exit_code == 0, r.output
    assert "window 0 step(s) per node handed ahead (none)" in [" ".join(x.split()) for x in r.stdout.splitlines()]


def test_a_step_handed_ahead_that_begins_just_before_the_drain_point_is_interrupted_there(tmp_path):
    # One node: "long" ends at 5.5 s; "next" (no estimate: it is not held back; simulate gives
    # it 1 s) is handed ahead behind it, begins then and runs into the drain point at 6 s.
    suite = SUITE.replace("estimate = 10", "estimate = 5.5").replace("priority = 3\n    estimate = 1", "priority = 3")
    suite = suite[:suite.index('[[steps]]\n    id = "short"')] + suite[suite.index('[[steps]]\n    id = "next"'):]
    out = simulate(tmp_path, "--walltime", "8s", "--drain-before", "2s", suite=suite, nodes="1")
    assert out["drain_s"] == 6.0
    assert out["steps"]["next"] == {"node": "node1", "cores": 1, "start_s": 5.5, "end_s": 6.0}
    assert out["interrupted"] == {"next": 6.0} and out["not_started"] == []


def test_at_the_drain_point_a_step_still_queued_on_its_node_is_dropped_there_never_started(tmp_path):
    # One core: "u" (no estimate) starts at 5.5 s when "a" ends, "v" is handed ahead behind it.
    suite = """
        [suite]
        name = "drop"
        [[steps]]
        id = "a"
        command = "x"
        estimate = 5.5
        [[steps]]
        id = "u"
        command = "x"
        priority = 2
        deps = ["a"]
        [[steps]]
        id = "v"
        command = "x"
        priority = 3
        deps = ["a"]
        """
    out = simulate(tmp_path, "--walltime", "8s", "--drain-before", "2s", suite=suite, nodes="1")
    assert out["interrupted"] == {"u": 6.0}
    assert out["not_started"] == ["v"] and "v" not in out["steps"]


def test_a_step_queued_behind_one_that_ends_at_the_drain_point_is_dropped_there_not_interrupted_at_once(tmp_path):
    # One core: "a" ends at 6 s, the drain point; "u" (no estimate), handed ahead behind it,
    # would begin at the drain point. Nothing starts from there on: its node drops it,
    # not_started, as the live fleet's drain does (before, it began at 6 s and was
    # interrupted there after 0 s).
    suite = """
        [suite]
        name = "tie"
        [[steps]]
        id = "a"
        command = "x"
        priority = 2
        estimate = 6
        [[steps]]
        id = "u"
        command = "x"
        """
    out = simulate(tmp_path, "--walltime", "8s", "--drain-before", "2s", suite=suite, nodes="1")
    assert out["drain_s"] == 6.0
    assert out["steps"]["a"] == {"node": "node1", "cores": 1, "start_s": 0.0, "end_s": 6.0}  # (it ended in time)
    assert out["interrupted"] == {} and out["not_started"] == ["u"] and "u" not in out["steps"], out
    assert out["not_started_reasons"]["u"].startswith("handed to its node ahead"), out


def test_with_the_default_window_a_reservation_still_starts_the_wide_step_at_the_first_ends(tmp_path):
    from test_simulate_reservations_cli import SUITE as STARVE
    out = simulate(tmp_path, suite=STARVE, nodes="1", cores="8")
    assert out["steps"]["wide"]["start_s"] <= 5.5, out["steps"]["wide"]
