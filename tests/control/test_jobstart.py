"""fleet.control.jobstart: the record of when a batch job's first fleet in a run directory
began, which a later fleet of the same job measures "what an allocation like this one
gives steps" from. Real files in a real run directory; the job is the environment's."""

from __future__ import annotations

from fleet.control import jobstart

JOB = {"SLURM_JOB_ID": "4711", "SLURM_CLUSTER_NAME": "alpha"}
T = 1_800_000_000.0  # (a fleet's start, epoch seconds)


def test_a_later_fleet_of_the_same_job_measures_from_the_first_fleets_start(tmp_path):
    assert jobstart.window_from(tmp_path, T, T + 180, JOB) == T
    assert (tmp_path / ".fleet" / "jobs" / "slurm-4711-alpha").is_file()
    assert jobstart.window_from(tmp_path, T + 50, T + 180, JOB) == T  # brought up again 50 s in
    assert jobstart.window_from(tmp_path, T + 90, T + 180, JOB) == T  # and again


def test_another_jobs_record_is_never_read(tmp_path):
    jobstart.window_from(tmp_path, T, T + 180, JOB)
    other_job = {"SLURM_JOB_ID": "4712", "SLURM_CLUSTER_NAME": "alpha"}
    other_cluster = {"SLURM_JOB_ID": "4711", "SLURM_CLUSTER_NAME": "beta"}
    pbs = {"PBS_JOBID": "4711.server"}
    for env in (other_job, other_cluster, pbs):
        assert jobstart.window_from(tmp_path, T + 50, T + 180, env) == T + 50, env
    assert sorted(p.name for p in (tmp_path / ".fleet" / "jobs").iterdir()) == [
        "pbs-4711.server", "slurm-4711-alpha", "slurm-4711-beta", "slurm-4712-alpha"]


def test_a_requeued_slurm_job_s_run_does_not_measure_from_the_run_before(tmp_path):
    # A requeued job keeps its id; the run before's record, its end not passed yet (a
    # planned end), was read as this run's: a window longer than the job (found with the
    # real Slurm's `scontrol requeue` on 2026-12-07).
    assert jobstart.window_from(tmp_path, T, T + 240, JOB) == T
    requeued = {**JOB, "SLURM_RESTART_COUNT": "1"}
    assert jobstart.window_from(tmp_path, T + 100, T + 340, requeued) == T + 100
    assert jobstart.window_from(tmp_path, T + 150, T + 340, requeued) == T + 100  # (its own later fleet)
    assert jobstart.window_from(tmp_path, T + 50, T + 240, {**JOB, "SLURM_RESTART_COUNT": "0"}) == T


def test_a_fleet_outside_a_batch_job_or_with_no_end_known_records_and_reads_nothing(tmp_path):
    jobstart.window_from(tmp_path, T, T + 180, JOB)
    assert jobstart.window_from(tmp_path, T + 50, T + 180, {}) == T + 50
    assert jobstart.window_from(tmp_path, T + 50, None, JOB) == T + 50
    assert [p.name for p in (tmp_path / ".fleet" / "jobs").iterdir()] == ["slurm-4711-alpha"]


def test_the_record_of_an_ended_job_with_the_same_id_is_replaced_not_read(tmp_path):
    jobstart.window_from(tmp_path, T - 7200, T - 7000, JOB)  # an earlier job of this id (ids wrap)
    assert jobstart.window_from(tmp_path, T, T + 180, JOB) == T
    assert jobstart.window_from(tmp_path, T + 50, T + 180, JOB) == T


def test_the_first_fleet_of_a_job_removes_the_records_of_jobs_ended_long_ago(tmp_path):
    old = {"SLURM_JOB_ID": "1", "SLURM_CLUSTER_NAME": "alpha"}
    recent = {"SLURM_JOB_ID": "2", "SLURM_CLUSTER_NAME": "alpha"}
    running = {"SLURM_JOB_ID": "3", "SLURM_CLUSTER_NAME": "alpha"}
    jobstart.window_from(tmp_path, T - 3 * jobstart.STALE_S, T - 2 * jobstart.STALE_S, old)
    jobstart.window_from(tmp_path, T - 600, T - 60, recent)  # (ended a minute ago: a host's clock may lag)
    jobstart.window_from(tmp_path, T - 600, T + 600, running)
    jobstart.window_from(tmp_path, T, T + 180, JOB)
    assert sorted(p.name for p in (tmp_path / ".fleet" / "jobs").iterdir()) == [
        "slurm-2-alpha", "slurm-3-alpha", "slurm-4711-alpha"]


def test_a_record_that_cannot_be_read_leaves_a_fleet_its_own_start(tmp_path):
    d = tmp_path / ".fleet" / "jobs"
    d.mkdir(parents=True)
    (d / "slurm-4711-alpha").write_text("")  # (torn: its fleet killed between creating and writing it)
    assert jobstart.window_from(tmp_path, T + 50, T + 180, JOB) == T + 50
