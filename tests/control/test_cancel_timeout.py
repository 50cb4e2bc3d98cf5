"""Work that changes as it runs, through the real CLI: a step's `timeout` (SIGTERM,
SIGKILL after its `grace`; timed_out, retried like a failure), `fleet cancel` of
running and waiting steps (cancelled, never retried, dependents blocked, the fleet
keeps running), and `fleet down` giving each step its own grace. Nothing is left
running afterwards."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from fleetharness import finish, assert_nothing_left, events, fleet, spawn, wait_for, write_suite
from fleetharness import records as event_records

from fleet.wire import events as E
from fleet.wire import records

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "3"]


@pytest.fixture
def fleet_up(tmp_path):
    """A fleet up in tmp_path/run (one pretend node), brought down after the test."""
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", *HB, cwd=tmp_path, check=True, timeout=60)
    yield run_dir
    fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)


def exits_of(run_dir: Path, step: str) -> list[E.Exit]:
    return [e for e in event_records(run_dir) if isinstance(e, E.Exit) and e.step == step]


def started(run_dir: Path, *steps: str) -> bool:
    ev = events(run_dir)
    return all(any(e["kind"] == "started" and e["step"] == s for e in ev) for s in steps)


def test_a_step_past_its_timeout_is_timed_out_retried_and_one_ignoring_sigterm_is_killed_after_its_grace(tmp_path):
    tag = str(tmp_path)
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "timeouts"
run_dir = "run"
[[steps]]
id = "slow"
command = "sleep 60 && echo {tag}"
timeout = 1
retries = 1
[[steps]]
id = "stubborn"
command = "trap '' TERM; sleep 60 && echo {tag}"
timeout = 1
grace = 1
[[steps]]
id = "after"
command = "true"
deps = ["slow"]
""")
    t0 = time.monotonic()
    r = fleet("run", str(suite), "--nodes", "1", cwd=tmp_path, timeout=90)
    took = time.monotonic() - t0
    run_dir = tmp_path / "run"
    assert r.returncode == 1, r.stdout + r.stderr
    assert took < 40, took  # not the 60 s the steps would sleep
    slow = exits_of(run_dir, "slow")
    assert [(e.attempt, e.outcome, e.signal) for e in slow] == [(1, "timed_out", 15), (2, "timed_out", 15)]
    assert slow[0].reason == "timed out after 1 s; ended after SIGTERM"
    for e in slow:
        assert 0.9 <= e.ended_at - e.work_start < 10, e
    [stubborn] = exits_of(run_dir, "stubborn")
    assert (stubborn.outcome, stubborn.signal) == ("timed_out", 9)
    assert stubborn.reason == "timed out after 1 s; SIGKILL after 1 s grace"
    assert 1.9 <= stubborn.ended_at - stubborn.work_start < 12, stubborn
    assert "retry 2 of 2: timed out after 1 s" in r.stdout, r.stdout
    assert "timed_out  slow" in r.stdout and "blocked    after" in r.stdout, r.stdout
    assert records.read_final(run_dir, "slow")["outcome"] == "timed_out"
    rep = json.loads(fleet("report", str(run_dir), "--json", cwd=tmp_path, timeout=60).stdout)
    assert rep["steps"]["slow"]["outcome"] == rep["steps"]["stubborn"]["outcome"] == "timed_out"
    assert any(p["step"] == "slow" and p["outcome"] == "timed_out" for p in rep["problems"])
    assert_nothing_left(run_dir, tag=tag)


