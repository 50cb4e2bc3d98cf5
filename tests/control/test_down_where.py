"""`fleet down` signals only what it can know is the fleet's: a coordinator of this host,
by its pid. Real fleets, real processes.

- A connection file written on another host (a run directory on a shared file system,
  `fleet down` from a login node) names a pid of that host: here it may be anyone's
  process. Such a fleet is only asked to stop; if it does not answer, `fleet down` says
  where to run it and signals nothing here.
- A coordinator stopped with SIGSTOP (Ctrl-Z) cannot answer: it gets SIGTERM with
  SIGCONT, so it tears down as on any `fleet down`, instead of waiting out a SIGKILL.
- `fleet status` and `fleet run` of a fleet that does not answer say where its
  coordinator runs, and `fleet run` says so before waiting out a submission's 60 s."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil

from fleetharness import assert_nothing_left, events, finish, fleet, spawn, wait_for


def _up(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True, timeout=60)
    return run_dir


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_fleet_down_of_a_fleet_of_another_host_that_does_not_answer_signals_nothing_here(tmp_path):
    run_dir = _up(tmp_path)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    try:
        # The connection file a coordinator of another host would have left: its pid is
        # a process of this host that has nothing to do with any fleet.
        conn = json.loads((run_dir / "fleet.json").read_text())
        other = tmp_path / "shared"  # (that fleet's own run directory: not a copy of another's file)
        conn.update(host="node9.elsewhere.invalid", pid=bystander.pid, client=f"tcp://127.0.0.1:{_free_port()}",
                    run_dir=str(other))
        other.mkdir()
        fd = os.open(other / "fleet.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(conn, f)
        r = fleet("down", "--run-dir", str(other), cwd=tmp_path, timeout=90)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "runs on node9.elsewhere.invalid" in r.stderr and f"ssh node9.elsewhere.invalid fleet down --run-dir {other}" in r.stderr, r.stderr
        assert bystander.poll() is None and psutil.Process(bystander.pid).status() != psutil.STATUS_STOPPED
        assert (other / "fleet.json").exists()  # not ours to remove: that fleet may well be up
        # The fleet of this host was not touched either.
        st = fleet("status", "--run-dir", str(run_dir), "--json", cwd=tmp_path, timeout=60)
        assert st.returncode == 0, st.stderr
    finally:
        bystander.kill()
        bystander.wait(timeout=10)
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)


def test_fleet_down_of_a_stopped_coordinator_continues_it_and_it_tears_down(tmp_path):
    run_dir = _up(tmp_path)
    coordinator = json.loads((run_dir / "fleet.json").read_text())["pid"]
    try:
        os.kill(coordinator, signal.SIGSTOP)
        wait_for(lambda: psutil.Process(coordinator).status() == psutil.STATUS_STOPPED, 10, "the coordinator stopped")
        r = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
        assert r.returncode == 0, r.stdout + r.stderr
        # Its own teardown ran (a SIGKILL would have left both the file and no record).
        assert not (run_dir / "fleet.json").exists()
        assert [e for e in events(run_dir) if e["kind"] == "fleet_down"]
    finally:
        try:
            os.kill(coordinator, signal.SIGCONT)
        except ProcessLookupError:
            pass
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)


def test_fleet_status_and_run_of_a_stopped_coordinator_say_it_is_stopped_and_how_to_continue_it(tmp_path):
    run_dir = _up(tmp_path)
    coordinator = json.loads((run_dir / "fleet.json").read_text())["pid"]
    suite = tmp_path / "s.toml"
    suite.write_text('[suite]\nname = "s"\n[[steps]]\nid = "a"\ncommand = "true"\n')
    try:
        os.kill(coordinator, signal.SIGSTOP)
        wait_for(lambda: psutil.Process(coordinator).status() == psutil.STATUS_STOPPED, 10, "the coordinator stopped")
        for args in (("status",), ("run", str(suite))):
            r = fleet(*args, "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
            assert r.returncode == 1, (args, r.stdout, r.stderr)
            assert f"pid {coordinator} on this host, is stopped (SIGSTOP" in r.stderr, (args, r.stderr)
            assert f"kill -CONT {coordinator}" in r.stderr and "did not answer" not in r.stderr, (args, r.stderr)
        os.kill(coordinator, signal.SIGCONT)
        st = fleet("status", "--run-dir", str(run_dir), "--json", cwd=tmp_path, timeout=60)
        assert st.returncode == 0 and json.loads(st.stdout)["pid"] == coordinator, st.stderr
    finally:
        try:
            os.kill(coordinator, signal.SIGCONT)
        except ProcessLookupError:
            pass
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)


def test_fleet_status_run_and_cancel_on_a_fleet_of_another_host_that_does_not_answer_say_where_it_runs_and_what_to_do(
        tmp_path, background):
    run_dir = _up(tmp_path)
    try:
        conn = json.loads((run_dir / "fleet.json").read_text())
        other = tmp_path / "shared"
        conn.update(host="node9.elsewhere.invalid", pid=1, client=f"tcp://127.0.0.1:{_free_port()}",
                    run_dir=str(other))
        other.mkdir()
        fd = os.open(other / "fleet.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(conn, f)
        suite = tmp_path / "s.toml"
        suite.write_text('[suite]\nname = "s"\n[[steps]]\nid = "a"\ncommand = "true"\n')
        # All three at once: each waits out the same 10 s for an answer (one after the other, 30 s).
        for args in (("status", "--run-dir", str(other)), ("run", str(suite), "--run-dir", str(other)),
                     ("cancel", "--all", "--run-dir", str(other))):
            background.append(spawn(*args, cwd=tmp_path))
        for args, p in zip(("status", "run", "cancel"), background):
            rc, out, err = finish(p, timeout=90)
            assert rc == 1, (args, out, err)
            assert "did not answer within 10 s" in err and "it runs on node9.elsewhere.invalid, pid 1" in err \
                and "Traceback" not in err, (args, err)
            # Only `fleet status` has --ssh and --via: the others are to be run there.
            if args == "status":
                assert "--ssh LOGIN" in err, err
            else:
                assert f"ssh node9.elsewhere.invalid fleet {args} --run-dir {other}" in err \
                    and "--ssh" not in err and "--via" not in err, (args, err)
        assert not (other / "steps").exists()  # nothing was started, nor submitted
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)
