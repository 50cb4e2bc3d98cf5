"""Signals to `fleet run` while its embedded fleet comes up or goes down, through real
processes: the batch system's warning (SIGUSR1) while the fleet comes up is kept and
drains it once it is up (exit 3, nothing started: fleet.control.warnsignal); a second
Ctrl-C while the fleet goes down changes nothing: `fleet run` exits 130 once the fleet
is down, nothing of it left (fleet.control.runner). The process table is checked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from fleetharness import assert_nothing_left, env, events, fleet_pids, living, wait_for, write_suite


def run_in_background(tmp_path: Path, suite: Path, *args: str, **extra_env) -> subprocess.Popen:
    """`fleet run` in its own session, as a job script's background `fleet run &`."""
    return subprocess.Popen([sys.executable, "-m", "fleet", "run", str(suite), "--run-dir", str(tmp_path / "run"),
                             *args], cwd=tmp_path, env={**env(), **extra_env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def finish(p: subprocess.Popen, timeout: float = 90) -> tuple[int, str, str]:
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate(timeout=30)
        raise AssertionError(f"{p.args} timed out\nstdout:\n{out}\nstderr:\n{err}")
    return p.returncode, out, err


def zygote_importing(run: subprocess.Popen) -> bool:
    """The embedded fleet is coming up: its zygote imports the (slow) preload."""
    try:
        procs = psutil.Process(run.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return False
    for p in procs:
        try:
            if "fleet.node.zygote" in " ".join(p.cmdline()):
                return True
        except psutil.Error:
            pass
    return False


def test_the_warning_signal_while_the_embedded_fleet_comes_up_drains_it_once_up_and_fleet_run_exits_3(tmp_path):
    # SIGUSR1's default action killed fleet run (138) while its fleet came up: no drain,
    # no exit 3, no resubmission. Now it is kept, and passed on once the fleet is up.
    suite = write_suite(tmp_path / "s.toml", '[suite]\npreload = ["preload_slow"]\n'
                                             '[[steps]]\nid = "a"\ncommand = "true"\n'
                                             '[[steps]]\nid = "b"\ncommand = "true"\ndeps = ["a"]\n')
    run = run_in_background(tmp_path, suite, "--walltime", "40m", FLEET_TEST_IMPORT_SLEEP="4")
    try:
        wait_for(lambda: zygote_importing(run), 60, "the embedded fleet coming up")
        assert not (tmp_path / "run" / "events.jsonl").exists() or not any(
            e["kind"] == "submitted" for e in events(tmp_path / "run")), "the fleet was up already"
        os.kill(run.pid, signal.SIGUSR1)
        code, out, err = finish(run)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.communicate(timeout=30)
    assert code == 3, (code, out, err)
    ev = events(tmp_path / "run")
    [drained] = [e for e in ev if e["kind"] == "drained"]
    assert "warning signal (SIGUSR1)" in drained["reason"], drained
    assert not [e for e in ev if e["kind"] == "started"], "a step started after the warning"
    assert "2 not_started" in out, out
    assert_nothing_left(tmp_path / "run")


def test_a_second_ctrl_c_while_the_embedded_fleet_stops_exits_130_once_nothing_of_it_is_left(tmp_path):
    # The steps ignore SIGTERM: stopping them takes their 10-s grace. The second Ctrl-C
    # came 1 s into it; it escaped as click's "Aborted!" (exit 1) with the coordinator,
    # agents and steps still alive for the rest of the grace.
    suite = write_suite(tmp_path / "c2.toml", f'[[steps]]\nid = "x"\ncommand = "trap \'\' TERM; sleep 60 # {tmp_path}"\n'
                                              'grace = 10\n'
                                              f'[[steps]]\nid = "y"\ncommand = "trap \'\' TERM; sleep 60 # {tmp_path}"\n'
                                              'grace = 10\n')
    run = run_in_background(tmp_path, suite, "--nodes", "2", "--heartbeat", "0.2", "--heartbeat-timeout", "5")
    run_dir = tmp_path / "run"
    try:
        wait_for(lambda: sum(e["kind"] == "started" for e in events(run_dir)) == 2, 60, "both steps running")
        os.kill(run.pid, signal.SIGINT)
        time.sleep(1.0)  # into the steps' grace (the embedded fleet is stopping)
        os.kill(run.pid, signal.SIGINT)
        code, out, err = finish(run)
        left = living(fleet_pids(run_dir))  # at once: it returned only once its fleet was down
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.communicate(timeout=30)
    assert code == 130, (code, out, err)
    assert "Aborted!" not in err and "Traceback" not in err, err
    assert "please wait" in err, err
    # (the steps' SIGKILL is 9 s away when a fleet run that did not wait returns)
    assert not left, "processes outlived fleet run:\n" + "\n".join(left)
    assert_nothing_left(run_dir, tag=str(tmp_path))


def test_ctrl_c_of_fleet_run_prints_what_ended_was_stopped_and_did_not_run_and_its_report_says_the_fleet_stopped(
        tmp_path):
    # Before 2026-12-06 fleet run said nothing of the suite after a Ctrl-C (exit 130 only),
    # and its report had the steps left waiting "for cores" while the fleet went down.
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "intr"\n[[steps]]\nid = "n/{i}"\narray = "0-9"\n'
                                             'call = "fleet_steps:nap"\nargs = { seconds = 30 }\n')
    run = run_in_background(tmp_path, suite, "--nodes", "2")
    run_dir = tmp_path / "run"
    try:
        wait_for(lambda: sum(e["kind"] == "started" for e in events(run_dir)) == 2, 60, "two steps running")
        os.kill(run.pid, signal.SIGINT)
        code, out, err = finish(run)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.communicate(timeout=30)
    assert code == 130, (code, out, err)
    [summary] = [line for line in out.splitlines() if line.startswith("suite 'intr': none ended in ")]
    assert summary.endswith("; interrupted: 2 running, stopped (interrupted), and 8 not run: run the "
                                         "suite again to finish them (steps that succeeded are skipped)"), out
    r = subprocess.run([sys.executable, "-m", "fleet", "report", str(run_dir), "--json"], cwd=tmp_path, env=env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    import json
    j = json.loads(r.stdout)
    assert j["counts"] == {"interrupted": 2, "not run": 8}, j["counts"]
    assert j["waits"]["stopping"]["steps"] == 8, j["waits"]
    stopped = min(e["t"] for e in events(run_dir) if e["kind"] == "exit") - j["t0"]
    late = [st for st in j["stretches"] if st["from"] >= stopped - 1e-6]
    assert late and all(set(st["by_category"]) == {"stopping"} for st in late), j["stretches"]
    assert_nothing_left(run_dir)
