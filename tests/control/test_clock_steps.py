"""A wall clock that steps under a running fleet (NTP, `date -s`): the allocation's end
is a deadline on the coordinator's monotonic clock (fleet.control.drain), and a step's
work is timed on its node's (fleet.node.exits.worked). The clock is moved by a shim
(tests/harness/clockshim: time.time() plus the seconds in $CLOCK_SKEW_FILE, the
monotonic clock untouched), for every Python process of the fleet."""

from __future__ import annotations

import os
import time
from pathlib import Path

from fleetharness import REPO, TESTS, events, exits, finish, fleet, spawn, wait_for, write_suite

from fleet.wire import records

SHIM = TESTS / "harness" / "clockshim"
HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "5"]


def skewed(tmp_path: Path, seconds: float = 0.0) -> tuple[dict, Path]:
    """The environment of a fleet whose wall clock is `seconds` off (and the file that
    moves it later: step_clock), with tmp_path importable (call steps written there)."""
    skew = tmp_path / "skew"
    step_clock(skew, seconds)
    path = os.pathsep.join(str(p) for p in (SHIM, tmp_path, TESTS, REPO))
    return {"CLOCK_SKEW_FILE": str(skew), "PYTHONPATH": path}, skew


def step_clock(skew: Path, seconds: float) -> None:
    """Step the shimmed wall clock to `seconds` off (by rename: never read half written)."""
    tmp = skew.with_suffix(".tmp")
    tmp.write_text(f"{seconds:g}\n")  # (whole seconds as integers: a step's shell adds to them)
    tmp.replace(skew)


def waiting_suite(tmp_path: Path, long_s: int, estimate: int) -> Path:
    """`first` sleeps 6 s, then `long` sleeps `long_s` s (its `estimate`): long starts
    well into the allocation, so that the drain stopping it finds it did not have nearly
    all of it (fleet.control.stuck: then `fleet run` exits 1, not 3)."""
    return write_suite(tmp_path / "s.toml", f"""
[suite]
name = "clock"
[[steps]]
id = "first"
command = "sleep 6"
[[steps]]
id = "long"
command = "sleep {long_s}"
estimate = {estimate}
deps = ["first"]
""")


def kinds(run_dir: Path, kind: str) -> list[dict]:
    return [e for e in events(run_dir) if e["kind"] == kind]


def started(run_dir: Path, step: str) -> bool:
    return any(e["step"] == step for e in kinds(run_dir, "started"))


def test_a_wall_clock_stepped_an_hour_forward_mid_run_does_not_drain_at_once_but_at_the_monotonic_drain_point(
        tmp_path):
    environ, skew = skewed(tmp_path)
    run_dir = tmp_path / "run"
    p = spawn("run", str(waiting_suite(tmp_path, 120, 12)), "--run-dir", str(run_dir), "--nodes", "1",
              "--walltime", "40s", "--drain-before", "10s", *HB, cwd=tmp_path, environ=environ)
    try:
        wait_for(lambda: started(run_dir, "first"), 60, "first to start")
        # Past the end by the wall clock: before 2026-12-07 it drained at once. Long, ready
        # after it, fits in the time left by the monotonic clock: it starts.
        step_clock(skew, 3600)
        stepped = time.monotonic()
        wait_for(lambda: kinds(run_dir, "drained"), 60, "the drain")
        waited = time.monotonic() - stepped
    finally:
        code, out, err = finish(p, 90)
    # (first starts after the fleet's start: the drain point is 30 s after it)
    assert waited >= 5, f"drained {waited:.1f} s after the clock's step\n{out}\n{err}"
    assert code == 3, out + err
    assert "interrupted long" in out and "needs a longer allocation" not in out + err, out + err
    [drained] = kinds(run_dir, "drained")
    assert drained["reason"] == "the drain point, 10 s before the end", drained
    assert not [e for e in kinds(run_dir, "wait") if e["step"] == "long" and e["cause"] == "deadline"]


