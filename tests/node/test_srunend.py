"""An MPI step's srun that died by a signal (fleet.node.srunend): its Slurm step is
cancelled, and its end waited for, before the zygote reports the attempt's end; what
goes wrong asking Slurm is said in the step's log and on the helper's stderr (the
agent's log). Slurm's commands here are small scripts on PATH (scontrol shows one step
whose SrunHost:Pid is our srun while a file says the step is there; scancel records its
arguments), so that a failing Slurm can be had; the end to end case, with the real
Slurm, is in tests/site/test_slurm_mpi_faults.py."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleet.wire.messages import Shutdown, Started

from test_zygote import ZygoteProcess, assert_nothing_left, launch, subreaper, zygote  # noqa: F401

WAIT_S = 60.0  # well over the helper's own bound on its wait (fleet.node.srunend.END_S, 30 s)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote needs Linux")

SCONTROL = """#!/bin/bash
# scontrol show step -o [ID]: step 9.1, whose srun is the pid in {state}/srunpid, while {state}/step is there
if [ ! -e {state}/step ]; then
    [ -n "$4" ] && {{ echo "Job step $4 not found" >&2; exit 1; }}
    echo "StepId=9.batch UserId=0 State=RUNNING SrunHost:Pid=(null):0"; exit 0
fi
[ -n "$4" ] || echo "StepId=9.batch UserId=0 State=RUNNING SrunHost:Pid=(null):0"
echo "StepId=9.1 UserId=0 State=RUNNING NodeList=node1 Tasks=2 SrunHost:Pid={host}:$(cat {state}/srunpid)"
"""
SCANCEL_ENDS = """#!/bin/bash
echo "$@" >> {state}/scancels
( sleep 0.5; rm -f {state}/step ) &  # Slurm takes its time to end the step
"""
SCANCEL_FAILS = """#!/bin/bash
echo "$@" >> {state}/scancels
echo "scancel: error: Kill job error on job step id 9.1: Access/permission denied" >&2
exit 1
"""
SRUN = """#!/bin/bash
echo $$ > {state}/srunpid
touch {state}/step
exec sleep 300
"""


def _slurm(tmp_path: Path, scancel: str | None, scontrol: bool = True) -> tuple[Path, Path]:
    """(the directory of the fake Slurm commands, the state directory they share)."""
    state, bin_ = tmp_path / "state", tmp_path / "bin"
    state.mkdir()
    bin_.mkdir()
    scripts = {"srun": SRUN, **({"scontrol": SCONTROL} if scontrol else {}), **({"scancel": scancel} if scancel else {})}
    for name, text in scripts.items():
        (bin_ / name).write_text(text.format(state=state, host=socket.gethostname()))
        (bin_ / name).chmod(0o755)
    return bin_, state


def _env(bin_: Path) -> dict:
    """What the zygote's environment gets: the fake commands first, no job (scontrol asked of every step)."""
    return {"PATH": f"{bin_}{os.pathsep}{os.environ.get('PATH', '')}", "SLURM_JOB_ID": ""}


