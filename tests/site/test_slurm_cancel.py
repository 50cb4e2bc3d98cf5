"""A real Slurm job cancelled under a running suite (`scancel JOBID`: no warning signal,
as a time limit with no --signal): Slurm sends SIGTERM to every process of the job it
tracks (this Slurm's proctrack/linuxproc does not track the coordinator `fleet up`
detached; a proctrack/cgroup site's would get it too and stop, the same outcome).
Every running step ends interrupted (no attempt used), the queued one too or dropped
unstarted, nothing is lost or unrunnable, the coordinator does not outlive the job, and
the next job finishes the suite (fleet.node.jobend, fleet.control.jobend). Slurm's
warning signal sent to every step (`--signal=USR1@300` without B:) drains the fleet as
the one the job script passes on does."""

from __future__ import annotations

import subprocess
from pathlib import Path

from cluster import (TERMINAL_STATES, _job_fields, _run, coordinators, fleet_job_script, requires_slurm, sbatch_wait,
                     stop_coordinators)
from fleetharness import assert_nothing_left, events, interruptible_steps, wait_for, write_suite

from fleet.wire import records

pytestmark = [requires_slurm]

NAME = "fleet-cancelled"
HB = ("--heartbeat", "0.5")
RUNNING = ("shell", "call", "c1", "c2")  # two nodes of two cores: these four start at once


def _suite(work: Path, flag: Path) -> Path:
    extra = "".join(f'[[steps]]\nid = "{c}"\ncommand = "test -e {flag} || sleep 120"\n' for c in ("c1", "c2"))
    # (c1 and c2 first: with shell and call they fill the four cores, and `queued` waits)
    return write_suite(work / "suite.toml", '[suite]\nname = "cancelled"\n' + extra + interruptible_steps(flag))


def _submit(work: Path, script: Path) -> str:
    """The first job, not waited for: its id."""
    p = subprocess.run(["sbatch", "--parsable", "-N", "2", "--ntasks-per-node=2", "-J", NAME,
                        "-o", str(work / "first.out"), str(script)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip().split(";")[0]


def _clean_up(run_dir: Path) -> None:
    _run(["scancel", "--name", NAME], timeout=15)
    stop_coordinators(run_dir)


def test_a_cancelled_slurm_job_interrupts_its_steps_leaves_no_coordinator_behind_and_the_next_job_finishes(
        tmp_path):
    work, run_dir, flag = tmp_path, tmp_path / "run", tmp_path / "flag"
    suite = _suite(work, flag)
    jobid = _submit(work, fleet_job_script(work, run_dir, suite, "first", HB))
    try:
        wait_for(lambda: {("started", s) for s in RUNNING} | {("queued", "queued")}
                 <= {(e["kind"], e.get("step")) for e in events(run_dir)}, 90, "four steps running, one queued")
        code, out = _run(["scancel", jobid], timeout=15)
        assert code == 0, out
        wait_for(lambda: (_job_fields(jobid) or {}).get("JobState") in TERMINAL_STATES, 60, "the job to end")
        # The coordinator, which Slurm did not stop, stops on its own once its agents are gone.
        wait_for(lambda: not coordinators(run_dir), 60, "no coordinator left")
        report = _read(work / "first.out") + _read(run_dir / "coordinator.log")
        ev = events(run_dir)
        [drained] = [e for e in ev if e["kind"] == "drained"]
        assert drained["reason"].startswith("the batch job is ending (the agent on node"), report
        exits = {e["step"]: e for e in ev if e["kind"] == "exit"}
        assert set(RUNNING) <= set(exits) <= set(RUNNING) | {"queued"}, (exits, report)
        assert {e["outcome"] for e in exits.values()} == {"interrupted"}, (exits, report)
        assert not [e for e in ev if e["kind"] in ("retry", "blocked", "unrunnable")], report
        [ns] = [e for e in ev if e["kind"] == "not_started"]
        assert ns["steps"] == 6 - len(exits), (ns, report)
        for s in (*RUNNING, "queued", "after"):
            assert records.attempts(run_dir, s) == [], s       # nothing counted as an attempt
            assert records.read_final(run_dir, s) is None, s   # nothing on disk stops a rerun
        assert not (run_dir / "fleet.json").exists(), report
        assert_nothing_left(run_dir, tag=str(flag))
        # The next job finishes the suite, one attempt each.
        flag.touch()
        rc, output = sbatch_wait(fleet_job_script(work, run_dir, suite, "second", HB), 180, cwd=work,
                                 sbatch_args=("-N", "2", "--ntasks-per-node=2", "-J", NAME,
                                              "-o", str(work / "second.out")))
        rcs = _read(work / "second.rcs")
        assert rc == 0 and rcs.split("\n")[:3] == ["up 0", "run 0", "down 0"], (rc, rcs, output)
        for s in (*RUNNING, "queued", "after"):
            assert [a["outcome"] for a in records.attempts(run_dir, s)] == ["succeeded"], s
        assert_nothing_left(run_dir, tag=str(flag))
    finally:
        _clean_up(run_dir)


def test_slurms_warning_signal_to_every_step_not_the_batch_shell_drains_the_fleet_and_fleet_run_exits_3(tmp_path):
    # `#SBATCH --signal=USR1@300` without B: signals every process of the job's steps
    # (the agents, zygotes and steps), not the batch shell: as `scancel --signal=USR1`.
    work, run_dir, flag = tmp_path, tmp_path / "run", tmp_path / "flag"
    suite = _suite(work, flag)
    jobid = _submit(work, fleet_job_script(work, run_dir, suite, "first", HB))
    try:
        wait_for(lambda: {("started", s) for s in RUNNING} <= {(e["kind"], e.get("step")) for e in events(run_dir)},
                 90, "four steps running")
        code, out = _run(["scancel", "--signal=USR1", jobid], timeout=15)
        assert code == 0, out
        # The script goes on: fleet run exits 3, fleet down stops the fleet, the job ends.
        wait_for(lambda: (_job_fields(jobid) or {}).get("JobState") in TERMINAL_STATES, 90, "the job to end")
        rcs = _read(work / "first.rcs")
        report = rcs + _read(work / "first.out") + _read(run_dir / "coordinator.log")
        assert rcs.split("\n")[:3] == ["up 0", "run 3", "down 0"], report
        ev = events(run_dir)
        [drained] = [e for e in ev if e["kind"] == "drained"]
        assert drained["reason"].startswith("the batch system's warning signal (SIGUSR1) reached the agent on node"), \
            report
        assert not [e for e in ev if e["kind"] == "node_lost"], report  # the agents lived on until fleet down
        exits = {e["step"]: e for e in ev if e["kind"] == "exit"}
        assert set(RUNNING) <= set(exits) and {e["outcome"] for e in exits.values()} == {"interrupted"}, report
        for s in (*RUNNING, "queued", "after"):
            assert records.attempts(run_dir, s) == [] and records.read_final(run_dir, s) is None, s
        assert_nothing_left(run_dir, tag=str(flag))
    finally:
        _clean_up(run_dir)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError as e:
        return f"({e})"