def test_fleet_cancel_of_a_running_step_cancels_it_blocks_its_dependents_never_retries_it_and_the_fleet_runs_on(
        tmp_path, fleet_up, background):
    run_dir, tag = fleet_up, str(tmp_path)
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "cancel"
[[steps]]
id = "long"
command = "sleep 120 && echo {tag}"
retries = 2
grace = 1
[[steps]]
id = "after"
command = "true"
deps = ["long"]
""")
    runner = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
    background.append(runner)
    wait_for(lambda: started(run_dir, "long"), 30, "long running")
    r = fleet("cancel", "long", "--run-dir", str(run_dir), cwd=tmp_path, timeout=30)
    assert r.returncode == 0 and r.stdout.strip() == "cancelled 1 step: 1 running, 0 waiting", r.stdout + r.stderr
    code, out, err = finish(runner)
    assert code == 1, out + err
    assert "cancelled  long: cancelled; ended after SIGTERM" in out and "blocked    after" in out, out
    assert [(e.attempt, e.outcome) for e in exits_of(run_dir, "long")] == [(1, "cancelled")]
    assert not [e for e in event_records(run_dir) if isinstance(e, E.Retry)]
    assert records.read_final(run_dir, "long")["outcome"] == "cancelled"
    audit = json.loads(fleet("audit", str(run_dir), "--json", cwd=tmp_path, timeout=60).stdout)
    assert audit["steps"]["long"]["status"] == "cancelled", audit
    rep = json.loads(fleet("report", str(run_dir), "--json", cwd=tmp_path, timeout=60).stdout)
    assert rep["steps"]["long"]["outcome"] == "cancelled"
    # An unknown id is an error naming it, and cancels nothing.
    bad = fleet("cancel", "nope", "also-nope", "--run-dir", str(run_dir), cwd=tmp_path, timeout=30)
    assert bad.returncode == 2 and "nope, also-nope" in bad.stderr, bad.stdout + bad.stderr
    # The fleet keeps running: an independent step runs afterwards.
    other = write_suite(tmp_path / "o.toml", """
[suite]
name = "other"
[[steps]]
id = "independent"
command = "true"
""")
    r = fleet("run", str(other), "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert r.returncode == 0 and "1 succeeded" in r.stdout, r.stdout + r.stderr
    fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=90)
    assert_nothing_left(run_dir, tag=tag)


def test_fleet_cancel_waiting_then_all_cancels_what_has_not_started_then_what_runs(tmp_path, fleet_up, background):
    run_dir, tag = fleet_up, str(tmp_path)
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "cancel-many"
[[steps]]
id = "gate"
command = "sleep 120 && echo {tag}"
grace = 1
[[steps]]
id = "w1"
command = "true"
deps = ["gate"]
[[steps]]
id = "w2"
command = "true"
deps = ["w1"]
""")
    runner = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
    background.append(runner)
    wait_for(lambda: started(run_dir, "gate"), 30, "gate running")
    r = fleet("cancel", "--waiting", "--run-dir", str(run_dir), cwd=tmp_path, timeout=30)
    assert r.stdout.strip() == "cancelled 2 steps: 0 running, 2 waiting", r.stdout + r.stderr
    assert not exits_of(run_dir, "gate")  # still running
    assert runner.poll() is None
    r = fleet("cancel", "--all", "--run-dir", str(run_dir), cwd=tmp_path, timeout=30)
    assert r.stdout.strip() == "cancelled 1 step: 1 running, 0 waiting", r.stdout + r.stderr
    code, out, err = finish(runner)
    assert code == 1 and "3 cancelled" in out, out + err
    assert [e.outcome for e in exits_of(run_dir, "gate")] == ["cancelled"]
    for s in ("w1", "w2"):
        assert not exits_of(run_dir, s) and records.read_final(run_dir, s)["outcome"] == "cancelled"
    # Cancelled before they started: the report says so, not "not run".
    rep = json.loads(fleet("report", str(run_dir), "--json", cwd=tmp_path, timeout=60).stdout)
    assert [rep["steps"][s]["outcome"] for s in ("w1", "w2")] == ["cancelled", "cancelled"], rep["steps"]
    r = fleet("cancel", "gate", "--run-dir", str(run_dir), cwd=tmp_path, timeout=30)
    assert "cancelled 0 steps" in r.stdout and "already ended, left alone: gate" in r.stdout, r.stdout
    fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=90)
    assert_nothing_left(run_dir, tag=tag)


def test_fleet_down_gives_a_running_step_its_own_grace_to_clean_up(tmp_path, fleet_up, background):
    run_dir, done = fleet_up, tmp_path / "cleaned-up"
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "graceful"
[[steps]]
id = "tidy"
command = "trap 'sleep 3; touch {done}; exit 0' TERM; sleep 120 & wait"
grace = 8
""")
    runner = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
    background.append(runner)
    wait_for(lambda: started(run_dir, "tidy"), 30, "tidy running")
    r = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    assert done.exists(), "the step was killed before its grace was over"  # 3 s: more than the old fixed 2
    finish(runner)
    assert_nothing_left(run_dir, tag=str(done))
