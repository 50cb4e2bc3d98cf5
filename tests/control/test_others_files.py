"""Connection files and run directories that are not this `fleet` command's to use: a
colleague's run directory (fleet makes it 0700), a colleague's live fleet in a run
directory they opened to their group, and a connection file an earlier, killed `fleet
run` of the same pid left. Real `fleet` commands in fresh processes. "Another user" is
uid 65534 (nobody); "this user", looking at it, is root without the capabilities that
let root read anything (setpriv), so only as root with setpriv."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetharness import assert_nothing_left, completed, env, write_suite

from fleet.wire import connection

NOBODY = 65534
as_plain_user = pytest.mark.skipif(os.getuid() != 0 or not shutil.which("setpriv"),
                                   reason="another user's run directory, and a user it is closed to, need root "
                                          "and setpriv")
SUITE = '[suite]\nname = "q"\nrun_dir = "theirs"\n[[steps]]\nid = "a"\ncommand = "true"\n'


def as_colleague(*args: str, cwd: Path, environ: dict | None = None) -> subprocess.CompletedProcess:
    """`fleet ARGS` as a user whom other users' files are closed to (root without
    CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH)."""
    return completed(["setpriv", "--bounding-set", "-dac_override,-dac_read_search", sys.executable, "-m", "fleet",
                      *args], timeout=90, cwd=cwd, env={**env(), **(environ or {})}, text=True)


def _theirs(tmp_path: Path, mode: int) -> Path:
    run_dir = tmp_path / "theirs"
    run_dir.mkdir(mode=mode)
    run_dir.chmod(mode)
    return run_dir


@as_plain_user
def test_fleet_run_status_down_and_cancel_in_a_colleagues_closed_run_directory_say_whose_it_is(tmp_path):
    run_dir = _theirs(tmp_path, 0o700)
    os.chown(run_dir, NOBODY, NOBODY)
    write_suite(tmp_path / "q.toml", SUITE)
    said = (f"cannot use run directory {run_dir}: it belongs to another user, "
            f"{'nobody (uid 65534)' if _named(NOBODY) else 'uid 65534'}, and this user cannot look into it (mode 0700)")
    for argv, environ in ((["run", "q.toml", "--nodes", "1"], {}), (["run", "q.toml"], {"FLEET_RUN_DIR": str(run_dir)}),
                          (["status"], {"FLEET_RUN_DIR": str(run_dir)}), (["down"], {"FLEET_RUN_DIR": str(run_dir)}),
                          (["cancel", "--all"], {"FLEET_RUN_DIR": str(run_dir)})):
        r = as_colleague(*argv, cwd=tmp_path, environ=environ)
        assert r.returncode in (1, 2) and "Traceback" not in r.stderr, (argv, r.returncode, r.stderr)
        assert said in r.stderr, (argv, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, (argv, r.stderr)


def _named(uid: int) -> bool:
    import pwd
    try:
        return pwd.getpwuid(uid).pw_name == "nobody"
    except KeyError:
        return False


@as_plain_user
def test_a_colleagues_live_fleet_is_said_to_be_theirs_not_a_file_to_remove(tmp_path):
    run_dir = _theirs(tmp_path, 0o755)
    path = connection.write(run_dir, connection.NAME, connection.Connection(
        client="tcp://127.0.0.1:9", agents="tcp://127.0.0.1:9", pid=os.getpid(), host=socket.gethostname(),
        started=time.time(), run_dir=str(run_dir)))
    os.chown(path, NOBODY, NOBODY)
    os.chown(run_dir, NOBODY, NOBODY)
    for argv in (["status"], ["down"], ["cancel", "--all"]):
        r = as_colleague(*argv, "--run-dir", str(run_dir), cwd=tmp_path)
        assert r.returncode == 1 and "Traceback" not in r.stderr, (argv, r.stderr)
        assert f"{path}: belongs to another user" in r.stderr, (argv, r.stderr)
        assert "a fleet up there is that user's" in r.stderr, (argv, r.stderr)
        assert "remove that file" not in r.stderr and "fleet down` stops" not in r.stderr, (argv, r.stderr)


def test_a_stale_connection_file_of_a_fleet_runs_own_name_does_not_stop_its_embedded_fleet(tmp_path):
    # A `fleet run` killed with SIGKILL left fleet-HOST-PID.json; a later `fleet run`
    # that got the same pid would write its embedded fleet's file under that very name.
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / "stale"
    stale.mkdir(mode=0o700)
    connection.write(stale, "fleet.json", connection.Connection(
        client="tcp://127.0.0.1:9", agents="tcp://127.0.0.1:9", pid=dead.pid, host=socket.gethostname(),
        started=time.time() - 60, run_dir=str(run_dir)))
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "s"\n[[steps]]\nid = "a"\ncommand = "true"\n')
    # (the shell's pid is the fleet run's: exec)
    script = (f'cp -p {stale}/fleet.json {run_dir}/fleet-$(hostname)-$$.json; '
              f'exec {sys.executable} -m fleet run {suite} --run-dir {run_dir} --nodes 1')
    r = completed(["sh", "-c", script], timeout=120, cwd=tmp_path, env=env(), text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "already up" not in r.stderr, r.stderr
    assert not list(run_dir.glob("fleet-*.json"))  # its own, removed at its end
    assert_nothing_left(run_dir)
