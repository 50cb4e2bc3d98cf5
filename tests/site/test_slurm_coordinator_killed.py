"""A coordinator killed with -9 inside a real Slurm job: its srun, the job step it made,
and every agent, zygote and step of the fleet end within seconds, before the agents have
joined and after, while the job itself goes on.

An agent under srun is the child of srun's daemon on its node, not of the coordinator:
it dies with that daemon, when srun's step ends. Before 2026-12-07 nothing tied the srun
to the coordinator: adopted by init it ran on, and its agents until they heard nothing
from the coordinator for 3/4 of the heartbeat timeout (here 120 s, so 90 s), or their
120 s join timeout. Now srun is started through a tiny wrapper that asks for SIGTERM
when the coordinator dies (fleet.site.tether), and SIGTERM to srun ends its step.
What is left is read from the process table (every process whose environment carries
this test's tag) and from `squeue -s` (the job's steps)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cluster import _run, requires_slurm, stop_coordinators
from fleetharness import REPO, TESTS, events, wait_for
from tagged import kill_tagged, tagged

pytestmark = [requires_slurm]

NAME = "fleet-killed-coord"
TAG_VAR = "SRUN_DEATH_TAG"  # (the test's own: the job's processes, srun and the agents inherit it)
LEFT_WITHIN_S = 20.0  # far under the agents' 90 s (3/4 of --heartbeat-timeout) and 120 s join timeout
STEP = "sleep 301"  # (the steps': the job script's own sleep is another)
OURS = ("fleet.control.coordinator", "fleet.node.", "srun", STEP)  # (not the job script's shell and sleep)

SUITE = """[suite]
name = "killed"

[[steps]]
id = "s/{i}"
array = "1-4"
command = "%s"
""" % STEP


def _tagged(tag: str) -> dict[int, str]:
    """pid -> command line of every live process of the fleet carrying the tag."""
    return tagged(TAG_VAR, tag, OURS)


def _srun_up(tag: str) -> bool:
    return any(os.path.basename(cmd.split(" ", 1)[0]) == "srun" for cmd in _tagged(tag).values())


def _steps(jobid: str) -> list[str]:
    """The job's steps Slurm still knows (its batch and extern steps aside)."""
    code, out = _run(["squeue", "-h", "-s", "-j", jobid, "-o", "%i"], timeout=10)
    return [s for s in out.split() if s.split(".")[-1].isdigit()] if code == 0 else [f"(squeue: {out.strip()})"]


def _submit(tmp_path: Path, run_dir: Path, tag: str) -> str:
    """A two-node job whose script brings a fleet up and then stays (the job's end would end
    every step itself): its id."""
    (tmp_path / "suite.toml").write_text(SUITE)
    script = tmp_path / "job.sh"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        cd {tmp_path}
        export PYTHONPATH={TESTS}:{REPO}
        unset FLEET_RUN_DIR FLEET_MACHINE FLEET_MACHINES
        PY={sys.executable}
        if timeout -k 5 60 $PY -m fleet up --run-dir {run_dir} --timeout 40 --heartbeat-timeout 120; then
            timeout -k 5 200 $PY -m fleet run suite.toml --run-dir {run_dir} &
        fi
        sleep 300
        """))
    p = subprocess.run(["sbatch", "--parsable", "-N", "2", "--ntasks-per-node=2", "-t", "5", "-J", NAME,
                        "-o", str(tmp_path / "job.out"), str(script)], capture_output=True, text=True,
                       timeout=30, env={**os.environ, TAG_VAR: tag})
    assert p.returncode == 0, p.stderr
    return p.stdout.strip().split(";")[0]


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError as e:
        return f"({e})"


def _every_node_joined(run_dir: Path) -> bool:
    return (run_dir / "events.jsonl").exists() and sum(e["kind"] == "node_joined" for e in events(run_dir)) == 2


@pytest.mark.parametrize("joined", [False, True], ids=["as_its_srun_starts", "once_its_agents_joined"])
def test_a_coordinator_killed_with_minus_9_in_a_slurm_job_leaves_no_srun_step_agent_or_zygote(tmp_path, joined):
    tag = os.urandom(8).hex()
    run_dir = tmp_path / "run"
    jobid = _submit(tmp_path, run_dir, tag)
    try:
        # Looked at as often as can be: srun is up long before its agents have joined.
        deadline = time.monotonic() + 90
        while not (_every_node_joined(run_dir) if joined else _srun_up(tag)):
            assert time.monotonic() < deadline, f"no srun / agents joined:\n{_read(tmp_path / 'job.out')}"
            time.sleep(0.01 if not joined else 0.1)
        if joined:  # (the steps are started: they must end too)
            wait_for(lambda: sum(STEP in c for c in _tagged(tag).values()) >= 4, 60, "four steps running")
        [coordinator] = [pid for pid, cmd in _tagged(tag).items() if "fleet.control.coordinator" in cmd]
        assert _steps(jobid), "srun made no job step: the test would prove nothing"
        os.kill(coordinator, signal.SIGKILL)
        deadline = time.monotonic() + LEFT_WITHIN_S
        while ((left := _tagged(tag)) or (steps := _steps(jobid))) and time.monotonic() < deadline:
            time.sleep(0.2)
        steps = _steps(jobid)
        assert not left and not steps, (
            f"left {LEFT_WITHIN_S} s after the coordinator's SIGKILL:\n"
            + "\n".join(f"{pid} {cmd}" for pid, cmd in left.items()) + f"\njob steps: {steps}"
            + f"\nlauncher.log:\n{_read(run_dir / 'agents' / 'launcher.log')[-2000:]}")
        assert _run(["squeue", "-h", "-j", jobid, "-o", "%T"])[1].strip() == "RUNNING", \
            "the job ended: its end, not the coordinator's, would have ended the step"
    finally:
        _run(["scancel", jobid], timeout=15)
        stop_coordinators(run_dir)
        kill_tagged(TAG_VAR, tag)  # (this test's fleet's alone: they carry its tag)
