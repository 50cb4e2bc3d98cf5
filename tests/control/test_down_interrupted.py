"""Ctrl-C on `fleet down` while the fleet's steps take their grace, through real
processes: it says the fleet goes on stopping and how to see it, and exits 130 (before
2026-12-07 click's `Aborted!` and exit 1); the fleet does go down. The process table is
checked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from fleetharness import assert_nothing_left, env, events, finish, fleet, wait_for, write_suite


def test_ctrl_c_on_fleet_down_during_the_steps_grace_says_the_fleet_goes_on_stopping_and_exits_130(tmp_path):
    term = tmp_path / "term"
    write_suite(tmp_path / "s.toml", '[[steps]]\nid = "x"\n'
                                     f'command = "trap \'touch {term}\' TERM; while true; do sleep 0.1; done"\n'
                                     'grace = 10\n')
    run_dir = tmp_path / "run"
    assert fleet("up", "--run-dir", "run", cwd=tmp_path, timeout=120).returncode == 0
    procs = []

    def start(*args: str) -> subprocess.Popen:
        procs.append(subprocess.Popen([sys.executable, "-m", "fleet", *args, "--run-dir", "run"], cwd=tmp_path,
                                      env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      start_new_session=True))
        return procs[-1]
    try:
        run = start("run", "s.toml")
        wait_for(lambda: any(e["kind"] == "started" for e in events(run_dir)), 60, "the step running")
        down = start("down")
        wait_for(lambda: term.exists(), 60, "the step told to stop (its grace begins)")
        os.killpg(down.pid, signal.SIGINT)  # as a terminal's Ctrl-C
        code, out, err = finish(down)
        wait_for(lambda: any(e["kind"] == "fleet_down" for e in events(run_dir)), 60, "the fleet down")
        finish(run)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate(timeout=30)
        fleet("down", "--run-dir", "run", cwd=tmp_path, timeout=120)  # (nothing to stop, unless the test failed)
    assert code == 130, (code, out, err)
    assert "Aborted!" not in err and "Traceback" not in err, err
    assert "fleet down: interrupted; a fleet it asked to stop goes on stopping" in err, err
    assert f"fleet status --run-dir {run_dir}" in err, err
    [ended] = [e for e in events(run_dir) if e["kind"] == "exit"]
    assert ended["outcome"] == "interrupted", ended
    assert_nothing_left(run_dir, tag=str(tmp_path))
