"""Two jobs of one script on the same run directory: the second one's `fleet up` fails
(a fleet is already up there), and that job must end with that message and a nonzero
code, leaving the first job's fleet alone. Before, every script set its `fleet down`
EXIT trap before `fleet up`, so the second job stopped the first job's fleet.

The Slurm scripts run as real jobs under the local Slurm (tests/cluster/slurm-up.sh),
one node each; the PBS scripts (no PBS here) run under bash with the `local` machine
profile, which is all of them that is not PBS's. The first job's only step waits for a
file this test writes once the second job has ended, so the first fleet is at work
throughout. Every Slurm job carries a name of this test's own, by which it is
cancelled if still there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import uuid
from pathlib import Path

import psutil
import pytest

from cluster import TERMINAL_STATES, _job_fields, _run, slurm_available, stop_coordinators
from fleetharness import REPO, assert_nothing_left, env, events, fleet_command, wait_for

from fleet.wire import records

JOB_TIMEOUT = 90.0   # a job's end (or start), queueing included; normally a few seconds
BASH_TIMEOUT = 60.0  # a PBS script under bash, to its end


class Jobs:
    """Jobs of one script in `work`, on one run directory."""

    def __init__(self, work: Path, script: str):
        self.work, self.script = work, REPO / "jobscripts" / script
        self.run_dir, self.suite, self.go = work / "run", work / "suite.toml", work / "go"
        self.name = f"fleet-samedir-test-{uuid.uuid4().hex[:10]}"
        self.bash: list[subprocess.Popen] = []
        self.submitted = False  # any Slurm job (else no Slurm command at clean-up: none may answer here)
        bindir = work / "bin"
        fleet_command(bindir)  # `fleet` on PATH is this test's interpreter (the Slurm job inherits PATH)
        # The step writes down the job it runs in, then waits (bounded) for the test's word.
        wait = f'timeout 120 sh -c "until [ -e {self.go} ]; do sleep 0.1; done"'
        self.suite.write_text(textwrap.dedent(f"""
            [suite]
            name = "samedir"
            [[steps]]
            id = "slow"
            command = 'echo "${{SLURM_JOB_ID:-bash}}" >> {work}/slow.jobs; {wait}'
            """))
        e = {k: v for k, v in env().items() if not k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "FLEET_", "PBS_"))}
        e.update(PATH=f"{bindir}{os.pathsep}{e.get('PATH', '')}", SBATCH_JOB_NAME=self.name)
        self.env = e

    # -- the Slurm scripts: real jobs -------------------------------------------------------
    def sbatch(self) -> str:
        self.submitted = True
        # 10 minutes: slurm-resubmit.sbatch drains 5 minutes before the end (a 5-minute job would start nothing).
        p = subprocess.run(["sbatch", "--parsable", "-N", "1", "-t", "10", str(self.script), str(self.suite),
                            str(self.run_dir)], cwd=self.work, env=self.env, capture_output=True, text=True,
                           timeout=30)
        assert p.returncode == 0, p.stderr
        return p.stdout.strip().split(";")[0]

    def ended(self, jobid: str) -> dict[str, str]:
        return wait_for(lambda: (f := _job_fields(jobid)) and f.get("JobState") in TERMINAL_STATES and f,
                        JOB_TIMEOUT, f"Slurm job {jobid} to end")

    # -- the PBS scripts: bash, the `local` profile ------------------------------------------
    def bash_job(self, label: str) -> subprocess.Popen:
        e = dict(self.env, SUITE=str(self.suite), FLEET_RUN_DIR=str(self.run_dir), FLEET_MACHINE="local",
                 PBS_O_WORKDIR=str(self.work))
        with open(self.work / f"fleet-{label}.out", "w") as out:
            p = subprocess.Popen(["bash", str(self.script)], cwd=self.work, env=e, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        self.bash.append(p)
        return p

    def output(self, label: str) -> str:
        try:
            return (self.work / f"fleet-{label}.out").read_text(errors="replace")
        except OSError as e:
            return f"({e})"

    def report(self) -> str:
        outs = [f"{p.name}:\n{p.read_text(errors='replace')}" for p in sorted(self.work.glob("fleet-*.out"))]
        try:
            log = (self.run_dir / "coordinator.log").read_text(errors="replace")[-3000:]
        except OSError:
            log = "(none)"
        return "\n".join(outs + [f"coordinator log (tail):\n{log}"])

    def clean_up(self) -> None:
        """The Slurm jobs by name, the bash jobs by process group, then the coordinators of
        this run directory (SIGTERM: they stop their agents and steps), SIGKILL if they linger."""
        self.go.touch()
        if self.submitted:
            _run(["scancel", "--name", self.name], timeout=15)
            try:
                wait_for(lambda: not _run(["squeue", "-h", "-n", self.name, "-o", "%i"])[1].strip(), 30,
                         "this test's Slurm jobs to go")
            except AssertionError:
                pass  # (the test's own failure is the one to see)
        for p in self.bash:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=30)
        stop_coordinators(self.run_dir)


def the_first_fleet_is_at_work(jobs: Jobs) -> dict:
    """The first fleet's connection file, once its step runs."""
    wait_for(lambda: ("started", "slow") in {(e["kind"], e.get("step")) for e in events(jobs.run_dir)}, JOB_TIMEOUT,
             "the first job's step to start")
    return json.loads((jobs.run_dir / "fleet.json").read_text())


