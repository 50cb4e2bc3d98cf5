"""Several batch jobs of one user on one run directory: inside a job, `fleet down`,
`fleet cancel` and `fleet run` act on this job's fleets and leave another job's alone,
saying so (fleet.control.jobfleets). Real fleets (local ones), real processes; the job
each command runs in is faked by its environment (SLURM_JOB_ID, FLEET_MACHINE=local: a
local fleet inside the "job")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fleetharness import assert_nothing_left, env, exits, finish, fleet, wait_for, write_suite


def job(n: int) -> dict:
    """The environment of a command of Slurm job n, whose fleets are local ones."""
    return {"SLURM_JOB_ID": str(n), "FLEET_MACHINE": "local"}


@pytest.fixture
def bg():
    """Start `fleet ARGS` in the background in a job's environment; whatever is still
    running at the end is killed by its process group."""
    started: list[subprocess.Popen] = []

    def start(*args: str, cwd: Path, environ: dict) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-m", "fleet", *args], cwd=cwd, env={**env(), **environ},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        started.append(p)
        return p
    yield start
    for p in started:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate(timeout=30)


def sleeps(path: Path, name: str, count: int, seconds: float) -> Path:
    return write_suite(path, f"""
[suite]
name = "{name}"
[[steps]]
id = "{name}/{{i}}"
array = "1-{count}"
command = "sleep {seconds}"
""")


def waiting(path: Path, name: str, count: int, flag: Path) -> Path:
    """Steps that end once `flag` exists (at most a minute)."""
    return write_suite(path, f"""
