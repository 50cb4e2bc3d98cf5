"""A fleet that is still coming up: `fleet up` interrupted (Ctrl-C, SIGHUP) stops what it
started, and `fleet down` finds and stops it, though no connection file names it yet.
Real `fleet` commands; the preload sleeps (tests/preload_slow.py) to hold the fleet in
its start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from fleetharness import env, fleet, living, wait_for


def slow_up(run_dir: Path, cwd: Path) -> subprocess.Popen:
    """`fleet up` whose zygote takes 60 s to import its preload, in its own group."""
    return subprocess.Popen([sys.executable, "-m", "fleet", "up", "--local", "--run-dir", str(run_dir),
                             "--preload", "preload_slow"], cwd=cwd, env={**env(), "FLEET_TEST_IMPORT_SLEEP": "60"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def importing(up: subprocess.Popen) -> set[int]:
    """Once the zygote is importing the preload: the pids of coordinator, agent and zygote."""
    def tree():
        try:
            procs = psutil.Process(up.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return None
        pids, zygote = set(), False
        for p in procs:
            try:
                cmd = " ".join(p.cmdline())
            except psutil.Error:
                continue
            pids.add(p.pid)
            zygote = zygote or "fleet.node.zygote" in cmd
        # The coordinator is in its own session: it is found as the child of `fleet up`.
        return pids if zygote else None
    return wait_for(tree, 60, "the zygote importing its preload")


def kill_group(p: subprocess.Popen) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
    p.communicate(timeout=30)


def assert_gone(pids: set[int], timeout: float = 20.0) -> None:
    """None of pids is in the process table (zombies count), polled up to timeout."""
    try:
        wait_for(lambda: not living(pids), timeout, "the fleet's processes to end")
    except AssertionError:
        raise AssertionError("processes outlived the fleet:\n" + "\n".join(living(pids))) from None


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP])
def test_fleet_up_interrupted_while_its_preload_imports_stops_everything_it_started_and_exits_128_plus_the_signal(
        tmp_path, sig):
    run_dir = tmp_path / "run"
    up = slow_up(run_dir, tmp_path)
    try:
        pids = importing(up)
        os.kill(up.pid, sig)
        out, err = up.communicate(timeout=60)
        assert up.returncode == 128 + sig, err
        assert f"interrupted; stopping the fleet it was starting in {run_dir} ({sig.name})" in err, err
        assert "Aborted!" not in err and "Traceback" not in err, err
        assert_gone(pids | {up.pid})
        # Nothing is left that could still bring it up, and it gave the lease back.
        assert not (run_dir / "fleet.json").exists()
        assert not (run_dir / ".fleet" / "lease").exists()
        r = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert (r.returncode, r.stdout) == (0, f"no fleet was up in {run_dir}\n"), r.stderr
    finally:
        kill_group(up)


def test_fleet_down_stops_a_fleet_still_coming_up_and_fleet_up_says_it_was_stopped(tmp_path):
    run_dir = tmp_path / "run"
    up = slow_up(run_dir, tmp_path)
    try:
        pids = importing(up)
        coord = next(p for p in pids if "fleet.control.coordinator" in " ".join(psutil.Process(p).cmdline()))
        r = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
        assert r.returncode == 0, r.stderr
        assert r.stdout == f"fleet down: {run_dir} (a fleet still coming up, coordinator pid {coord})\n"
        out, err = up.communicate(timeout=60)
        assert up.returncode == 1
        assert f"the fleet was stopped before it was up (fleet down, or SIGTERM to its coordinator pid {coord})" \
            in err, err
        assert_gone(pids | {up.pid})
        assert not (run_dir / "fleet.json").exists()
    finally:
        kill_group(up)


def test_fleet_run_whose_embedded_coordinator_is_killed_before_its_fleet_is_up_exits_5_lost(tmp_path):
    # As a coordinator lost later (fleet.control.runner's EXIT_LOST): bring a fleet up
    # and run again. It was exit 1, "exited with status -9", with older fleets' log lines.
    (tmp_path / "s.toml").write_text('[suite]\npreload = ["preload_slow"]\n[[steps]]\nid = "a"\ncommand = "true"\n')
    run = subprocess.Popen([sys.executable, "-m", "fleet", "run", "s.toml", "--run-dir", str(tmp_path / "run")],
                           cwd=tmp_path, env={**env(), "FLEET_TEST_IMPORT_SLEEP": "60"}, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        pids = importing(run)
        coordinator = next(p for p in pids if "fleet.control.coordinator" in " ".join(psutil.Process(p).cmdline()))
        os.kill(coordinator, signal.SIGKILL)
        out, err = run.communicate(timeout=60)
        assert run.returncode == 5, out + err
        assert f"the coordinator (pid {coordinator}) was killed by SIGKILL before the fleet was up" in err, err
        assert_gone(pids)
    finally:
        kill_group(run)


def test_the_warning_signal_to_fleet_up_while_the_fleet_comes_up_goes_to_its_coordinator_once_it_is_up(tmp_path):
    # (before: SIGUSR1's default action ended `fleet up` with 138, its coordinator left running)
    import json
    run_dir = tmp_path / "run"
    up = subprocess.Popen([sys.executable, "-m", "fleet", "up", "--local", "--run-dir", str(run_dir),
                           "--walltime", "1h", "--preload", "preload_slow"], cwd=tmp_path,
                          env={**env(), "FLEET_TEST_IMPORT_SLEEP": "3"}, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True)
    pids: set[int] = set()
    try:
        pids = importing(up)
        os.kill(up.pid, signal.SIGUSR1)  # as `scancel --full --signal=USR1`, or a script's kill of its group
        out, err = up.communicate(timeout=90)
        assert up.returncode == 0, out + err
        assert ("fleet up: the warning signal (SIGUSR1) came while the fleet came up; passed to its coordinator, "
                "which drains") in err, err
        st = wait_for(lambda: (a := json.loads(fleet("status", "--run-dir", str(run_dir), "--json", cwd=tmp_path,
                                                     timeout=30).stdout)["allocation"]) and a["drained"] and a,
                      30, "the fleet drained")
        assert "warning signal (SIGUSR1)" in st["reason"], st
    finally:
        kill_group(up)
        down = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert down.returncode == 0 and down.stdout == f"fleet down: {run_dir}\n", down.stdout + down.stderr
    assert_gone(pids | {up.pid})
