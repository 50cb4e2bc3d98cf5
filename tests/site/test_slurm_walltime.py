"""The allocation's end under a real Slurm: a job with a one-minute time limit runs
`fleet up` (which asks Slurm the job's end once: this Slurm sets no
SLURM_JOB_END_TIME), and the fleet drains before the end: the step that would not end
in time is not started, the running one is interrupted (no attempt), `fleet run`
exits 3; then Slurm ends the job by its time limit."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from cluster import _job_fields, requires_slurm, sbatch_wait
from fleetharness import REPO, TESTS, assert_nothing_left, events

from fleet.wire import records

pytestmark = [requires_slurm]

JOB_TIMEOUT = 240.0  # a one-minute job that Slurm ends by its limit (it checks about every 30 s)


def test_a_slurm_job_ended_by_its_time_limit_drains_the_fleet_before_and_fleet_run_exits_3(tmp_path):
    work, run_dir = tmp_path, tmp_path / "run"
    (work / "suite.toml").write_text(textwrap.dedent(f"""
        [suite]
        name = "timelimit"
        [[steps]]
        id = "quick"
        command = "true"
        estimate = 1
        [[steps]]
        id = "long"
        command = "true"
        estimate = 600
        [[steps]]
        id = "pause"
        command = "sleep 4"
        estimate = 4
        [[steps]]
        id = "sleepy"
        command = "sleep 300"
        deps = ["pause"]
        """))
    script = work / "job.sh"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        cd {work}
        echo "$SLURM_JOB_ID" > jobid
        export PYTHONPATH={TESTS}:{REPO}${{PYTHONPATH:+:$PYTHONPATH}}
        unset FLEET_RUN_DIR FLEET_MACHINE FLEET_MACHINES SLURM_JOB_END_TIME
        export SLURM_TIME_FORMAT=relative  # a user's taste: squeue's times unreadable to a parser
        PY={sys.executable}
        # The end from Slurm (one squeue); the drain 45 s before it: ~15 s into the job.
        timeout -k 5 60 $PY -m fleet up --run-dir {run_dir} --timeout 40 --drain-before 45s \\
            --heartbeat 0.5; echo "up $?" >> rcs
        timeout -k 5 80 $PY -m fleet run suite.toml --run-dir {run_dir}; echo "run $?" >> rcs
        timeout -k 5 40 $PY -m fleet down --run-dir {run_dir}; echo "down $?" >> rcs
        sleep 300  # Slurm's time limit ends the job
        """))
    script.chmod(0o755)
    rc, output = sbatch_wait(script, JOB_TIMEOUT, cwd=work,
                             sbatch_args=("-N", "2", "--ntasks-per-node=2", "-t", "1", "-J", "fleet-walltime",
                                          "-o", str(work / "job.out")))
    jobid = (work / "jobid").read_text().strip()
    rcs = (work / "rcs").read_text() if (work / "rcs").exists() else ""
    report = f"job exit {rc}; statuses:\n{rcs}\njob output:\n{output}\n" + _tail(run_dir / "coordinator.log")
    assert rc is not None, report
    assert (_job_fields(jobid) or {}).get("JobState") == "TIMEOUT", report
    assert rcs.split("\n")[:3] == ["up 0", "run 3", "down 0"], report
    ev = events(run_dir)
    [end] = [e for e in ev if e["kind"] == "allocation_end"]
    assert end["source"] == f"squeue -j {jobid}" and end["end"] - end["drain_at"] == 45.0, report
    assert [e["reason"] for e in ev if e["kind"] == "drained"] == ["the drain point, 45 s before the end"]
    exits = {e["step"]: e for e in ev if e["kind"] == "exit"}
    assert exits["quick"]["outcome"] == "succeeded" and exits["sleepy"]["outcome"] == "interrupted", report
    # sleepy started after `pause`, well into the job: the next job could give it more of
    # its time, so exit 3 (had it run 90 % of the ~15 s this job gave steps: exit 1,
    # "needs a longer allocation", fleet.control.stuck.ran_out).
    assert not exits["sleepy"]["reason"].startswith("needs a longer allocation"), report
    assert "long" not in exits
    assert [e["cause"] for e in ev if e["kind"] == "wait" and e["step"] == "long"] == ["deadline"]
    assert records.attempts(run_dir, "sleepy") == [] and records.read_final(run_dir, "sleepy") is None
    assert_nothing_left(run_dir)


def _tail(path: Path, n: int = 30) -> str:
    try:
        return "coordinator log:\n" + "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no coordinator log)"
