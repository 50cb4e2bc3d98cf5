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
