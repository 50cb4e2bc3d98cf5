"""The signals that stop a coordinator, through real processes: SIGHUP stops it as
SIGTERM does (its steps their grace, their ends recorded, `fleet_down` naming the
signal, a line in coordinator.log), and a `fleet run` following it says it was stopped
(exit 1), not lost (5). Before 2026-12-07 SIGHUP killed it as a crash: no teardown, no
`fleet_down`, no exit record for its running steps. The process table is checked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from fleetharness import assert_nothing_left, env, events, finish, fleet, wait_for, write_suite


def coordinator_pid(run_dir: Path) -> int:
    [starting] = [e for e in events(run_dir) if e["kind"] == "fleet_starting"]
    return starting["pid"]


def test_sighup_to_the_coordinator_stops_the_fleet_as_sigterm_does_recording_its_steps_and_the_signal(tmp_path):
    write_suite(tmp_path / "s.toml", '[suite]\nname = "hup"\n[[steps]]\nid = "x"\n'
                                     f'command = "trap \'\' TERM; sleep 60 # {tmp_path}"\ngrace = 2\n')
    run_dir = tmp_path / "run"
    up = fleet("up", "--run-dir", "run", cwd=tmp_path, timeout=120)
    assert up.returncode == 0, up.stderr
    p = subprocess.Popen([sys.executable, "-m", "fleet", "run", "s.toml", "--run-dir", "run"], cwd=tmp_path,
                         env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        wait_for(lambda: any(e["kind"] == "started" for e in events(run_dir)), 60, "the step running")
        os.kill(coordinator_pid(run_dir), signal.SIGHUP)
        code, out, err = finish(p)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate(timeout=30)
        fleet("down", "--run-dir", "run", cwd=tmp_path, timeout=120)  # (nothing to stop, unless the test failed)
    assert code == 1, (code, out, err)
    assert "it was stopped by SIGHUP to its coordinator" in err, err
    ev = events(run_dir)
    [down] = [e for e in ev if e["kind"] == "fleet_down"]
    assert down.get("signal") == "SIGHUP" and "reason" not in down, down
    [ended] = [e for e in ev if e["kind"] == "exit"]
    assert ended["step"] == "x" and ended["outcome"] == "interrupted", ended
    assert "SIGHUP: the fleet stops" in (run_dir / "coordinator.log").read_text()
    assert_nothing_left(run_dir, tag=str(tmp_path))


def test_fleet_down_leaves_a_line_in_coordinator_log_and_a_fleet_down_record_naming_no_signal(tmp_path):
    run_dir = tmp_path / "run"
    assert fleet("up", "--run-dir", "run", cwd=tmp_path, timeout=120).returncode == 0
    down = fleet("down", "--run-dir", "run", cwd=tmp_path, timeout=120)
    assert down.returncode == 0, down.stderr
    [rec] = [e for e in events(run_dir) if e["kind"] == "fleet_down"]
    assert "signal" not in rec and "reason" not in rec, rec
    assert "asked to stop (fleet down): the fleet stops" in (run_dir / "coordinator.log").read_text()
    assert_nothing_left(run_dir)


def test_sigterm_to_the_coordinator_is_said_in_coordinator_log_and_named_in_its_fleet_down_record(tmp_path):
    run_dir = tmp_path / "run"
    assert fleet("up", "--run-dir", "run", cwd=tmp_path, timeout=120).returncode == 0
    try:
        os.kill(coordinator_pid(run_dir), signal.SIGTERM)
        wait_for(lambda: any(e["kind"] == "fleet_down" for e in events(run_dir)), 60, "the fleet down")
    finally:
        fleet("down", "--run-dir", "run", cwd=tmp_path, timeout=120)
    [rec] = [e for e in events(run_dir) if e["kind"] == "fleet_down"]
    assert rec.get("signal") == "SIGTERM", rec
    assert "SIGTERM: the fleet stops" in (run_dir / "coordinator.log").read_text()
    assert_nothing_left(run_dir)


def test_the_death_of_fleet_run_stops_its_embedded_fleet_saying_so_in_coordinator_log(tmp_path):
    # Its coordinator's death signal (SIGTERM) stopped it, and nothing said why.
    write_suite(tmp_path / "s.toml", f'[[steps]]\nid = "x"\ncommand = "sleep 60 # {tmp_path}"\n')
    run_dir = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-m", "fleet", "run", "s.toml", "--run-dir", "run"], cwd=tmp_path,
                         env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        wait_for(lambda: any(e["kind"] == "started" for e in events(run_dir)), 60, "the step running")
        os.kill(p.pid, signal.SIGKILL)  # fleet run alone: its fleet is in a session of its own
        p.communicate(timeout=30)
        wait_for(lambda: any(e["kind"] == "fleet_down" for e in events(run_dir)), 60, "the fleet down")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate(timeout=30)
    [rec] = [e for e in events(run_dir) if e["kind"] == "fleet_down"]
    assert rec.get("signal") == "SIGTERM", rec
    said = (run_dir / "coordinator.log").read_text()
    [line] = [x for x in said.splitlines() if "SIGTERM (" in x]
    assert f"the process that started it, pid {p.pid}, " in line and "): the fleet stops" in line, said
    assert_nothing_left(run_dir, tag=str(tmp_path))
