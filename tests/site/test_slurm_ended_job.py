"""A shell whose SLURM_* variables are those of a job that has ended (an salloc shell
after its job; a user who ssh'd into a node with them exported) is not taken for a live
job: `fleet up` and `fleet run`'s embedded fleet ask Slurm once (the query that gives the
job's end, widened to its state) and refuse, naming the variable and the job, before
anything starts. Before 2026-12-07 `fleet up --local` came up recording the ended job as
its own, and another job's fleet then took that live fleet for dead (removed its
fleet.json, took its lease: the same steps ran on both); `fleet run` started a Slurm
fleet whose srun failed, the reason only in launcher.log. Real Slurm: the variables are
those a real one-node job printed before it ended; a job id Slurm never had is refused
too (no node needed)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cluster import _job_fields, _run as _short, sbatch_wait, skip_unless_slurm, stop_coordinators
from fleetharness import REPO, TESTS, wait_for, write_suite

from test_allocation import _run

REFUSED = r"SLURM_JOB_ID={job} names a Slurm job (that has ended \(COMPLETED\)|that Slurm does not know \(.*Invalid job id)"


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_", "FLEET_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(REPO)])
    return env


@pytest.fixture(scope="module")
def ended_job(tmp_path_factory) -> tuple[str, dict[str, str]]:
    """(job id, an environment with the SLURM_* variables of a real job that has ended)."""
    skip_unless_slurm(0)  # (Slurm up; a node busy with another test's job is waited for, a while)
    work = tmp_path_factory.mktemp("ended-job")
    script = work / "env.sh"
    script.write_text("#!/bin/sh\nenv\n")
    script.chmod(0o755)
    rc, out = sbatch_wait(script, 180, sbatch_args=("-N", "1", "-t", "1", "-J", "fleet-ended-env",
                                                    "-o", str(work / "env.out")), cwd=work)
    if rc is None:
        pytest.skip(f"Slurm busy: a one-node job did not run within 180 s ({out.strip().splitlines()[-1]})")
    assert rc == 0, out
    slurm = dict(line.split("=", 1) for line in out.splitlines() if line.startswith("SLURM_") and "=" in line)
    assert slurm.get("SLURM_JOB_ID") and slurm.get("SLURM_JOB_NODELIST"), out
    return slurm["SLURM_JOB_ID"], {**_clean_env(), **slurm}


def test_fleet_up_local_with_the_variables_of_a_slurm_job_that_ended_is_refused_and_starts_nothing(
        ended_job, tmp_path):
    job, env = ended_job
    run_dir = tmp_path / "run"
    try:
        r = _run([sys.executable, "-m", "fleet", "up", "--local", "--run-dir", str(run_dir), "--timeout", "40"],
                 env, tmp_path)
        assert r.returncode == 2, (r.stdout, r.stderr)
        assert re.search(REFUSED.format(job=job), r.stderr), r.stderr
        assert "variables left from an old job" in r.stderr and "nothing was started" in r.stderr
        assert not (run_dir / "fleet.json").exists() and not (run_dir / "coordinator.log").exists()
    finally:
        stop_coordinators(run_dir)


def test_fleet_run_with_the_variables_of_a_slurm_job_that_ended_says_so_instead_of_a_failed_srun(ended_job, tmp_path):
    job, env = ended_job
    suite = write_suite(tmp_path / "suite.toml", '[suite]\nname = "stale"\n[[steps]]\nid = "a"\ncommand = "true"\n')
    run_dir = tmp_path / "run"
    try:
        r = _run([sys.executable, "-m", "fleet", "run", str(suite), "--run-dir", str(run_dir), "--timeout", "40"],
                 env, tmp_path, timeout=120)
        assert r.returncode == 2, (r.stdout, r.stderr)
        assert re.search(REFUSED.format(job=job), r.stderr), r.stderr
        assert "srun" not in r.stderr and not (run_dir / "launcher.log").exists()
    finally:
        stop_coordinators(run_dir)


def _unknown_job() -> str:
    """A job id this Slurm does not know (far above its last one)."""
    skip_unless_slurm(0)
    rc, out = _short(["squeue", "-h", "-j", "987654321"])
    assert rc != 0 and "Invalid job id" in out, out
    return "987654321"


def test_a_job_id_slurm_does_not_know_is_refused_by_fleet_up_and_by_a_coordinator_started_alone(tmp_path):
    job = _unknown_job()
    env = {**_clean_env(), "SLURM_JOB_ID": job, "SLURM_JOB_NODELIST": "node1", "SLURM_CLUSTER_NAME": "ci"}
    run_dir = tmp_path / "alone"
    try:
        r = _run([sys.executable, "-m", "fleet", "up", "--local", "--run-dir", str(tmp_path / "up"), "--timeout",
                  "40"], env, tmp_path)
        assert r.returncode == 2 and re.search(REFUSED.format(job=job), r.stderr), (r.stdout, r.stderr)
        # The coordinator, started without fleet up (which asks, and passes the answer on), asks itself.
        r = _run([sys.executable, "-m", "fleet.control.coordinator", "--run-dir", str(run_dir)], env, tmp_path)
        assert r.returncode == 2, (r.stdout, r.stderr)
        assert re.search(REFUSED.format(job=job), r.stderr), r.stderr
        assert not Path(run_dir / "fleet.json").exists()
    finally:
        stop_coordinators(run_dir)
        stop_coordinators(tmp_path / "up")


def test_a_live_jobs_fleet_comes_up_and_a_shell_of_an_ended_job_leaving_it_alone_says_its_job_ended(
        ended_job, tmp_path):
    old, stale = ended_job
    p = subprocess.run(["sbatch", "--parsable", "-N1", "-t", "5", "-J", "fleet-live-holder", "-o", "/dev/null",
                        "--wrap", "sleep 300"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    live = p.stdout.strip().split(";")[0]
    run_dir = tmp_path / "run"
    try:
        try:
            wait_for(lambda: (_job_fields(live) or {}).get("JobState") == "RUNNING", 120, "the live job running")
        except AssertionError:
            pytest.skip("Slurm busy: a one-node job did not start within 120 s")
        here = {**_clean_env(), "SLURM_JOB_ID": live, "SLURM_JOB_NODELIST": _job_fields(live)["NodeList"],
                "SLURM_CLUSTER_NAME": stale.get("SLURM_CLUSTER_NAME", "")}
        r = _run([sys.executable, "-m", "fleet", "up", "--local", "--run-dir", str(run_dir), "--timeout", "40"],
                 here, tmp_path)
        assert r.returncode == 0, r.stderr  # (a live job: asked once, and up)
        assert json.loads((run_dir / "fleet.json").read_text())["job"] == f"Slurm job {live}"
        r = _run([sys.executable, "-m", "fleet", "down", "--run-dir", str(run_dir)], stale, tmp_path)
        assert r.returncode == 0, r.stderr
        assert f"fleet down: left alone: Slurm job {live}'s fleet" in r.stdout, r.stdout
        assert (f"fleet down: this shell's SLURM_JOB_ID names Slurm job {old}, which has ended: variables left from "
                f"an old job") in r.stdout, r.stdout
        r = _run([sys.executable, "-m", "fleet", "down", "--run-dir", str(run_dir)], here, tmp_path)
        assert r.returncode == 0 and not (run_dir / "fleet.json").exists(), r.stdout + r.stderr
    finally:
        subprocess.run(["scancel", live], timeout=30, check=False)
        stop_coordinators(run_dir)
