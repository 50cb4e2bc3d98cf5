"""How a step's end is reported: the zygote's children reaped (:func:`reap`), and the
Exited message it sends for a reaped child (or for a launch that never started),
from its wait status, its rusage and what the child recorded about itself. Part of
the zygote's single-threaded loop."""

from __future__ import annotations

import os
import resource
import signal
import time

from fleet.node import child, logcut, protocol, session
from fleet.node.stopping import ended_reason, given_grace, signal_name
from fleet.wire import messages as P
from fleet.wire import numtext

# os.wait4 imports `resource` at its first call, when a user's resource.py may be first on
# sys.path (the zygote puts the user's directory back: fleet.wire.interpreter): taken here.
_RUSAGE = resource.struct_rusage
REAPED = "reaped_mono"  # (in a step's report: when the zygote reaped it, on its monotonic clock)


def reap(zygote, block: bool = False) -> list:
    """Reap every exited child of ``zygote`` (with ``block``, wait until none of its steps
    is left); [(its step record, wait status, rusage, ended_at)] for those that were steps,
    and for those whose end was held until a helper reaped now ended their Slurm step.
    The spare and the preload probe hear of their own children here."""
    ended, steps = [], 0
    # Not blocking with no step left: what else is a child here (an orphan a step left,
    # adopted: fleet.node.orphans) may run for as long as the fleet.
    block = block and bool(zygote.steps)
    flags = os.WEXITED | os.WNOWAIT | (0 if block else os.WNOHANG)
    while True:
        try:
            # WNOWAIT leaves the child a zombie for a moment, so its pid cannot
            # be reused while we kill what it left behind in its group.
            info = os.waitid(os.P_ALL, 0, flags)
        except ChildProcessError:
            return ended
        if info is None or info.si_pid == 0:
            return ended
        step = zygote.steps.get(info.si_pid)
        zygote.spare.reaped(info.si_pid)  # a spare that died waiting: another is made
        zygote.preloads.reaped(info.si_pid, info.si_status if info.si_code == os.CLD_EXITED else -info.si_status)
        if step is not None:
            # What a step left in its group ends with it (what left the group: fleet.node.orphans).
            try:
                os.killpg(step.pgid, signal.SIGKILL)
            except OSError:
                pass
            # Stopped: its session's groups too (fleet.node.session). Those of a step the agent's
            # watchdog killed the agent kills, with the sessions it made (fleet.node.memwatch).
            if step.term_at is not None:
                session.signal_rest(step.pid, step.pgid, signal.SIGKILL)
        try:
            _, status, usage = os.wait4(info.si_pid, 0)
        except ChildProcessError:
            # Reaped meanwhile by its owner: the spare's forking helper, found dead by
            # spare.reaped above with a spare asked of it, is stopped and reaped there
            # (a batch system's signal to every process of the job: the zygote died of
            # this ChildProcessError, and its running steps ended failed with it).
            if step is None:
                continue
            raise
        logcut.reaped(info.si_pid)  # (a command's log: before its pid can be another's)
        if step is not None:  # (left in zygote.steps: its records are found by its pid)
            # Its work ends here, whenever its end is reported: a step whose srun died is
            # held until a helper ended its Slurm step (fleet.node.srunend), and that wait
            # (seconds, up to a minute) was counted as its work before 2026-12-07 (worked).
            step.report[REAPED] = time.monotonic()
            ended.append((step, status, usage, time.time()))
            steps += 1
        else:  # the helper that ended a dead srun's Slurm step: that step's end is due now
            held = zygote.srun_ends.reaped(info.si_pid)  # (fleet.node.srunend)
            if held is not None:
                ended.append(held)
        if block and steps == len(zygote.steps):  # every step reaped
            return ended


def exited(step, status: int, usage, ended_at: float) -> P.Exited:
    """The Exited of a reaped step (``step``: the zygote's record of it)."""
    if os.WIFSIGNALED(status):
        sig, rc, outcome = os.WTERMSIG(status), None, "terminated"
        protocol.count_submitted(step.launch, step.report)  # its children are taken in all the same
    else:
        sig, rc = None, os.WEXITSTATUS(status)
        outcome = protocol.outcome(step.launch, rc, step.report)  # or wait, next, restart, broken
    if step.popen is not None:
        # Tell Popen it is reaped, or it would wait on a pid that may be reused.
        step.popen.returncode = rc if rc is not None else -sig
    rep = step.report
    error = rep.get("error")
    if step.ending is not None:  # stopped by us: that is how it ended, whatever its status
        outcome = step.ending
        error = ended_reason(step.ending, step.launch.timeout, given_grace(step, step.launch.grace), step.killed,
                             step.why, sig, rc)
    elif outcome == "succeeded":
        # A step that "succeeded" without its outputs would hand its consumers
        # nothing: it failed, and they are blocked.
        error = child.unproduced(step.launch)
        if error:
            outcome = "failed"
            child.append_to_log(step.launch.log, f"fleet: {error}\n")
    if error is None and sig is not None:
        error = f"killed by {signal_name(sig)}"
    elif error is None and rc:
        error = f"exit status {rc}"
    first_at = rep.get("first_at") or step.spawned_at
    work_start = rep.get("work_start") or ended_at
    work_end = rep.get("work_end") or ended_at
    decided, ut, st = step.launch.decided_at, usage.ru_utime, usage.ru_stime
    work = worked(rep)
    return P.Exited(
        step=step.launch.step, attempt=step.launch.attempt, pid=step.pid,
        outcome=outcome, returncode=rc, signal=sig,
        decided_at=decided, first_at=first_at,
        work_start=work_start, work_end=work_end, ended_at=ended_at,
        utime=ut, stime=st, maxrss_kb=usage.ru_maxrss,
        affinity=tuple(rep.get("affinity") or ()),
        placement_ok=bool(rep.get("placement_ok", True)), error=error, control=rep.get("control") or {},
        disk_full=rep.get("full"), worked_s=work,
        # Spelled here, not on the coordinator's loop (fleet.wire.numtext).
        spelt=numtext.exit_numbers(decided, first_at, work_start, work_end, ended_at, ut, st, work))


def worked(rep: dict) -> float | None:
    """How long a reaped step worked, by this node's monotonic clock (P.Exited.worked_s):
    from its ``begin`` record to its ``end`` record, or to its reap (REAPED; else now) if
    it wrote none (killed; a command, whose work ends with its process); None if it never began its
    work. Its wall stamps (work_start, work_end) are for display: a wall clock stepped by
    NTP during the step made hours of work of seconds (before 2026-12-07), and the next
    allocation refused the step as too long for it."""
    w = rep.get("worked_s")
    if w is not None:
        return w
    start, end = rep.get("work_mono"), rep.get(REAPED)
    return None if start is None else max(0.0, (time.monotonic() if end is None else end) - start)


def not_started(msg: P.Launch, error: str, disk_full: int | None = None) -> P.Exited:
    """The Exited of a launch that could not start (pid 0); ``disk_full`` as in
    P.Exited."""
    now = time.time()
    return P.Exited(
        step=msg.step, attempt=msg.attempt, pid=0, outcome="failed",
        returncode=None, signal=None, decided_at=msg.decided_at, first_at=now,
        work_start=now, work_end=now, ended_at=now, utime=0.0, stime=0.0,
        maxrss_kb=0, affinity=(), placement_ok=True, error=error, disk_full=disk_full)