[suite]
name = "{name}"
[[steps]]
id = "{name}/{{i}}"
array = "1-{count}"
command = "for i in $(seq 600); do test -e {flag} && exit 0; sleep 0.1; done; exit 1"
""")


def embedded_files(run_dir: Path) -> list[Path]:
    return sorted(run_dir.glob("fleet-*.json"))


def test_a_jobs_fleet_down_leaves_another_jobs_embedded_fleet_at_work_and_says_so(tmp_path, bg):
    run_dir = tmp_path / "run"
    flag = tmp_path / "flag"
    long = waiting(tmp_path / "long.toml", "long", 4, flag)
    # Job 391: a `fleet run` that embeds its own fleet, its steps still to run when job 392 ends.
    other = bg("run", str(long), "--run-dir", str(run_dir), cwd=tmp_path, environ=job(391))
    wait_for(lambda: embedded_files(run_dir), timeout=60, what="job 391's embedded fleet")
    # Job 392, as jobscripts/slurm.sbatch: fleet up, (its suite), and its EXIT trap's fleet down.
    fleet("up", "--local", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=60, environ=job(392))
    down = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, environ=job(392))
    assert down.returncode == 0, down.stdout + down.stderr
    assert f"fleet down: {run_dir}\n" in down.stdout  # its own fleet up: stopped
    assert not (run_dir / "fleet.json").exists()
    alone = [line for line in down.stdout.splitlines() if "left alone" in line]
    assert len(alone) == 1, down.stdout
    assert "Slurm job 391's fleet (embedded fleet run, coordinator pid" in alone[0]
    assert "`fleet down --any-job` stops it too" in alone[0]
    flag.touch()
    rc, out, err = finish(other, 90)
    assert rc == 0, out + err  # job 391's suite finished on its own fleet
    assert all(len(exits(run_dir, f"long/{i}")) == 1 for i in range(1, 5))
    assert_nothing_left(run_dir)


def test_fleet_down_any_job_and_a_login_nodes_fleet_down_still_stop_another_jobs_fleet(tmp_path):
    for where in ({**job(392)}, {}):  # --any-job inside job 392; no job at all (a login node)
        run_dir = tmp_path / f"run{len(where)}"
        fleet("up", "--local", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=60, environ=job(391))
        args = ["--any-job"] if where else []
        try:
            down = fleet("down", "--run-dir", str(run_dir), *args, cwd=tmp_path, timeout=60, environ=where)
        finally:  # (whatever that did: a login node's fleet down stops it)
            fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert down.returncode == 0 and "left alone" not in down.stdout, down.stdout + down.stderr
        assert not (run_dir / "fleet.json").exists()
        assert_nothing_left(run_dir)


def test_a_jobs_fleet_cancel_leaves_another_jobs_fleet_alone_and_says_so(tmp_path):
    run_dir = tmp_path / "run"
    fleet("up", "--local", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=60, environ=job(391))
    try:
        r = fleet("cancel", "--all", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, environ=job(392))
        assert r.returncode == 1, r.stdout + r.stderr
        assert "fleet cancel: left alone: Slurm job 391's fleet (fleet up, coordinator pid" in r.stderr
        assert f"no fleet of this job is up in {run_dir}" in r.stderr
        r = fleet("cancel", "--all", "--any-job", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60,
                  environ=job(392))
        assert r.returncode == 0 and "cancelled 0 steps" in r.stdout, r.stdout + r.stderr
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, environ=job(391))
    assert_nothing_left(run_dir)


def test_a_jobs_fleet_run_starts_its_own_fleet_beside_another_jobs_and_each_step_runs_once(tmp_path, bg):
    run_dir = tmp_path / "run"
    suite = sleeps(tmp_path / "s.toml", "s", 8, 0.5)
    fleet("up", "--local", "--nodes", "2", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=60,
          environ=job(391))
    try:
        theirs = bg("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, environ=job(391))
        mine = bg("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, environ=job(392))
        (rc1, out1, err1), (rc2, out2, err2) = finish(theirs, 90), finish(mine, 90)
    finally:
        down = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, environ=job(391))
    assert rc1 == 0 and rc2 == 0, out1 + err1 + out2 + err2
    # Job 391's own fleet run uses its fleet up; job 392's starts its own, and says why.
    assert "embedded" not in err1, err1
    said = [line for line in err2.splitlines() if "not this job's" in line]
    assert len(said) == 1, err2
    assert f"the fleet up in {run_dir} is Slurm job 391's fleet (fleet up, coordinator pid" in said[0]
    assert "starting an embedded fleet" in said[0]
    # The run directory's claims keep each step to one fleet.
    for i in range(1, 9):
        assert [e["returncode"] for e in exits(run_dir, f"s/{i}")] == [0], exits(run_dir, f"s/{i}")
    assert down.returncode == 0 and "left alone" not in down.stdout, down.stdout
    assert_nothing_left(run_dir)


def test_fleet_run_of_any_job_uses_another_jobs_fleet_as_before(tmp_path):
    run_dir = tmp_path / "run"
    suite = sleeps(tmp_path / "s.toml", "s", 2, 0)
    fleet("up", "--local", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=60, environ=job(391))
    try:
        r = fleet("run", str(suite), "--run-dir", str(run_dir), "--fleet-of-any-job", cwd=tmp_path, timeout=90,
                  environ=job(392))
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, environ=job(391))
    assert r.returncode == 0 and "embedded" not in r.stderr, r.stdout + r.stderr
    assert_nothing_left(run_dir)


def test_a_jobs_fleet_run_where_another_jobs_fleet_is_up_runs_beside_it_there_not_in_the_suites_run_dir(tmp_path):
    here = tmp_path / "here"
    here.mkdir()
    (tmp_path / "suite").mkdir()
    suite = write_suite(tmp_path / "suite" / "s.toml", '[suite]\nname = "s"\nrun_dir = "own"\n'
                        '[[steps]]\nid = "s/{i}"\narray = "1-2"\ncommand = "true"\n')
    fleet("up", "--local", "--run-dir", ".", cwd=here, check=True, timeout=60, environ=job(391))
    try:
        r = fleet("run", str(suite), cwd=here, timeout=90, environ=job(392))
    finally:
        down = fleet("down", "--run-dir", ".", cwd=here, timeout=60, environ=job(391))
    assert r.returncode == 0, r.stdout + r.stderr
    # Before, it went to the suite's run_dir (suite/own) and said nothing of job 391's fleet.
    assert f"fleet: running in {here}, where a fleet is up (not the suite's run_dir {tmp_path / 'suite' / 'own'})" in r.stderr, r.stderr
    assert f"the fleet up in {here} is Slurm job 391's fleet (fleet up, coordinator pid" in r.stderr, r.stderr
    assert not (tmp_path / "suite" / "own").exists()
    assert [e["returncode"] for e in exits(here, "s/1") + exits(here, "s/2")] == [0, 0]
    assert down.returncode == 0 and "left alone" not in down.stdout, down.stdout
    assert_nothing_left(here)


def test_fleet_up_in_a_job_refused_by_another_jobs_fleet_advises_the_fleet_down_any_job_that_stops_it(tmp_path):
    run_dir = tmp_path / "run"
    fleet("up", "--local", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=60, environ=job(391))
    try:
        second = fleet("up", "--local", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, environ=job(392))
        assert second.returncode == 1, second.stdout + second.stderr
        # Before, it advised `fleet down --run-dir R`, which inside job 392 leaves job 391's fleet alone.
        assert f"stop it (fleet down --any-job --run-dir {run_dir}) only if nothing needs it" in second.stderr, \
            second.stderr
        down = fleet("down", "--any-job", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, environ=job(392))
        assert down.returncode == 0 and "left alone" not in down.stdout, down.stdout + down.stderr
        assert not (run_dir / "fleet.json").exists()
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, environ=job(391))
    assert_nothing_left(run_dir)


def test_fleet_up_in_a_job_refused_by_another_jobs_fleet_coming_up_advises_fleet_down_any_job(tmp_path, bg):
    from test_up_interrupted import importing
    run_dir = tmp_path / "run"
    first = bg("up", "--local", "--run-dir", str(run_dir), "--preload", "preload_slow", cwd=tmp_path,
               environ={**job(391), "FLEET_TEST_IMPORT_SLEEP": "60"})
    try:
        importing(first)
        second = fleet("up", "--local", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, environ=job(392))
        assert second.returncode == 1 and "another fleet up is at work" in second.stderr, second.stderr
        assert f"stop it (fleet down --any-job --run-dir {run_dir}) only if nothing needs it" in second.stderr, \
            second.stderr
    finally:
        down = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90, environ=job(391))
    assert down.returncode == 0 and "a fleet still coming up" in down.stdout, down.stdout + down.stderr
    finish(first, 60)
    assert_nothing_left(run_dir)


def test_a_jobs_fleet_down_leaves_another_jobs_fleet_with_an_exposed_file_alone_unwarned_and_exits_0(tmp_path):
    run_dir = tmp_path / "run"
    fleet("up", "--local", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=60, environ=job(391))
    pid = json.loads((run_dir / "fleet.json").read_text())["pid"]
    (run_dir / "fleet.json").chmod(0o644)  # (chmod -R g+rX of a shared run directory)
    try:
        down = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, environ=job(392))
        # Before: "warning: ... stopping it through its lease", a garbled left-alone line, then an
        # error advising the very command, exit 1; job 391's fleet up all the while.
        assert down.returncode == 0, down.stdout + down.stderr
        assert "warning" not in down.stderr and "Error" not in down.stderr, down.stderr
        # (where a real Slurm answers, job 392, faked here, is said to have ended: fleet.control.jobfleets.this_job_ended)
        said = "".join(line for line in down.stdout.splitlines(True) if "this shell's SLURM_JOB_ID" not in line)
        assert said == (f"fleet down: left alone: Slurm job 391's fleet (a fleet that was up with no connection "
                               f"file `fleet down` could use (removed, or refused), coordinator pid {pid}); "
                               f"`fleet down --any-job` stops it too\n"), down.stdout
        assert (run_dir / "fleet.json").exists()
        down = fleet("down", "--any-job", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, environ=job(392))
        assert down.returncode == 0 and "stopping it through its lease" in down.stderr, down.stdout + down.stderr
        assert f"fleet down: {run_dir} (a fleet that was up" in down.stdout, down.stdout
    finally:
        if (run_dir / "fleet.json").exists():
            (run_dir / "fleet.json").chmod(0o600)
            fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, environ=job(391))
    assert not (run_dir / "fleet.json").exists()
    assert_nothing_left(run_dir)


def test_a_jobs_fleet_status_shows_this_jobs_fleet_first_when_another_jobs_is_up_too(tmp_path, bg):
    run_dir = tmp_path / "run"
    flag = tmp_path / "flag"
    fleet("up", "--local", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=60, environ=job(391))
    try:
        theirs = json.loads((run_dir / "fleet.json").read_text())["pid"]
        mine = bg("run", str(waiting(tmp_path / "w.toml", "w", 1, flag)), "--run-dir", str(run_dir), cwd=tmp_path,
                  environ=job(392))
        wait_for(lambda: embedded_files(run_dir), timeout=60, what="job 392's embedded fleet")
        own = json.loads(embedded_files(run_dir)[0].read_text())["pid"]
        st = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, environ=job(392))
        # Before, job 391's fleet up (fleet.json, first of the run directory) was shown.
        assert st.returncode == 0, st.stdout + st.stderr
        assert (f"2 fleets are up in {run_dir}; showing coordinator pid {own}, this job's (the others: pid {theirs})"
                in st.stderr), st.stderr
        st = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, environ=job(391))
        assert f"showing coordinator pid {theirs}, this job's (the others: pid {own})" in st.stderr, st.stderr
        flag.touch()
        rc, out, err = finish(mine, 90)
        assert rc == 0, out + err
    finally:
        flag.touch()
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, environ=job(391))
    assert_nothing_left(run_dir)