def assert_the_second_job_said_why_and_stopped_nothing(jobs: Jobs, out: str, first: dict, whose: str) -> None:
    report = jobs.report()
    # The first fleet is untouched: its coordinator lives, its connection file is the same, its step runs.
    kinds = [e["kind"] for e in events(jobs.run_dir)]
    assert "fleet_down" not in kinds and "exit" not in kinds, report
    assert psutil.pid_exists(first["pid"]) and psutil.Process(first["pid"]).status() != psutil.STATUS_ZOMBIE, report
    assert json.loads((jobs.run_dir / "fleet.json").read_text()) == first, report
    message = " ".join(out.split())
    assert (f"a fleet is already up in {jobs.run_dir}: {whose}coordinator pid {first['pid']} on {first['host']}, "
            f"up since ") in message, report
    assert "fleet up failed (exit 1; its message above): this job ends, no fleet stopped" in message, report


def assert_the_first_job_finished_its_suite(jobs: Jobs) -> None:
    assert [a["outcome"] for a in records.attempts(jobs.run_dir, "slow")] == ["succeeded"], jobs.report()
    assert len((jobs.work / "slow.jobs").read_text().split()) == 1, jobs.report()  # it ran once
    assert_nothing_left(jobs.run_dir)


@pytest.mark.parametrize("script", ["slurm.sbatch", "slurm-resubmit.sbatch"])
def test_a_second_slurm_job_on_a_run_directory_in_use_fails_with_the_first_job_s_name_and_leaves_its_fleet_at_work(
        tmp_path, script):
    reason = slurm_available(2)
    if reason:
        pytest.skip(reason)
    jobs = Jobs(tmp_path, script)
    try:
        first_id = jobs.sbatch()
        first = the_first_fleet_is_at_work(jobs)
        assert first["job"] == f"Slurm job {first_id}", first
        second_id = jobs.sbatch()
        fields = jobs.ended(second_id)
        out = jobs.output(second_id)
        assert (fields["JobState"], fields["ExitCode"]) == ("FAILED", "1:0"), f"{fields}\n{jobs.report()}"
        assert_the_second_job_said_why_and_stopped_nothing(jobs, out, first, f"Slurm job {first_id}, ")
        assert (_job_fields(first_id) or {}).get("JobState") == "RUNNING", jobs.report()
        jobs.go.touch()
        fields = jobs.ended(first_id)
        assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), f"{fields}\n{jobs.report()}"
        assert "Submitted batch job" not in jobs.output(first_id), jobs.report()  # (nothing to resubmit)
        assert_the_first_job_finished_its_suite(jobs)
    finally:
        jobs.clean_up()


@pytest.mark.parametrize("script", ["pbs-pals.pbs", "pbs-resubmit.pbs"])
def test_a_second_run_of_a_pbs_script_on_a_run_directory_in_use_fails_and_leaves_the_first_fleet_at_work(
        tmp_path, script):
    jobs = Jobs(tmp_path, script)
    try:
        first_job = jobs.bash_job("1")
        first = the_first_fleet_is_at_work(jobs)
        second = jobs.bash_job("2")
        code = second.wait(timeout=BASH_TIMEOUT)
        assert code == 1, f"the second run exited {code}\n{jobs.report()}"
        assert_the_second_job_said_why_and_stopped_nothing(jobs, jobs.output("2"), first, "")
        assert first_job.poll() is None, jobs.report()
        jobs.go.touch()
        assert first_job.wait(timeout=BASH_TIMEOUT) == 0, jobs.report()
        assert_the_first_job_finished_its_suite(jobs)
    finally:
        jobs.clean_up()
