"""A coordinator killed with SIGKILL leaves its fleet.json and its lease behind, and its
pid may go to any process since: that process is not the fleet. `fleet status`, `fleet
down` and `fleet up` take the files as stale, signal nothing, and a new fleet comes up
(fleet.control.identity). Real fleets, real processes; the pid used again is simulated
by writing a bystander's pid into the files, as the kernel would have handed it out."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from fleetharness import assert_nothing_left, fleet, wait_for

from fleet.control import identity, starting

NOBODY = 65534


def _killed_fleet(tmp_path: Path) -> tuple[Path, dict]:
    """A fleet up, its coordinator killed with -9 (its agents end with it): the run
    directory and the connection file it left."""
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "2", cwd=tmp_path, check=True, timeout=90)
    conn = json.loads((run_dir / "fleet.json").read_text())
    os.kill(conn["pid"], signal.SIGKILL)
    assert_nothing_left(run_dir)
    return run_dir, conn


def as_user(uid: int, call) -> str:
    """repr(call()) (or the exception's type name) in a child of this process forked and
    become the user uid (psutil and fleet already imported: another user cannot read
    this interpreter's files)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # (the child writes one line and leaves with os._exit: nothing of pytest's runs)
        try:
            os.close(r)
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            try:
                out = repr(call())
            except BaseException as e:
                out = type(e).__name__
            os.write(w, out.encode())
        finally:
            os._exit(0)
    os.close(w)
    try:
        with os.fdopen(r, "rb") as f:
            return f.read().decode()
    finally:
        os.waitpid(pid, 0)


def _lease_at(run_dir: Path) -> float:
    return json.loads((run_dir / ".fleet" / "lease").read_text()).get("at") or 0.0


def _name(run_dir: Path, conn: dict, pid: int) -> None:
    """fleet.json (written again, 0600) and the lease name pid."""
    path = run_dir / "fleet.json"
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({**conn, "pid": pid}, f)
    lease = run_dir / ".fleet" / "lease"
    lease.write_text(json.dumps({**json.loads(lease.read_text()), "pid": pid}))


def test_a_process_that_got_a_dead_coordinators_pid_is_left_alone_and_a_new_fleet_comes_up(tmp_path):
    run_dir, conn = _killed_fleet(tmp_path)
    # A process that got the pid since started after the records were written, by more
    # than the start time's slack (identity.SLACK_S), as its start time reads (up to a
    # second early): on a quick machine the bystander would otherwise start within it,
    # and be taken for the fleet still (it may be one).
    while time.time() <= max(conn["started"], _lease_at(run_dir)) + 2 * identity.SLACK_S + 0.5:
        time.sleep(0.05)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    try:
        _name(run_dir, conn, bystander.pid)
        st = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert st.returncode == 1 and f"no fleet is up in {run_dir}" in st.stderr, st.stderr
        assert "did not answer" not in st.stderr and not (run_dir / "fleet.json").exists(), st.stderr
        _name(run_dir, conn, bystander.pid)
        r = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert r.returncode == 0 and f"no fleet was up in {run_dir}" in r.stdout, r.stdout + r.stderr
        assert bystander.poll() is None and psutil.Process(bystander.pid).status() != psutil.STATUS_STOPPED
        assert not (run_dir / "fleet.json").exists()
        # The lease still names the bystander: the new fleet takes it over at once (not
        # after --stale-after), the bystander untouched.
        _name(run_dir, conn, bystander.pid)
        up = fleet("up", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, timeout=90)
        assert up.returncode == 0, up.stdout + up.stderr
        assert "its holder is gone" in (run_dir / "coordinator.log").read_text()
        assert bystander.poll() is None
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=60)
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait(timeout=10)
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)


def test_a_process_older_than_the_record_is_not_taken_for_gone_nor_signalled_as_its_coordinator(tmp_path):
    # This process stands in for one the command line cannot tell (a coordinator started
    # some other way): only a process started after the record was written got its pid since.
    here = os.getpid()
    assert not identity.gone(here, tmp_path, time.time())
    assert identity.coordinator(here, tmp_path) is None  # but never signalled as the coordinator
    assert identity.gone(here, tmp_path, psutil.Process().create_time() - 60)
    assert identity.gone(2 ** 22 + 7, tmp_path, time.time())  # no such process (beyond pid_max)


@pytest.mark.skipif(os.getuid() != 0, reason="starting a process as another user (setpriv) needs root")
def test_another_users_process_on_a_dead_coordinators_pid_is_never_taken_for_it_nor_signalled(tmp_path):
    # Any user may read another's command line in /proc, and may start one that reads
    # as a coordinator of this run directory; it started before the records named it.
    run_dir, conn = _killed_fleet(tmp_path)
    theirs = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable,
                               "-c", "import time; time.sleep(300)", "-m", identity.MODULE, "--run-dir", str(run_dir)],
                              start_new_session=True)
    try:
        def looks_like_ours() -> bool:
            try:
                p = psutil.Process(theirs.pid)
                return p.uids().real == NOBODY and identity.MODULE in p.cmdline()
            except psutil.Error:
                return False
        wait_for(looks_like_ours, timeout=30, what="the other user's process")
        _name(run_dir, conn, theirs.pid)
        assert identity.coordinator(theirs.pid, run_dir) is None
        assert identity.gone(theirs.pid, run_dir, time.time())
        r = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
        assert f"no fleet was up in {run_dir}" in r.stdout, r.stdout + r.stderr
        _name(run_dir, conn, theirs.pid)
        up = fleet("up", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, timeout=90)
        assert up.returncode == 0, up.stdout + up.stderr
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=60)
        assert theirs.poll() is None
        # Asked to stop another user's process anyway (one that became so between a look
        # and the signal), fleet cannot, and says so instead of raising: as that user, this one's.
        mine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
        try:
            assert as_user(NOBODY, lambda: starting.stop(mine.pid, 1.0)) == "False"
            assert mine.poll() is None
        finally:
            mine.kill()
            mine.wait(timeout=10)
    finally:
        theirs.kill()
        theirs.wait(timeout=10)
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)
