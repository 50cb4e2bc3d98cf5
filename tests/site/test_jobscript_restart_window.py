"""jobscripts/slurm-resubmit.sbatch, the real script, when its fleet is lost partway
through a job and it brings a fleet up again in that job: the new fleet judges what "an
allocation like this one gives steps" as the job's first fleet would, from that fleet's
start (fleet.control.jobstart), not from its own, which is much later in the job.

Before 2026-12-07 it measured from its own start: a step that fits a job of this length
(the first fleet had started it) was "needs a longer allocation", `fleet run` exited 1
instead of 3, and the chain of jobs stopped for good. Both ways of that verdict: a step
with no expected duration that the drain stopped after it ran nearly all of the second
fleet's window, and one whose `estimate` is longer than the second fleet's window but not
the job's, held back at once.

A Slurm job in its environment (SLURM_JOB_ID, SLURM_JOB_NODELIST, SLURM_JOB_END_TIME, as
Slurm sets them in a batch job; the `local` machine profile for the agents): the script
runs under bash, so that this test can kill the coordinator; `squeue`, `scontrol` and
`sbatch` are stubs that ask the real Slurm nothing (sbatch only says it was called). Every
`fleet up` of the job reads the same end, as it does from Slurm."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import textwrap
import time

import pytest

from fleetharness import REPO, assert_nothing_left, env, events, fleet_command, wait_for

from fleet.wire import records

SCRIPT = REPO / "jobscripts" / "slurm-resubmit.sbatch"
JOB_S = 100        # the job's length
DRAIN_BEFORE = 15  # its drain margin: the job's first fleet gives steps about 85 s
KILL_AFTER_S = 30  # the first fleet's coordinator killed this long after that fleet began
ESTIMATE_S = 65    # fits the job's first fleet (about 85 s), not the second's (about 55 s, 58 with its room)


def _stub(bindir, name: str, body: str) -> None:
    path = bindir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


@pytest.mark.parametrize("estimate", [False, True], ids=["no_estimate", "with_estimate"])
def test_a_fleet_brought_up_again_in_its_job_judges_a_longer_allocation_by_the_jobs_first_fleet(tmp_path, estimate):
    run_dir, suite, bindir = tmp_path / "run", tmp_path / "suite.toml", tmp_path / "bin"
    fleet_command(bindir)  # `fleet` on PATH is this test's interpreter
    _stub(bindir, "sbatch", f'echo "$@" >> {tmp_path}/sbatch.args; echo "Submitted batch job 2"')
    _stub(bindir, "squeue", "exit 1")  # (a job id of this test's own: the real Slurm knows it not)
    _stub(bindir, "scontrol", "exit 1")
    suite.write_text(textwrap.dedent(f"""
        [suite]
        name = "restart-window"
        [[steps]]
        id = "quick"
        command = "true"
        [[steps]]
        id = "long"
        command = "echo $$ >> {tmp_path}/long.runs; sleep 300"
        """) + (f"estimate = {ESTIMATE_S}\n" if estimate else ""))
    job = str(random.randrange(900_000_000, 999_999_999))
    e = {k: v for k, v in env().items() if not k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "FLEET_", "PBS_"))}
    e.update(PATH=f"{bindir}{os.pathsep}{e.get('PATH', '')}", FLEET_MACHINE="local", FLEET_MAX_JOBS="3",
             FLEET_DRAIN_BEFORE=str(DRAIN_BEFORE), SLURM_JOB_ID=job, SLURM_JOB_NODELIST=socket.gethostname(),
             SLURM_JOB_END_TIME=str(int(time.time()) + JOB_S))
    out_path = tmp_path / "job.out"
    with open(out_path, "w") as out:
        bash = subprocess.Popen(["bash", str(SCRIPT), str(suite), str(run_dir)], cwd=tmp_path, env=e, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # The job's first fleet started `long` (it fits the job), and runs it a while.
        wait_for(lambda: bash.poll() is not None or ("started", "long") in {(r["kind"], r.get("step"))
                                                                              for r in events(run_dir)},
                 60, "long running")
        assert bash.poll() is None, out_path.read_text()
        [began] = [r["t"] for r in events(run_dir) if r["kind"] == "allocation_end"]
        wait_for(lambda: time.time() >= began + KILL_AFTER_S, KILL_AFTER_S + 5, "the first fleet's time")
        assert bash.poll() is None, out_path.read_text()
        [first] = [r for r in events(run_dir) if r["kind"] == "fleet_starting"]
        os.kill(first["pid"], signal.SIGKILL)
        code = bash.wait(timeout=JOB_S + 60)
        text = out_path.read_text()
        assert "bringing a fleet up again (1 of at most 2)" in text, text
        assert len([r for r in events(run_dir) if r["kind"] == "fleet_starting"]) == 2, text
        # A job like this one would finish it: not "needs a longer allocation", exit 3, and the next job.
        assert "needs a longer allocation" not in text, text
        assert code == 3, text
        assert "submitting job 2" in text and (tmp_path / "sbatch.args").exists(), text
        runs = (tmp_path / "long.runs").read_text().split()
        # With an estimate the second fleet holds it back (it would not end before the drain point).
        assert len(runs) == (1 if estimate else 2), (runs, text)
        got = [a["outcome"] for a in records.attempts(run_dir, "long")]
        assert got == ["lost"], (got, text)  # (the drain's interrupt and a not_started are no attempts)
        assert_nothing_left(run_dir)
    finally:
        if bash.poll() is None:
            os.killpg(bash.pid, signal.SIGKILL)
            bash.wait(timeout=30)
        subprocess.run([str(bindir / "fleet"), "down", "--run-dir", str(run_dir)], env=e, timeout=60,
                       capture_output=True)
