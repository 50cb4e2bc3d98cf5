"""A run directory's connection file that `fleet down` and `fleet status` cannot take as
it is: made readable by others (chmod -R g+rX on a project), removed by hand, copied
from another run directory, or a copy whose coordinator is gone. Real fleets, real
processes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from fleetharness import assert_nothing_left, fleet


def _up(tmp_path: Path, name: str = "run") -> Path:
    run_dir = tmp_path / name
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True, timeout=60)
    return run_dir


def _pid(run_dir: Path) -> int:
    return json.loads((run_dir / "fleet.json").read_text())["pid"]


def test_fleet_down_stops_a_fleet_whose_connection_file_others_can_read_and_warns_of_its_keys(tmp_path):
    run_dir = _up(tmp_path)
    try:
        os.chmod(run_dir / "fleet.json", 0o644)
        st = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert st.returncode == 1 and "mode 0644" in st.stderr, st.stderr
        assert "its keys were readable by others" in st.stderr and f"chmod 600 {run_dir / 'fleet.json'}" in st.stderr
        r = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "warning" in r.stderr and "keys were exposed" in r.stderr and "mode 0644" in r.stderr, r.stderr
        assert "coming up" not in r.stdout and "was up" in r.stdout, r.stdout
        assert not (run_dir / "fleet.json").exists()
    finally:
        os.chmod(run_dir / "fleet.json", 0o600) if (run_dir / "fleet.json").exists() else None
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)


def test_fleet_down_of_a_fleet_whose_connection_file_was_removed_says_it_was_up_not_coming_up(tmp_path):
    run_dir = _up(tmp_path)
    pid = _pid(run_dir)
    try:
        (run_dir / "fleet.json").unlink()
        r = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"coordinator pid {pid}" in r.stdout and "coming up" not in r.stdout and "was up" in r.stdout, r.stdout
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)


def test_fleet_down_on_a_copy_of_another_run_directorys_connection_file_refuses_and_names_it(tmp_path):
    run_dir = _up(tmp_path)
    copy = tmp_path / "copy"
    copy.mkdir(mode=0o700)
    shutil.copy2(run_dir / "fleet.json", copy / "fleet.json")
    try:
        for cmd in ("down", "status"):
            r = fleet(cmd, "--run-dir", str(copy), cwd=tmp_path, timeout=90)
            assert r.returncode == 1, (cmd, r.stdout, r.stderr)
            assert f"another run directory, {run_dir.resolve()}" in r.stderr and "fleet down:" not in r.stdout, r.stderr
        st = fleet("status", "--run-dir", str(run_dir), "--json", cwd=tmp_path, timeout=60)
        assert st.returncode == 0 and json.loads(st.stdout)["pid"] == _pid(run_dir), st.stderr  # still up
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)


def test_fleet_status_with_a_connection_file_whose_coordinator_of_this_host_is_gone_says_so_by_its_pid(tmp_path):
    run_dir = _up(tmp_path)
    pid = _pid(run_dir)
    copy = tmp_path / "copy.json"
    shutil.copy2(run_dir / "fleet.json", copy)
    fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=60)
    r = fleet("status", "--connection", str(copy), cwd=tmp_path, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"its coordinator, pid {pid} on this host, is gone" in r.stderr and "did not answer" not in r.stderr, r.stderr
    assert copy.exists()  # the user's copy, not the fleet's file: left alone
    assert_nothing_left(run_dir)


def _copy_with(run_dir: Path, dest: Path, **fields) -> Path:
    """A 0600 copy of run_dir's fleet.json with fields replaced."""
    conn = {**json.loads((run_dir / "fleet.json").read_text()), **fields}
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(conn, f)
    return dest


def test_a_connection_file_with_keys_not_the_fleets_is_refused_at_once_naming_the_keys(tmp_path):
    import zmq
    run_dir = _up(tmp_path)
    try:
        public, secret = (k.decode() for k in zmq.curve_keypair())
        wrong_client = _copy_with(run_dir, tmp_path / "client.json", client_public=public, client_secret=secret)
        wrong_server = _copy_with(run_dir, tmp_path / "server.json", server_key=public)
        r = fleet("status", "--connection", str(wrong_client), cwd=tmp_path, timeout=60)
        assert r.returncode == 1 and "refused this client's keys" in r.stderr, r.stderr
        assert "did not answer" not in r.stderr, r.stderr
        r = fleet("status", "--connection", str(wrong_server), cwd=tmp_path, timeout=60)
        assert r.returncode == 1 and "not the one this connection file's keys are for" in r.stderr, r.stderr
        assert "did not answer" not in r.stderr, r.stderr
        st = fleet("status", "--run-dir", str(run_dir), "--json", cwd=tmp_path, timeout=60)
        assert st.returncode == 0 and json.loads(st.stdout)["pid"] == _pid(run_dir), st.stderr  # its own: answered
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)


def test_fleet_down_stops_a_fleet_whose_connection_file_is_damaged_through_its_lease(tmp_path):
    run_dir = _up(tmp_path)
    pid = _pid(run_dir)
    try:
        (run_dir / "fleet.json").write_text('{"client": ')
        r = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "cannot be read as a connection file" in r.stderr and f"coordinator pid {pid}" in r.stdout, r.stderr
        assert not (run_dir / "fleet.json").exists()  # its coordinator's teardown removed it
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)
