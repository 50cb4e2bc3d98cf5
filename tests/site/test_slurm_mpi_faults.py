"""MPI steps under a real Slurm (two fake nodes, all this machine) when a rank or the
step's srun fails.

A rank that exits non-zero while the others wait ends the step at once (srun's
--kill-on-bad-exit=1, fleet.site.mpi), as under Hydra: Slurm's default left the others
waiting until the step's timeout. A step's srun SIGKILLed (the OOM killer, an operator)
has its Slurm step cancelled, and its end waited for, before the attempt's end is
reported (fleet.node.srunend): the retry starts on cores no rank of the first attempt
still holds, and nothing of it outlives the fleet.

The ranks need no MPI library: srun starts any program as the step's tasks. The job
script holds between `fleet run` and `fleet down`, and after `fleet down`, until this
test has looked at the process table and `squeue -s`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil

from cluster import _run, requires_slurm, stop_coordinators
from fleetharness import REPO, TESTS, events, wait_for

from fleet.wire import records

pytestmark = [requires_slurm]

NAME = "fleet-mpi-faults"


def _submit(work: Path, suite: str) -> str:
    """A 2-node job: fleet up, fleet run (its status in `ran`), a hold until `go-down`,
    fleet down, a hold until `release` (each hold bounded); its id."""
    (work / "suite.toml").write_text(textwrap.dedent(suite))
    script = work / "job.sh"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        cd {work}
        export PYTHONPATH={TESTS}:{REPO}${{PYTHONPATH:+:$PYTHONPATH}}
        unset FLEET_RUN_DIR FLEET_MACHINE FLEET_MACHINES
        PY={sys.executable}
        timeout -k 5 60 $PY -m fleet up --run-dir run --timeout 40; echo "up $?" >> rcs
        timeout -k 5 150 $PY -m fleet run suite.toml --run-dir run > run.out 2>&1; echo $? > ran.tmp
        mv ran.tmp ran
        for i in $(seq 600); do [ -e go-down ] && break; sleep 0.1; done
        timeout -k 5 40 $PY -m fleet down --run-dir run; echo "down $?" >> rcs
        touch downed
        for i in $(seq 600); do [ -e release ] && break; sleep 0.1; done
        """))
    p = subprocess.run(["sbatch", "--parsable", "-N", "2", "--ntasks-per-node=2", "-t", "5", "-J", NAME,
                        "-o", str(work / "job.out"), str(script)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip().split(";")[0]


def _steps(jobid: str) -> list[str]:
    """The job's steps Slurm still knows (its batch and extern steps aside)."""
    code, out = _run(["squeue", "-h", "-s", "-j", jobid, "-o", "%i"], timeout=10)
    return [s for s in out.split() if s.split(".")[-1].isdigit()] if code == 0 else [f"(squeue: {out.strip()})"]


def _with(marker: str) -> dict[int, str]:
    """pid -> command line of every live process whose command line holds `marker`."""
    out = {}
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            if marker in cmd and p.pid != os.getpid() and p.info["status"] != psutil.STATUS_ZOMBIE:
                out[p.pid] = cmd[:200]
        except psutil.Error:
            continue
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError as e:
        return f"({e})"


def _report(work: Path) -> str:
    run = work / "run"
    return "\n".join(f"--- {name}:\n{_read(path)[-3000:]}" for name, path in (
        ("job.out", work / "job.out"), ("run.out", work / "run.out"), ("step log", run / "steps" / "m" / "log"),
        ("agents", run / "agents" / "launcher.log"), ("coordinator.log", run / "coordinator.log")))


def _end(work: Path, jobid: str, marker: str) -> None:
    (work / "go-down").touch()
    (work / "release").touch()
    _run(["scancel", jobid], timeout=15)
    stop_coordinators(work / "run")
    for pid in _with(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def test_a_rank_that_exits_non_zero_under_srun_ends_its_mpi_step_at_once_not_at_its_timeout(tmp_path):
    # Rank 1 exits 3 while rank 0 would sleep for 300 s: with Slurm's default (no
    # --kill-on-bad-exit) rank 0 ran on until the step's timeout, and it ended timed_out.
    marker = f"badexit-{os.urandom(6).hex()}"
    jobid = _submit(tmp_path, f"""\
        [suite]
        name = "badexit"
        [[steps]]
        id = "m"
        mpi = true
        ranks = 2
        retries = 0
        timeout = 120
        command = "if [ \\"$SLURM_PROCID\\" = 1 ]; then sleep 1; exit 3; fi; sleep 300 # {marker}"
        """)
    try:
        wait_for(lambda: (tmp_path / "ran").exists(), 200, "fleet run to return")
        ev = events(tmp_path / "run")
        [exit_] = [e for e in ev if e["kind"] == "exit" and e["step"] == "m"]
        assert exit_["outcome"] == "failed", _report(tmp_path)
        # (srun's status is its tasks' highest: rank 0's, killed by Slurm's SIGTERM, 143)
        assert "task 1: Exited with exit code 3" in _read(tmp_path / "run" / "steps" / "m" / "log"), _report(tmp_path)
        assert _read(tmp_path / "ran").strip() == "1", _report(tmp_path)
        assert not _with(marker), _report(tmp_path)
    finally:
        _end(tmp_path, jobid, marker)


def _attempt_1_ranks(marker: str) -> list[int]:
    """The shells attempt 1's ranks run (theirs alone say MARKER-a1: the command says -a$FLEET_ATTEMPT)."""
    return list(_with(f"{marker}-a1"))


def _srun_of_attempt_1(marker: str) -> list[int]:
    """The step's srun (its launcher, the zygote's child), not the child srun forks."""
    out = []
    for pid, cmd in _with(marker).items():
        try:
            parent = " ".join(psutil.Process(pid).parent().cmdline())
            if os.path.basename(cmd.split(" ", 1)[0]) == "srun" and "fleet.node.zygote" in parent:
                out.append(pid)
        except psutil.Error:
            continue
    return out


def test_an_mpi_step_whose_srun_is_sigkilled_has_its_slurm_step_ended_before_the_retry_starts(tmp_path):
    # Attempt 1's ranks run `sh -c "sleep 300; : MARKER-a1"`; attempt 2's ranks record what
    # of those is still running when they start. Before the fix both attempts ran at once
    # on the same cores, and attempt 1's ranks outlived `fleet run` and the fleet.
    marker = f"srunkill-{os.urandom(6).hex()}"
    left = tmp_path / "left"
    jobid = _submit(tmp_path, f"""\
        [suite]
        name = "srunkill"
        [[steps]]
        id = "m"
        mpi = true
        ranks = 2
        retries = 1
        command = '''
        if [ "$FLEET_ATTEMPT" = 1 ]; then
            M={marker}-a$FLEET_ATTEMPT; sh -c "sleep 300; : $M"
        else
            pgrep -af "{marker}-a[1]" > {left}.$SLURM_PROCID; true
        fi'''
        """)
    try:
        wait_for(lambda: len(_attempt_1_ranks(marker)) == 2, 120, "attempt 1's two ranks running")
        [srun] = _srun_of_attempt_1(marker)
        os.kill(srun, signal.SIGKILL)
        wait_for(lambda: (tmp_path / "ran").exists(), 200, "fleet run to return")
        report = _report(tmp_path)
        attempts = records.attempts(tmp_path / "run", "m")
        assert [a["outcome"] for a in attempts] == ["terminated", "succeeded"], report
        # Its work ended at its reap, not when the helper had ended its Slurm step (seconds
        # later: before 2026-12-07 that wait was counted as work, ~35 times its stamps' length)
        [a1] = [a for a in attempts if a["outcome"] == "terminated"]
        assert a1["work_s"] <= a1["ended_at"] - a1["started_at"] + 0.5, (a1, report)
        seen = {p.name: _read(p) for p in tmp_path.glob("left.*")}
        assert set(seen) == {"left.0", "left.1"}, (seen, report)
        assert not any(seen.values()), f"attempt 1's ranks ran beside attempt 2: {seen}\n{report}"
        log = _read(tmp_path / "run" / "steps" / "m" / "log")
        assert "fleet: srun ended by SIGKILL while its Slurm step" in log, report
        # After fleet run and after fleet down: nothing of attempt 1, no step of it in Slurm.
        assert not _attempt_1_ranks(marker), report
        (tmp_path / "go-down").touch()
        wait_for(lambda: (tmp_path / "downed").exists(), 60, "fleet down to return")
        assert not _with(marker) and not _steps(jobid), (_with(marker), _steps(jobid), report)
    finally:
        _end(tmp_path, jobid, marker)
