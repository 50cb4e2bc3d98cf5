"""Stopping an MPI step that srun launched: its ranks get SIGTERM, then their grace.

srun takes SIGTERM, SIGHUP and SIGQUIT as an order to end its job step at once: Slurm
SIGKILLs every task ("srun: forcing job termination", then "task 0: Killed"), so a rank's
handler (a checkpoint, a trap) never runs. Of the other signals srun passes on SIGUSR1
and SIGUSR2 only; SIGINT only as a second one within a second, and then it kills the
tasks as for SIGTERM. So the zygote does not signal an srun step's process group when it
stops it (fleet.node.stopping). It asks Slurm instead: ``scancel --signal=TERM
JOB.STEP`` signals every process of the step on every node, and the step id is that
whose srun is ours (``SrunHost:Pid`` in ``scontrol show step``). That takes Slurm's
time, so a helper process does it (``python -m fleet.node.srunstop PID LOG``), not the
zygote's loop. When the grace is over srun gets its SIGTERM: Slurm SIGKILLs the tasks,
and srun exits once they are gone (its group gets SIGKILL if it has not, a few seconds
later: stopping.LAUNCHER_KILL_S).

Where the step cannot be found (srun had not made it yet, or Slurm does not answer
within FIND_S), the helper sends srun SIGTERM: its tasks end at once, as before.

A step on some of the job's nodes only: scancel signals its tasks, and then fails (exit
status 225, "Kill job error on job step id N: Invalid job id specified", from the job's
nodes that run none of the step's tasks: Slurm 22.05). That failure is taken for the
signal sent when it is scancel's only error and the step is still there
(:func:`sent_anyway`); before 2026-12-06 srun got SIGTERM for it, and the ranks were
SIGKILLed with no grace (no checkpoint).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from fleet.wire import interpreter

FIND_S = 2.0  # how long the helper looks for the step (srun may be making it)
SLURM_S = 20.0  # a bound on each scontrol or scancel


def handles(launch) -> bool:
    """Whether a Launch's process is srun running an MPI step (its ranks: Slurm's tasks)."""
    cmd = launch.command
    return bool(launch.threads) and isinstance(cmd, (list, tuple)) and bool(cmd) and os.path.basename(cmd[0]) == "srun"


def step_of(shown: str, host: str, pid: int) -> str | None:
    """The id (JOB.STEP) of the step whose srun runs as ``pid`` on ``host``, from the
    one-line-per-step output of ``scontrol show step -o``; None if none is."""
    short = host.split(".")[0]
    for line in shown.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        srun = fields.get("SrunHost:Pid", "")
        where, _, spid = srun.rpartition(":")
        if spid == str(pid) and where.split(".")[0] == short and "StepId" in fields:
            return fields["StepId"]
    return None


class Srun:
    """The zygote's stopping of srun steps (fleet.node.stopping.Launcher)."""

    def handles(self, step) -> bool:
        return handles(step.launch)

    def term(self, step) -> None:
        """SIGTERM to the step's tasks, from a helper process (the zygote never waits on
        Slurm). The helper is the zygote's child in a session of its own: reaped as any
        child, and no signal to the step's groups reaches it."""
        argv = [*interpreter.module("fleet.node.srunstop"), str(step.pid), step.launch.log]
        try:
            os.posix_spawn(argv[0], argv, os.environ, setsid=True,
                           file_actions=[(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)])
        except OSError as exc:  # no helper: srun's own way, the tasks killed at once
            note(step.launch.log, f"fleet: cannot ask Slurm to signal the ranks ({exc}); srun ends them\n")
            _signal(step.pid, signal.SIGTERM)

    def kill(self, step) -> None:
        """The grace is over: srun has Slurm SIGKILL its tasks, and exits."""
        _signal(step.pid, signal.SIGTERM)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def note(log: str, text: str) -> None:
    """Append `text` to the step's log."""
    from fleet.node.stepdirs import append_to_log  # (on a line of its own; only when said)
    append_to_log(log, text)


def slurm(argv: list[str]) -> subprocess.CompletedProcess | None:
    """A Slurm command's outcome, bounded by SLURM_S; None if it could not run or answer."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=SLURM_S)
    except (OSError, subprocess.SubprocessError):
        return None


def _is_srun(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() == "srun"
    except OSError:
        return False


def find(pid: int) -> str | None:
    """The step id of our srun `pid`, looked for while it runs, for at most FIND_S."""
    job = os.environ.get("SLURM_JOB_ID", "")
    host = socket.gethostname()
    deadline = time.monotonic() + FIND_S
    while _is_srun(pid):
        shown = slurm(["scontrol", "show", "step", "-o", *([job] if job else [])])
        step = step_of(shown.stdout, host, pid) if shown is not None and shown.returncode == 0 else None
        if step is not None or time.monotonic() > deadline:
            return step
        time.sleep(0.1)
    return None


# What scancel says of a job's node that runs none of the step's tasks (the rest got the signal).
ELSEWHERE = "Invalid job id specified"


def sent_anyway(stderr: str) -> bool:
    """Whether a failed ``scancel --signal`` of a step said only that some of the job's
    nodes run none of its tasks (they were signalled on the others)."""
    errors = [line for line in stderr.splitlines() if line.strip()]
    return bool(errors) and all(ELSEWHERE in line for line in errors)


def exists(step: str) -> bool:
    """Whether Slurm still has the step ``step`` (JOB.STEP)."""
    shown = slurm(["scontrol", "show", "step", "-o", step])
    return shown is not None and shown.returncode == 0 and f"StepId={step}" in shown.stdout.split()


def main(argv: list[str]) -> int:
    """``PID LOG``: SIGTERM to the tasks of srun PID's step, what went wrong said in LOG."""
    pid, log = int(argv[0]), argv[1]
    step = find(pid)
    if step is not None:
        done = slurm(["scancel", "--signal=TERM", step])
        if done is not None and (done.returncode == 0 or (sent_anyway(done.stderr) and exists(step))):
            return 0
        why = (done.stderr.strip() if done is not None else "") or "scancel failed"
    else:
        why = "its Slurm step was not found"
    if _is_srun(pid):
        note(log, f"fleet: cannot send SIGTERM to the ranks ({why}); srun ends them\n")
        _signal(pid, signal.SIGTERM)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
