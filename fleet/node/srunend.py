"""An MPI step's srun killed by a signal while its Slurm step runs on: the step is
cancelled, and its end waited for, before the attempt's end is reported.

srun that dies by a signal (the OOM killer, an operator's ``kill -9``, the agent's RSS
watchdog, the zygote's SIGKILL of a launcher that did not end its step) cannot tell
Slurm to end its step, and Slurm does not: the ranks run on, on the cores the attempt
held. Before 2026-12-07 the zygote reported the attempt ended at once, and its retry (or
the next step) started on those cores beside the ranks, which ran until they ended by
themselves or the job did.

Now the zygote holds such a step's Exited (:class:`Held`) and starts a helper process
(``python -m fleet.node.srunend PID LOG``): it finds the step by srun's ``SrunHost:Pid``
(fleet.node.srunstop), has Slurm SIGKILL its tasks (``scancel --signal=KILL``: the
attempt is over, killed; its ranks are what is left of it), and waits until Slurm has no
such step, at most END_S. When the helper exits, the zygote sends the Exited: the cores
are free when the retry starts. The zygote never waits on Slurm itself.

srun that exits with a status waited for its step's tasks: nothing is asked of Slurm
then, so a step's ordinary end costs nothing more. Where scontrol or scancel is missing
or fails, or the step outlives END_S, the helper says so in the step's log and on its
stderr (the zygote's: the agent's log), and the Exited goes all the same: the ranks may
then run on beside what the cores are given to next.
"""

from __future__ import annotations

import os
import socket
import sys
import time

from fleet.node import srunstop
from fleet.node.stopping import signal_name
from fleet.wire import interpreter

END_S = 30.0  # how long the helper waits for Slurm to end the step


class Held:
    """The zygote's steps whose srun died by a signal, their Exited held until the helper
    that ends their Slurm step exits. ``warn``: the zygote's line in the agent's log."""

    def __init__(self, warn):
        self.warn = warn
        self._by_helper: dict[int, tuple] = {}  # helper pid -> (step, status, usage, ended_at)
        self._released: set[int] = set()  # ids of the records handed back: not held again

    def __len__(self) -> int:
        return len(self._by_helper)

    def hold(self, step, status: int, usage, ended_at: float) -> bool:
        """Whether the Exited of ``step`` (reaped with ``status``) waits for its Slurm step's
        end; if so, the helper is started here."""
        if id(step) in self._released:
            self._released.discard(id(step))
            return False
        if not (os.WIFSIGNALED(status) and srunstop.handles(step.launch)):
            return False
        sig = signal_name(os.WTERMSIG(status))
        argv = [*interpreter.module("fleet.node.srunend"), str(step.pid), step.launch.log, sig]
        try:  # (stderr: the zygote's; a session of its own, as srunstop's helper)
            pid = os.posix_spawn(argv[0], argv, os.environ, setsid=True,
                                 file_actions=[(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1)])
        except OSError as exc:
            said = f"srun ended by {sig}; cannot ask Slurm to end its step ({exc}): its ranks may still run"
            srunstop.note(step.launch.log, f"fleet: {said}\n")
            self.warn(f"step {step.launch.step} attempt {step.launch.attempt}: {said}")
            return False
        self._by_helper[pid] = (step, status, usage, ended_at)
        return True

    def reaped(self, pid: int) -> tuple | None:
        """The held (step, status, usage, ended_at) whose helper ``pid`` was, now due."""
        held = self._by_helper.pop(pid, None)
        if held is not None:
            self._released.add(id(held[0]))
        return held


def _find(pid: int) -> tuple[str | None, str]:
    """(the step id of our srun ``pid``, gone; why not, when Slurm could not be asked)."""
    job = os.environ.get("SLURM_JOB_ID", "")
    shown = srunstop.slurm(["scontrol", "show", "step", "-o", *([job] if job else [])])
    if shown is None or shown.returncode != 0:
        why = (shown.stderr.strip() if shown is not None else "") or "scontrol failed or is not there"
        return None, why
    return srunstop.step_of(shown.stdout, socket.gethostname(), pid), ""


def _say(log: str, text: str) -> None:
    srunstop.note(log, f"fleet: {text}\n")
    print(f"fleet srunend {os.getpid()}: {text} (log: {log})", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    """``PID LOG SIGNAL``: end the Slurm step of srun PID (killed by SIGNAL), wait for
    its end; what went wrong said in LOG and on stderr. 0: no step is left."""
    pid, log, sig = int(argv[0]), argv[1], argv[2]
    step, why = _find(pid)
    if step is None:
        if why:
            _say(log, f"srun ended by {sig}; cannot tell whether its Slurm step still runs ({why}): "
                      "its ranks may still run")
        return 1 if why else 0
    srunstop.note(log, f"fleet: srun ended by {sig} while its Slurm step {step} runs: cancelling that step\n")
    done = srunstop.slurm(["scancel", "--signal=KILL", step])
    if done is None or (done.returncode != 0 and not srunstop.sent_anyway(done.stderr)):
        why = (done.stderr.strip() if done is not None else "") or "scancel failed or is not there"
        if srunstop.exists(step):
            _say(log, f"cannot cancel Slurm step {step} ({why}): its ranks may still run")
            return 1
        return 0
    deadline = time.monotonic() + END_S
    while srunstop.exists(step):
        if time.monotonic() > deadline:
            _say(log, f"Slurm step {step} still there {END_S:g} s after its cancel: its ranks may still run")
            return 1
        time.sleep(0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
