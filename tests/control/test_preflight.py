"""What fleet.control.preflight finds before a coordinator starts (the command lines
that refuse are run whole in tests/test_cli_refusals.py; here: what is let through)."""

from __future__ import annotations

import pytest

from fleet.control.preflight import problem
from fleet.site.profiles import load


@pytest.fixture
def two_node_job(monkeypatch):
    for var in ("PBS_JOBID", "FLEET_ADVERTISE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "nid[1-2]")


def test_in_a_batch_job_no_nodes_or_the_job_s_own_count_is_taken_and_any_other_count_refused(two_node_job):
    slurm = load("slurm")
    assert problem(slurm, None, "127.0.0.1") is None
    assert problem(slurm, 2, "127.0.0.1") is None  # (a job script may say --nodes $SLURM_NNODES)
    for other in (1, 3):
        assert problem(slurm, other, "127.0.0.1").startswith(
            f"--nodes {other}: a fleet on machine slurm runs on every node of the batch job, which has 2 nodes")


def test_a_launcher_is_refused_in_the_other_batch_system_s_job_naming_the_profile(two_node_job, monkeypatch,
                                                                                 tmp_path):
    # (a PALS profile in a Slurm job started a coordinator; its agents then failed with
    # Hydra's "unrecognized argument depth")
    pals = load("pals")
    assert problem(pals, None, "127.0.0.1") == (
        f"machine pals ({pals.path}) starts its agents with PALS mpiexec, which needs a PBS job, but this is a "
        f"Slurm job (77): give --machine slurm, or a profile with launcher = \"slurm\"")
    nodefile = tmp_path / "nodes"
    nodefile.write_text("x1\nx2\n")
    for var in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST"):
        monkeypatch.delenv(var)
    monkeypatch.setenv("PBS_JOBID", "9.pbs01")
    monkeypatch.setenv("PBS_NODEFILE", str(nodefile))
    slurm = load("slurm")
    assert problem(slurm, None, "127.0.0.1") == (
        f"machine slurm ({slurm.path}) starts its agents with Slurm's srun, which needs a Slurm job, but this is a "
        f"PBS job (9.pbs01): give --machine pals, or a profile with launcher = \"pals\"")
    assert problem(pals, None, "127.0.0.1") is None