def _wait(pred, what: str, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _start_and_kill_srun(z: ZygoteProcess, tmp_path: Path, bin_: Path, state: Path) -> Started:
    z.send(launch(tmp_path, "mpi", kind="command", command=[str(bin_ / "srun")], threads=1, grace=1.0))
    started = z.expect(Started)
    _wait(lambda: (state / "step").exists(), "the fake srun never started")
    os.kill(started.pid, signal.SIGKILL)  # the OOM killer's, an operator's
    return started


def test_a_sigkilled_srun_s_slurm_step_is_cancelled_and_gone_before_the_attempt_s_end_is_reported(
        zygote, tmp_path, subreaper):
    bin_, state = _slurm(tmp_path, SCANCEL_ENDS)
    z: ZygoteProcess = zygote(env=_env(bin_))
    started = _start_and_kill_srun(z, tmp_path, bin_, state)
    exited = z.exited("mpi", timeout=WAIT_S)
    assert exited.signal == signal.SIGKILL and exited.outcome == "terminated", exited
    # Reported only once Slurm had no such step: its cores are free for the retry.
    assert not (state / "step").exists()
    assert (state / "scancels").read_text() == "--signal=KILL 9.1\n"
    log = (tmp_path / "steps" / "mpi" / "log").read_text()
    assert "fleet: srun ended by SIGKILL while its Slurm step 9.1 runs: cancelling that step" in log, log
    z.send(Shutdown())
    assert z.wait() == 0
    assert_nothing_left([started.pid], [started.pgid])


def test_a_zygote_told_to_stop_while_a_dead_srun_s_step_is_being_cancelled_reports_its_end_before_it_exits(
        zygote, tmp_path, subreaper):
    bin_, state = _slurm(tmp_path, SCANCEL_ENDS.replace("sleep 0.5", "sleep 2"))
    z: ZygoteProcess = zygote(env=_env(bin_))
    started = _start_and_kill_srun(z, tmp_path, bin_, state)
    _wait(lambda: (state / "scancels").exists(), "no scancel")
    z.send(Shutdown())
    exited = z.exited("mpi", timeout=WAIT_S)
    assert exited.signal == signal.SIGKILL and not (state / "step").exists(), exited
    assert z.wait() == 0
    assert_nothing_left([started.pid], [started.pgid])


def test_a_scancel_that_fails_is_said_in_the_step_s_log_and_the_attempt_s_end_is_reported_all_the_same(
        zygote, tmp_path, subreaper):
    bin_, state = _slurm(tmp_path, SCANCEL_FAILS)
    z: ZygoteProcess = zygote(env=_env(bin_))
    started = _start_and_kill_srun(z, tmp_path, bin_, state)
    exited = z.exited("mpi", timeout=WAIT_S)
    assert exited.signal == signal.SIGKILL, exited
    log = (tmp_path / "steps" / "mpi" / "log").read_text()
    assert ("fleet: cannot cancel Slurm step 9.1 (scancel: error: Kill job error on job step id 9.1: "
            "Access/permission denied): its ranks may still run") in log, log
    z.send(Shutdown())
    assert z.wait() == 0
    assert_nothing_left([started.pid], [started.pgid])


def _helper(tmp_path: Path, bin_: Path, pid: int, only: bool = False) -> subprocess.CompletedProcess:
    """The helper run as the zygote runs it; `only`: the fake commands are all there is on PATH."""
    env = {**os.environ, **_env(bin_), **({"PATH": str(bin_)} if only else {})}
    return subprocess.run([sys.executable, "-m", "fleet.node.srunend", str(pid), str(tmp_path / "log"), "SIGKILL"],
                          env=env, capture_output=True, text=True, timeout=WAIT_S)


def test_the_helper_says_in_the_log_and_on_stderr_when_slurm_cannot_be_asked_or_does_not_cancel():
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        bin_, state = _slurm(tmp, SCANCEL_FAILS)
        (state / "srunpid").write_text("4242\n")
        (state / "step").touch()
        done = _helper(tmp, bin_, 4242)
        said = "cannot cancel Slurm step 9.1 (scancel: error: Kill job error on job step id 9.1: " \
               "Access/permission denied): its ranks may still run"
        assert done.returncode == 1 and said in done.stderr and said in (tmp / "log").read_text(), done
    with tempfile.TemporaryDirectory() as d:  # no scontrol at all
        tmp = Path(d)
        bin_, _ = _slurm(tmp, None, scontrol=False)
        done = _helper(tmp, bin_, 4242, only=True)
        said = "srun ended by SIGKILL; cannot tell whether its Slurm step still runs"
        assert done.returncode == 1 and said in done.stderr and said in (tmp / "log").read_text(), done
    with tempfile.TemporaryDirectory() as d:  # no such step (srun had ended it, or never made it): nothing said
        tmp = Path(d)
        bin_, state = _slurm(tmp, SCANCEL_FAILS)
        (state / "srunpid").write_text("4242\n")
        done = _helper(tmp, bin_, 4242)
        assert done.returncode == 0 and not done.stderr and not (tmp / "log").exists(), done
        assert not (state / "scancels").exists()
