"""The Python API inside a batch job: fleet.connect and fleet.control.api.fleets use this
job's fleets of a run directory, as `fleet run`, `fleet cancel` and `fleet down` do
(fleet.control.jobfleets), unless any_job=True. Real fleets (local ones), real
processes; the job a script or fleet runs in is its environment (SLURM_JOB_ID), as the
batch system sets it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetharness import assert_nothing_left, finish, fleet, python, wait_for
import test_job_fleets
from test_job_fleets import embedded_files, job, waiting

import fleet as F
from fleet.control import api
from fleet.control.client import FleetError

bg = test_job_fleets.bg  # (the fixture: `fleet ARGS` in the background, in a job's environment)

SCRIPT = """
import sys
import fleet
from fleet.control import api
run_dir, kw = sys.argv[1], {"any_job": True} if sys.argv[2] == "any" else {}
try:
    f = fleet.connect(run_dir, **kw)
except fleet.FleetError as e:
    print("refused:", e)
else:
    print("connected:", f.conn.pid, f.status()["counts"] is not None)
print("fleets:", [g.conn.pid for g in api.fleets(run_dir, **kw)])
"""


def test_a_script_in_one_job_is_refused_another_jobs_fleet_by_connect_naming_it_unless_any_job(tmp_path):
    run_dir = tmp_path / "run"
    fleet("up", "--local", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=60, environ=job(391))
    try:
        pid = json.loads((run_dir / "fleet.json").read_text())["pid"]
        # Before, job 392's script connected to job 391's fleet (and would have run its steps there).
        r = python("-c", SCRIPT, str(run_dir), "mine", cwd=tmp_path, check=True, timeout=60, environ=job(392))
        said = r.stdout.splitlines()
        assert said[0].startswith(f"refused: no fleet of this job (Slurm job 392) is up in {run_dir}, only another "
                                  f"job's: Slurm job 391's fleet (fleet up, coordinator pid {pid} on "), r.stdout
        assert "pass any_job=True to use that one" in said[0], r.stdout
        assert said[1] == "fleets: []", r.stdout
        r = python("-c", SCRIPT, str(run_dir), "any", cwd=tmp_path, check=True, timeout=60, environ=job(392))
        assert r.stdout.splitlines() == [f"connected: {pid} True", f"fleets: [{pid}]"], r.stdout
        for where in (job(391), {}):  # its own job's script, and one outside any job (a login node): as before
            r = python("-c", SCRIPT, str(run_dir), "mine", cwd=tmp_path, check=True, timeout=60, environ=where)
            assert r.stdout.splitlines() == [f"connected: {pid} True", f"fleets: [{pid}]"], r.stdout
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, environ=job(391))
    assert_nothing_left(run_dir)


def test_connect_in_a_job_uses_its_own_embedded_fleet_not_another_jobs_fleet_up_there(tmp_path, bg, monkeypatch):
    run_dir = tmp_path / "run"
    flag = tmp_path / "flag"
    fleet("up", "--local", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=60, environ=job(391))
    try:
        theirs = json.loads((run_dir / "fleet.json").read_text())["pid"]
        mine = bg("run", str(waiting(tmp_path / "w.toml", "w", 1, flag)), "--run-dir", str(run_dir), cwd=tmp_path,
                  environ=job(392))
        wait_for(lambda: embedded_files(run_dir), timeout=60, what="job 392's embedded fleet")
        own = json.loads(embedded_files(run_dir)[0].read_text())["pid"]
        monkeypatch.setenv("SLURM_JOB_ID", "392")  # (this test's process, as job 392's script)
        with F.connect(run_dir) as f:  # before: job 391's fleet up, the run directory's first
            assert f.conn.pid == own
            assert "counts" in f.status()
        assert [g.conn.pid for g in api.fleets(run_dir)] == [own]
        assert sorted(g.conn.pid for g in api.fleets(run_dir, any_job=True)) == sorted([own, theirs])
        monkeypatch.setenv("SLURM_JOB_ID", "391")
        with F.connect(run_dir) as f:
            assert f.conn.pid == theirs
        monkeypatch.delenv("SLURM_JOB_ID")  # outside a job: the fleet up first, as before
        with F.connect(run_dir) as f:
            assert f.conn.pid == theirs
        flag.touch()
        rc, out, err = finish(mine, 90)
        assert rc == 0, out + err
    finally:
        flag.touch()
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, environ=job(391))
    assert_nothing_left(run_dir)


def test_connect_in_a_job_with_no_fleet_up_at_all_says_none_is_up_as_before(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "392")
    with pytest.raises(FleetError, match=f"^no fleet is up in {tmp_path}"):
        F.connect(Path(tmp_path))
