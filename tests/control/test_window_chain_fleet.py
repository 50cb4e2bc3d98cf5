"""Chains in a node's window through the real CLI (`--window-depth`,
fleet.core.windowchain, fleet.node.queued): several steps wait behind one running step,
each behind the one before it, and the node runs them one after the other on the same
cores; a step cancelled in the middle never runs and its follower still does. Nothing
is left running afterwards."""

from __future__ import annotations

import os
from pathlib import Path

from fleetharness import assert_nothing_left, events, fleet, write_suite

from test_window_fleet import HB, by, cancel_when_queued, steps


def whole(tag: str, *specs: tuple[str, str]) -> str:
    """Steps that each take every core of `fleet up --nodes 1`: one runs at a time."""
    cores = len(os.sched_getaffinity(0))
    return steps(tag, *specs).replace("retries = 0\n", f"retries = 0\ncores = {cores}\n")


def test_a_chain_of_three_runs_one_after_the_other_on_its_nodes_cores(tmp_path):
    tag = str(tmp_path)
    write_suite(tmp_path / "s.toml", whole(tag, ("first", "sleep 1"), ("a", "sleep 0.2"), ("b", "sleep 0.2"),
                                           ("c", "sleep 0.2")))
    r = fleet("run", "s.toml", "--nodes", "1", "--window-depth", "3", *HB, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    ev = events(tmp_path / "run")
    queued, started, exits = by("queued", ev), by("started", ev), by("exit", ev)
    assert {s: q["after"] for s, q in queued.items()} == {"a": "first", "b": "a", "c": "b"}
    for s, q in queued.items():
        pred = exits[q["after"]]
        # Each takes the node's cores: it began after the one before it was reaped.
        assert started[s]["at"] >= pred["ended_at"], (started[s], pred)
        assert started[s]["node"] == q["node"] == pred["node"]
        assert exits[s]["outcome"] == "succeeded" and exits[s]["attempt"] == 1
    assert_nothing_left(tmp_path / "run", tag)


def test_a_step_cancelled_in_the_middle_of_a_chain_never_runs_and_the_one_behind_it_still_does(tmp_path):
    tag = str(tmp_path)
    gate = tmp_path / "gate"
    wait = f"while [ ! -e {gate} ]; do sleep 0.05; done"
    write_suite(tmp_path / "s.toml", whole(tag, ("first", wait), ("a", "true"), ("b", f"touch {tmp_path}/b-ran"),
                                           ("c", "true")))
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", "--window-depth", "3", *HB, cwd=tmp_path, check=True,
          timeout=60)
    code, out = cancel_when_queued(  # b is cancelled once c waits behind it, in a chain of three behind first
        tmp_path, run_dir, gate, "b",
        lambda ev: by("queued", ev).get("c", {}).get("after") == "b" and "first" in by("started", ev))
    ev = events(run_dir)
    exits, started = by("exit", ev), by("started", ev)
    assert code != 0, out  # one step cancelled
    assert [exits[s]["outcome"] for s in ("first", "a", "c")] == ["succeeded"] * 3
    assert "b" not in started and not Path(f"{tmp_path}/b-ran").exists()
    assert started["c"]["at"] >= exits["a"]["ended_at"]  # c went behind a, as the node has it
    assert_nothing_left(run_dir, tag)


def test_three_hundred_short_steps_in_chains_of_eight_each_run_once(tmp_path):
    text = ('[suite]\nname = "chains"\n[[steps]]\nid = "s/{i}"\narray = "0-299"\ncall = "fleet_steps:nap"\n'
            'args = { seconds = 0 }\n')
    write_suite(tmp_path / "s.toml", text)
    r = fleet("run", "s.toml", "--run-dir", "run", "--nodes", "2", "--window-depth", "8", *HB, cwd=tmp_path,
              timeout=240)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    ev = events(tmp_path / "run")
    ends = [e for e in ev if e["kind"] == "exit"]
    assert len(ends) == 300 and {e["step"] for e in ends} == {f"s/{i}" for i in range(300)}
    assert all(e["outcome"] == "succeeded" and e["attempt"] == 1 for e in ends)
    queued = by("queued", ev)
    behind_queued = [s for s, q in queued.items() if q["after"] in queued]
    assert behind_queued, "no step was queued behind a queued one"
    assert_nothing_left(tmp_path / "run")


def test_with_a_report_hold_a_step_others_depend_on_is_reported_at_once_and_the_rest_may_wait(tmp_path):
    # One step at a time on the node, a chain behind `a`. `b` has a dependent: its exit is
    # not held, though `c` (2 s) is queued on the node when it ends. The others' reports
    # may wait up to the hold (10 s) while steps are queued there, and all go in the end.
    tag = str(tmp_path)
    text = whole(tag, ("a", "sleep 0.5"), ("b", "sleep 0.2"), ("c", "sleep 2"), ("d", "sleep 0.2"), ("e", "true"))
    write_suite(tmp_path / "s.toml", text.replace('id = "e"\n', 'id = "e"\ndeps = ["b"]\n'))
    r = fleet("run", "s.toml", "--nodes", "1", "--window-depth", "4", "--report-hold", "10", *HB, cwd=tmp_path,
              timeout=120)
    assert r.returncode == 0, r.stderr
    ev = events(tmp_path / "run")
    queued, exits = by("queued", ev), by("exit", ev)
    assert [queued[s]["after"] for s in "bcd"] == ["a", "b", "c"]
    assert all(exits[s]["outcome"] == "succeeded" for s in "abcde")
    # Heard before c ended (held, it would have waited for c's exit, 2 s later). (An order,
    # not "within 1.5 s", a time bound a loaded machine could break.)
    assert exits["b"]["t"] < exits["c"]["ended_at"], (exits["b"], exits["c"])
    assert_nothing_left(tmp_path / "run", tag)
