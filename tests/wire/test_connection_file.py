"""The connection file (fleet.wire.connection): which batch job a fleet runs in, and a
file written by a newer fleet read by this one."""

from __future__ import annotations

import dataclasses
import errno
import json
import os

import pytest

from fleet.wire import connection


def _write(tmp_path, **fields):
    path = tmp_path / connection.NAME
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"client": "tcp://127.0.0.1:1", "agents": "tcp://127.0.0.1:2", "pid": 123, "host": "h",
                   "started": 1.0, "run_dir": str(tmp_path), **fields}, f)
    return path


def test_the_job_a_fleet_runs_in_is_named_by_its_batch_system_and_is_empty_outside_one():
    assert connection.this_job({"SLURM_JOB_ID": "114", "PBS_JOBID": ""}) == "Slurm job 114"
    assert connection.this_job({"PBS_JOBID": "56.pbs01"}) == "PBS job 56.pbs01"
    assert connection.this_job({"SLURM_JOB_ID": ""}) == ""


def test_the_job_written_is_read_back_and_a_file_without_one_reads_as_no_job_said(tmp_path):
    written = connection.Connection(client="tcp://h:1", agents="tcp://h:2", pid=1, host="h", started=1.0, run_dir=str(tmp_path),
                                    job="Slurm job 7")
    assert connection.read(connection.write(tmp_path, connection.NAME, written)) == written
    (tmp_path / connection.NAME).unlink()
    assert connection.read(_write(tmp_path)).job == ""  # (a file of a fleet before the field)


def test_the_environment_s_digests_are_read_back_and_a_file_without_them_or_with_junk_reads_as_none_said(tmp_path):
    written = connection.Connection(client="tcp://h:1", agents="tcp://h:2", pid=1, host="h", started=1.0,
                                    run_dir=str(tmp_path), env_digests={"PATH": "0123456789abcdef"})
    assert connection.read(connection.write(tmp_path, connection.NAME, written)) == written
    for junk in ("PATH", ["PATH"], {"PATH": 1}):
        (tmp_path / connection.NAME).unlink()
        assert connection.read(_write(tmp_path, env_digests=junk)).env_digests == {}
    (tmp_path / connection.NAME).unlink()
    assert connection.read(_write(tmp_path)).env_digests == {}  # (a file of a fleet before the field)


def test_the_fleet_s_id_is_read_back_and_a_file_without_one_or_with_junk_reads_as_none_said(tmp_path):
    written = connection.Connection(client="tcp://h:1", agents="tcp://h:2", pid=1, host="h", started=1.0,
                                    run_dir=str(tmp_path), fleet="h-1-a1b2c3")
    assert connection.read(connection.write(tmp_path, connection.NAME, written)) == written
    for junk in (7, ["h-1-a1b2c3"], None):
        (tmp_path / connection.NAME).unlink()
        assert connection.read(_write(tmp_path, fleet=junk)).fleet == ""
    (tmp_path / connection.NAME).unlink()
    assert connection.read(_write(tmp_path)).fleet == ""  # (a file of a fleet before the field)


def test_a_field_this_fleet_does_not_know_is_left_out_and_a_missing_one_refused(tmp_path):
    assert connection.read(_write(tmp_path, newer_field={"x": 1})).pid == 123
    (tmp_path / connection.NAME).unlink()
    path = _write(tmp_path)
    data = json.loads(path.read_text())
    del data["host"]
    path.write_text(json.dumps(data))
    with pytest.raises(connection.ConnectionError_, match="not a fleet connection file"):
        connection.read(path)
    path.write_text("[1, 2]")
    with pytest.raises(connection.ConnectionError_, match="not a fleet connection file"):
        connection.read(path)


def test_a_connection_file_that_finds_no_room_is_not_left_behind_half_written(tmp_path):
    # A real file system with no block free: the write fails, and no file (nor its
    # temporary) is left; written in place, an empty fleet.json stayed and every `fleet up`,
    # status and down refused it until it was removed by hand.
    from fleetharness import small_tmpfs
    conn = connection.Connection(client="tcp://h:1", agents="tcp://h:2", pid=1, host="h", started=1.0,
                                 run_dir=str(tmp_path), server_key="k" * 40)
    with small_tmpfs(tmp_path / "mnt", size="64k") as mnt:
        st = os.statvfs(mnt)
        (mnt / "filler").write_bytes(bytes(st.f_bavail * st.f_frsize))
        with pytest.raises(OSError) as e:
            connection.write(mnt, connection.NAME, conn)
        assert e.value.errno == errno.ENOSPC
        assert os.listdir(mnt) == ["filler"]
        (mnt / "filler").unlink()
        path = connection.write(mnt, connection.NAME, conn)  # room again: written whole, 0600
        assert connection.read(path) == conn and os.stat(path).st_mode & 0o777 == 0o600
        with pytest.raises(FileExistsError):  # never over another fleet's
            connection.write(mnt, connection.NAME, dataclasses.replace(conn, pid=2))
        assert connection.read(path) == conn and sorted(os.listdir(mnt)) == [connection.NAME]
