"""Ctrl-C on `fleet run` as a terminal sends it: SIGINT to its whole process group,
through real processes. With an embedded fleet: the end summary (counts, the steps
stopped by name, where the report and logs are, the command that goes on), exit 130,
nothing of the fleet left, and a rerun of the same command that finishes the rest without
running again what succeeded (the stopped step used no attempt). With a fleet `fleet up`
started: `fleet run` lets go and the fleet goes on (user-guide.md), and says so with how
to follow or stop it (fleet.control.runner, fleet.control.interrupts)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from fleetharness import assert_nothing_left, env, events, fleet, fleet_pids, living, wait_for, write_suite


def suite_of(tmp_path: Path) -> Path:
    """quick (true), long (sleeps as long as the file `seconds` says: 60 s the first time,
    short for the rerun, with the same definition) and after (needs long)."""
    (tmp_path / "seconds").write_text("60")
    return write_suite(tmp_path / "s.toml", '[suite]\nname = "cc"\n'
                                            '[[steps]]\nid = "quick"\ncommand = "true"\n'
                                            f'[[steps]]\nid = "long"\ncommand = "sleep $(cat {tmp_path}/seconds)"\n'
                                            '[[steps]]\nid = "after"\ncommand = "true"\ndeps = ["long"]\n')


def start(tmp_path: Path, *args: str) -> subprocess.Popen:
    """`fleet run s.toml --run-dir run ARGS` in a process group of its own, as a shell's
    job, its output in the file `out` (read while it runs)."""
    with open(tmp_path / "out", "w") as out:
        return subprocess.Popen([sys.executable, "-m", "fleet", "run", "s.toml", "--run-dir", "run", *args],
                                cwd=tmp_path, env=env(), stdout=out, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)


def quick_succeeded(tmp_path: Path) -> bool:
    """fleet run said that quick succeeded."""
    return "[1/3]  succeeded  quick" in (tmp_path / "out").read_text()


def ctrl_c(p: subprocess.Popen, tmp_path: Path, again: bool = False, timeout: float = 90) -> tuple[int, str, str]:
    """SIGINT to p's process group, as a terminal's Ctrl-C; with `again`, once more every
    0.05 s until it ends (a user pressing it again and again); then its exit status,
    output and error output."""
    os.killpg(p.pid, signal.SIGINT)
    deadline = time.monotonic() + timeout
    try:
        while again and p.poll() is None and time.monotonic() < deadline:
            try:
                os.killpg(p.pid, signal.SIGINT)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        _, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate(timeout=30)
    return p.returncode, (tmp_path / "out").read_text(), err


def test_ctrl_c_of_fleet_run_says_what_it_stopped_and_how_to_go_on_exits_130_and_the_same_command_goes_on(tmp_path):
    # Before: only counts ("1 running, stopped (interrupted)"), nothing of which step was
    # stopped, where the report and the logs are, or which command goes on.
    suite_of(tmp_path)
    run_dir = tmp_path / "run"
    p = start(tmp_path)
    try:
        wait_for(lambda: quick_succeeded(tmp_path), 60, "quick to succeed")
        wait_for(lambda: any(e["kind"] == "started" and e["step"] == "long" for e in events(run_dir)), 60, "long")
    except BaseException:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate(timeout=30)
        raise
    code, out, err = ctrl_c(p, tmp_path)
    left = living(fleet_pids(run_dir))  # at once: fleet run returned only once its fleet was down
    assert code == 130, (code, out, err)
    assert "Aborted!" not in err and "Traceback" not in err, err
    assert "suite 'cc': 1 succeeded in " in out, out
    assert "; interrupted: 1 running, stopped (interrupted), and 1 not run: " in out, out
    assert "  interrupted (1, no attempt used): long\n" in out, out
    assert f"  report: fleet report {run_dir}; step logs: {run_dir}/steps/<id>/log" in out, out
    assert "  to go on: run the same command again (fleet run s.toml --run-dir run): steps that succeeded are " \
           "not run again" in out, out
    assert not left, "processes outlived fleet run:\n" + "\n".join(left)
    assert_nothing_left(run_dir)
    [stopped] = [e for e in events(run_dir) if e["kind"] == "exit" and e["step"] == "long"]
    assert stopped["outcome"] == "interrupted", stopped

    (tmp_path / "seconds").write_text("0.2")
    again = fleet("run", "s.toml", "--run-dir", "run", cwd=tmp_path, timeout=120)
    assert again.returncode == 0, (again.stdout, again.stderr)
    assert "suite 'cc': 1 skipped, 2 succeeded in " in again.stdout, again.stdout
    starts = [(e["step"], e["attempt"]) for e in events(run_dir) if e["kind"] == "start"]
    assert starts == [("quick", 1), ("long", 1), ("long", 1), ("after", 1)], starts  # (interrupted: no attempt)


def test_ctrl_c_pressed_again_and_again_while_fleet_run_stops_and_sums_up_still_exits_130_with_its_summary(
        tmp_path):
    # A Ctrl-C after the fleet was down, while the summary was made, escaped as click's
    # "Aborted!" and exit 1, with no summary.
    suite_of(tmp_path)
    run_dir = tmp_path / "run"
    p = start(tmp_path)
    try:
        wait_for(lambda: quick_succeeded(tmp_path), 60, "quick to succeed")
    except BaseException:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate(timeout=30)
        raise
    code, out, err = ctrl_c(p, tmp_path, again=True)
    assert code == 130, (code, out, err)
    assert "Aborted!" not in err and "Traceback" not in err, err
    assert "suite 'cc': " in out and "; interrupted: " in out, out
    assert_nothing_left(run_dir)


def test_ctrl_c_of_fleet_run_on_a_fleet_that_is_up_lets_the_fleet_go_on_and_says_how_to_follow_or_stop_it(tmp_path):
    suite_of(tmp_path)
    run_dir = tmp_path / "run"
    up = fleet("up", "--run-dir", "run", cwd=tmp_path, timeout=120)
    assert up.returncode == 0, up.stderr
    try:
        p = start(tmp_path)
        try:
            wait_for(lambda: quick_succeeded(tmp_path), 60, "quick to succeed")
        except BaseException:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate(timeout=30)
            raise
        code, out, err = ctrl_c(p, tmp_path)
        assert code == 130, (code, out, err)
        assert "suite 'cc': 1 succeeded in " in out, out
        assert "; interrupted: 1 running and 1 not started yet, which the fleet goes on with" in out, out
        assert f"follow it with fleet status --run-dir {run_dir}; stop it with fleet down --run-dir {run_dir}" in out
        assert f"  report: fleet report {run_dir}; step logs: {run_dir}/steps/<id>/log" in out, out
        # The fleet goes on: long is still running, stopped by no one.
        assert not [e for e in events(run_dir) if e["kind"] == "exit" and e["step"] == "long"]
        st = fleet("status", "--run-dir", "run", "--json", cwd=tmp_path, timeout=60)
        assert st.returncode == 0 and '"long"' in st.stdout, (st.stdout, st.stderr)
    finally:
        down = fleet("down", "--run-dir", "run", cwd=tmp_path, timeout=120)
    assert down.returncode == 0, down.stderr
    assert_nothing_left(run_dir)
