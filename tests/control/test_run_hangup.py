"""SIGHUP to `fleet run` (its terminal closed, its ssh connection dropped), through real
processes: it stops its embedded fleet as for SIGTERM, waits for it to be down, sums up
and exits 129 (fleet.control.runner, fleet.control.stopsignals). Before 2026-12-07 it
died of the signal at once (no summary, its fleet still stopping in the background). A
terminal that went away answers writes with EIO: that must not cut the stopping short.
The process table is checked."""

from __future__ import annotations

import fcntl
import os
import pty
import signal
import subprocess
import sys
import termios
from pathlib import Path

from fleetharness import assert_nothing_left, env, events, finish, fleet_pids, living, wait_for, write_suite

STUBBORN = "trap '' TERM; sleep 60 # {tag}"  # stopping it takes its grace


def stubborn_suite(tmp_path: Path) -> Path:
    body = "".join(f'[[steps]]\nid = "{i}"\ncommand = "{STUBBORN.format(tag=tmp_path)}"\ngrace = 3\n' for i in "xy")
    return write_suite(tmp_path / "s.toml", '[suite]\nname = "hup"\n' + body)


def both_running(run_dir: Path) -> bool:
    return sum(e["kind"] == "started" for e in events(run_dir)) == 2


def killed(p: subprocess.Popen) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate(timeout=30)


def test_sighup_to_fleet_run_stops_its_embedded_fleet_sums_up_and_exits_129_once_nothing_of_it_is_left(tmp_path):
    stubborn_suite(tmp_path)
    run_dir = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-m", "fleet", "run", "s.toml", "--run-dir", "run", "--nodes", "2"],
                         cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        wait_for(lambda: both_running(run_dir), 60, "both steps running")
        os.killpg(p.pid, signal.SIGHUP)  # as a closed terminal signals its session
        code, out, err = finish(p)
        left = living(fleet_pids(run_dir))  # at once: it returned only once its fleet was down
    finally:
        killed(p)
    assert code == 129, (code, out, err)
    assert "Traceback" not in err and "Aborted!" not in err, err
    assert "fleet: interrupted; stopping the embedded fleet" in err, err
    assert "; interrupted: 2 running, stopped (interrupted), and 0 not run: run the suite again" in out, out
    assert "  to go on: run the same command again" in out, out
    assert not left, "processes outlived fleet run:\n" + "\n".join(left)
    ev = events(run_dir)
    assert sorted(e["outcome"] for e in ev if e["kind"] == "exit") == ["interrupted", "interrupted"], ev
    assert [e["kind"] for e in ev].count("fleet_down") == 1, ev
    assert_nothing_left(run_dir, tag=str(tmp_path))


def test_a_closed_terminal_ends_fleet_run_with_129_its_fleet_down_and_no_traceback_though_writes_fail(tmp_path):
    # The terminal is a pseudo-terminal, fleet run's controlling one; closing its master
    # side is a closed terminal window: SIGHUP, and EIO on every write after.
    stubborn_suite(tmp_path)
    run_dir = tmp_path / "run"
    master, slave = pty.openpty()
    with open(tmp_path / "err", "w") as err_file:
        p = subprocess.Popen([sys.executable, "-m", "fleet", "run", "s.toml", "--run-dir", "run", "--nodes", "2"],
                             cwd=tmp_path, env=env(), stdin=slave, stdout=slave, stderr=err_file,
                             start_new_session=True, preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
    os.close(slave)
    try:
        try:
            wait_for(lambda: both_running(run_dir), 60, "both steps running")
        finally:
            os.close(master)  # the terminal goes away
        code = p.wait(timeout=90)
        left = living(fleet_pids(run_dir))  # at once: it returned only once its fleet was down
    finally:
        killed(p)
    err = (tmp_path / "err").read_text()
    assert code == 129, (code, err)
    assert "Traceback" not in err and "Exception ignored" not in err and "Aborted!" not in err, err
    assert not left, "processes outlived fleet run:\n" + "\n".join(left)
    ev = events(run_dir)
    assert sorted(e["outcome"] for e in ev if e["kind"] == "exit") == ["interrupted", "interrupted"], ev
    assert [e["kind"] for e in ev].count("fleet_down") == 1, ev
    assert_nothing_left(run_dir, tag=str(tmp_path))
