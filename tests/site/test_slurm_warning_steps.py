"""Slurm's warning signal asked for without ``B:`` (``--signal=USR1@N``, here as
``scancel --signal=USR1``) reaches every process of the job's steps: a shell step's
command dies of it, and the shell goes on and exits 0. That is not the step's end: it is
interrupted (no attempt used, the next job runs it again), and what needs it does not
start (fleet.node.jobend)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from cluster import TERMINAL_STATES, _job_fields, _run, fleet_job_script, requires_slurm, stop_coordinators
from fleetharness import assert_nothing_left, events, wait_for, write_suite

from fleet.wire import records

pytestmark = [requires_slurm]

NAME = "fleet-warned-steps"
# The shells live a second past the warning: one that exits 0 before its zygote and agent
# take the signal (Slurm signals the job's processes one by one, the steps first) keeps
# its exit, as docs/operations.md says; CI's loaded machine once saw that order.
STEPS = ("plain", "trapping")  # a shell whose command the signal kills; one that traps the signal


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError as e:
        return f"({e})"


def test_a_shell_step_whose_command_the_warning_signal_killed_is_interrupted_and_its_dependent_does_not_start(
        tmp_path):
    work, run_dir, tag = tmp_path, tmp_path / "run", f"warned-{tmp_path.name}"
    suite = write_suite(work / "suite.toml", f"""[suite]
name = "warned"
[[steps]]
id = "plain"
command = ": {tag}; echo start; sleep 120; echo sleep returned $?; sleep 1"
[[steps]]
id = "trapping"
command = "trap 'echo warned' USR1; : {tag}; echo start; sleep 120 & wait $!; echo wait returned $?; sleep 1"
[[steps]]
id = "after"
deps = ["plain", "trapping"]
command = "echo after ran"
""")
    script = fleet_job_script(work, run_dir, suite, "first", ("--heartbeat", "0.5"), run_s=50)
    p = subprocess.run(["sbatch", "--parsable", "-N", "1", "--ntasks-per-node=2", "-J", NAME,
                        "-o", str(work / "first.out"), str(script)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    jobid = p.stdout.strip().split(";")[0]
    try:
        wait_for(lambda: all("start" in _read(run_dir / "steps" / s / "log") for s in STEPS), 50,
                 "the steps' shells to run")
        code, out = _run(["scancel", "--signal=USR1", jobid], timeout=15)
        assert code == 0, out
        wait_for(lambda: (_job_fields(jobid) or {}).get("JobState") in TERMINAL_STATES, 50, "the job to end")
        rcs = _read(work / "first.rcs")
        report = rcs + _read(work / "first.out") + _read(run_dir / "coordinator.log")
        assert rcs.split("\n")[:2] == ["up 0", "run 3"], report
        ev = events(run_dir)
        exits = {e["step"]: e for e in ev if e["kind"] == "exit"}
        assert set(exits) == set(STEPS), (exits, report)
        for s in STEPS:  # (the shell that traps the signal exits 0; the other, if it lives on, too)
            assert exits[s]["outcome"] == "interrupted", (exits[s], _read(run_dir / "steps" / s / "log"), report)
        assert not [e for e in ev if e.get("step") == "after" and e["kind"] in ("started", "exit")], report
        for s in (*STEPS, "after"):
            assert records.attempts(run_dir, s) == [] and records.read_final(run_dir, s) is None, s
        assert_nothing_left(run_dir, tag=tag)
    finally:
        _run(["scancel", "--name", NAME], timeout=15)
        stop_coordinators(run_dir)
