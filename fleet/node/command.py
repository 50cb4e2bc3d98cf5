"""Starting a ``command`` step from the zygote without copying it.

A command is spawned with subprocess (vfork/posix_spawn: no copy of the zygote's
address space), in a session of its own, with the step's directory, environment and
log, and pinned to the step's cores before it runs an instruction of its own. Part of
the zygote's single-threaded loop: no threads here either.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Mapping

from fleet.node import child, diskfull, logcut, memlimit, oomscore, protocol, stepdirs, threads
from fleet.wire import ownfiles
from fleet.wire.messages import Launch


class NotStarted(Exception):
    """The command could not be started; the message says why. ``disk_full``: the errno
    with which its set-up found the file system full or read-only (fleet.node.diskfull)."""

    def __init__(self, message: str, disk_full: int | None = None):
        super().__init__(message)
        self.disk_full = disk_full


@dataclass(frozen=True)
class Spawned:
    """A running command: its Popen, when it was spawned, and the report a forked
    child would have written (``first_at``, ``work_start``, ``affinity``,
    ``placement_ok``)."""

    popen: subprocess.Popen
    at: float
    report: dict


def argv_of(msg: Launch) -> list[str]:
    """The argv to run: a str through /bin/sh -c, a list as it is (empty: nothing)."""
    if isinstance(msg.command, str):
        return ["/bin/sh", "-c", msg.command]
    return [str(a) for a in (msg.command or ())]


def _open_log(msg: Launch, foreground: bool) -> tuple[int, logcut.Mark | None]:
    """The fd the command writes to: its log, opened by the attempt's header line; or,
    in the foreground (`fleet step`), a duplicate of our stderr, the terminal. The log
    before the step's other directories: what goes wrong making those is said in it.
    With it, the log as the header left it (fleet.node.logcut; None in the foreground)."""
    try:
        if foreground:
            log = os.dup(2)
        else:
            stepdirs.make_log_dir(msg)
            log = stepdirs.open_log(msg.log)  # (one it cannot open: said so, and no log pointed to)
    except OSError as exc:
        raise NotStarted(_said(exc), diskfull.errno_of(exc)) from None
    mark = None if foreground else logcut.write_header(log, child.log_header(msg, time.time()))
    try:
        stepdirs.make_dirs(msg)
    except OSError as exc:
        if not foreground:  # (in the foreground the caller says it, once)
            try:
                os.write(log, f"fleet: {_said(exc)}\n".encode(errors="backslashreplace"))
            except OSError:
                pass
        os.close(log)
        raise NotStarted(_said(exc), diskfull.errno_of(exc)) from None
    note = protocol.take_note()  # (a restart that moved nothing aside says so, after the header)
    if note and not foreground:
        try:
            os.write(log, note.encode(errors="backslashreplace"))
        except OSError:
            pass
    return log, mark


def _said(exc: OSError) -> str:
    """An error of the step's set-up as its Exited says it: a SetupFailed's own words."""
    return str(exc) if isinstance(exc, stepdirs.SetupFailed) else f"{type(exc).__name__}: {exc}"


def spawn(msg: Launch, restore_env: Mapping[str, str | None] | None = None,
          foreground: bool = False) -> Spawned:
    """Start the command of ``msg``; NotStarted if it cannot be.

    ``restore_env`` are variables put back for the step before its own; its
    thread-pool variables are then set to its thread count, as for a call step.
    The log gets the attempt's header line first, and stays open (fleet.node.logcut.keep)
    until the caller's :func:`fleet.node.logcut.reaped` of its pid. ``foreground`` (`fleet step`): the
    command keeps our stdin, stdout, stderr and process group (the terminal's), and
    nothing is written to its log.
    """
    argv = argv_of(msg)
    if not argv:
        raise NotStarted("command step without a command")
    argv = memlimit.joining(msg, argv)  # into its memory cgroup before the command runs
    log, mark = _open_log(msg, foreground)
    restore = {**(restore_env or {}), **threads.thread_env(threads.step_threads(msg))}
    env = child.step_environment(os.environ, restore, msg.env, msg.gpus, msg.gpu_vars, msg.workdir)
    own = os.sched_getaffinity(0)
    popen = None
    try:
        if msg.cores:
            # The spawned process inherits our affinity, so it is pinned before
            # it runs a single instruction of its own; we are one thread, so
            # nothing else of ours runs on the borrowed mask meanwhile.
            try:
                os.sched_setaffinity(0, msg.cores)
            except OSError:
                pass  # no given core exists here: reported as a mismatch
            mismatch = child.placement_mismatch(msg.cores, os.sched_getaffinity(0))
            if mismatch:
                os.write(log, (mismatch + "\n").encode())
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            popen = subprocess.Popen(
                argv, cwd=msg.workdir, env=env, stdin=None if foreground else subprocess.DEVNULL,
                stdout=None if foreground else log, stderr=None if foreground else log,
                start_new_session=not foreground, close_fds=True)
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            if not foreground:  # (in the foreground the caller says it, once)
                os.write(log, f"fleet: cannot start {argv!r}: {exc}\n".encode())
            raise NotStarted(f"{type(exc).__name__}: {exc}") from None
        at, at_mono = time.time(), time.monotonic()  # (the monotonic one times its work: exits.worked)
        logcut.keep(popen.pid, mark)  # (its log, open until the zygote reaps it: logcut.reaped)
        oomscore.raise_for(popen.pid)  # a step, not fleet, is the OOM killer's first choice
    finally:
        if msg.cores:
            os.sched_setaffinity(0, own)
        if mark is None or popen is None:  # (else kept until it is reaped: fleet.node.logcut)
            os.close(log)
    try:
        affinity = sorted(os.sched_getaffinity(popen.pid))
    except OSError:  # already gone: it had what we had when it was spawned
        affinity = sorted(msg.cores) if msg.cores else sorted(own)
    ok = child.placement_mismatch(msg.cores, affinity) is None
    return Spawned(popen, at, {"first_at": at, "work_start": at, "work_mono": at_mono, "affinity": affinity,
                               "placement_ok": ok})