def test_a_wall_clock_stepped_an_hour_back_mid_run_still_drains_at_the_drain_point(tmp_path):
    environ, skew = skewed(tmp_path)
    run_dir = tmp_path / "run"
    p = spawn("run", str(waiting_suite(tmp_path, 60, 5)), "--run-dir", str(run_dir), "--nodes", "1",
              "--walltime", "30s", "--drain-before", "8s", *HB, cwd=tmp_path, environ=environ)
    try:
        wait_for(lambda: started(run_dir, "long"), 60, "long to start")
        step_clock(skew, -3600)  # before 2026-12-07 the end never came: long ran to its end, exit 0
    finally:
        code, out, err = finish(p, 120)
    assert code == 3, out + err
    assert "interrupted long" in out, out + err
    [drained] = kinds(run_dir, "drained")
    assert drained["reason"] == "the drain point, 8 s before the end", drained
    [ex] = exits(run_dir, "long")
    assert ex["outcome"] == "interrupted" and ex["work_s"] < 30, ex  # (it stopped at the drain: ~15 s)


JUMPER = '''
import os, time
from pathlib import Path


def jump(ctx):
    """Sleep 1.5 s, step the wall clock 2 h forward (fleet.tests.clockshim), sleep 3 s."""
    time.sleep(1.5)
    if os.environ.get("CLOCK_SKEW_FILE"):  # (a fleet with the true clock: no step)
        skew = Path(os.environ["CLOCK_SKEW_FILE"])
        tmp = skew.with_suffix(".call")
        tmp.write_text(str(int(float(skew.read_text())) + 7200))
        tmp.replace(skew)
    time.sleep(3)
'''


def test_a_step_during_which_the_wall_clock_jumps_two_hours_records_its_real_work_and_a_later_walltime_run_starts_it(
        tmp_path):
    environ, skew = skewed(tmp_path)
    (tmp_path / "clockjump.py").write_text(JUMPER)
    # Each step moves the clock 2 h forward mid-way (a command: its own shell; a call: in
    # its forked child), one after the other, so each is stepped under.
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "work"
[[steps]]
id = "cmd"
command = "sleep 1.5; echo $(( $(cat {skew}) + 7200 )) > {skew}.cmd && mv {skew}.cmd {skew}; sleep 3"
[[steps]]
id = "call"
call = "clockjump:jump"
deps = ["cmd"]
""")
    run_dir = tmp_path / "run"
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", *HB, cwd=tmp_path, timeout=90,
              environ=environ)
    assert r.returncode == 0, r.stdout + r.stderr
    assert float(skew.read_text()) == 14400  # (both stepped the clock)
    for step in ("cmd", "call"):
        [ex] = exits(run_dir, step)
        assert 4 <= ex["work_s"] < 600, ex  # about 4.5 s of work; before 2026-12-07 over 2 h
        assert ex["work_end"] - ex["work_start"] > 7000, ex  # (the wall stamps, for display, stepped)
        assert records.read_done(run_dir, step)["work_s"] < 600
    # With the true clock, in a 1-h allocation: before, "needs a longer allocation: it takes about 120 min"
    true_clock = {"PYTHONPATH": os.pathsep.join(str(p) for p in (tmp_path, TESTS, REPO))}
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--force", "--walltime", "1h", *HB,
              cwd=tmp_path, timeout=90, environ=true_clock)
    assert r.returncode == 0, r.stdout + r.stderr
    assert [len(exits(run_dir, s)) for s in ("cmd", "call")] == [2, 2]


def test_fleet_status_counts_the_time_left_by_the_monotonic_deadline_after_the_wall_clock_steps_an_hour_forward(
        tmp_path):
    environ, skew = skewed(tmp_path)
    run_dir, flag = tmp_path / "run", tmp_path / "flag"
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "shown"
[[steps]]
id = "a"
command = "while [ ! -e {flag} ]; do sleep 0.1; done"
""")
    p = spawn("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "600s",
              "--drain-before", "10s", *HB, cwd=tmp_path, environ=environ)
    try:
        wait_for(lambda: started(run_dir, "a"), 60, "a to start")
        step_clock(skew, 3600)
        log = run_dir / "coordinator.log"
        wait_for(lambda: log.exists() and "the wall clock stepped" in log.read_text(), 60,
                 "the coordinator to see the clock's step")
        # `fleet status` on the same host (its clock stepped too): before 2026-12-07 "passed"
        r = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, environ=environ)
        assert r.returncode == 0, r.stderr
        [line] = [x for x in r.stdout.splitlines() if x.startswith("allocation ends")]
        assert "passed" not in line and " (in " in line, line
        assert line.endswith("as read before the wall clock stepped +1h00m"), line
        assert not kinds(run_dir, "drained")
    finally:
        flag.touch()
        code, out, err = finish(p, 90)
    assert code == 0, out + err
