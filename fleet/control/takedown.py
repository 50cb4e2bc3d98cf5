"""Stopping the fleet of a connection file (`fleet down`, a Fleet's down(), a fleet that
did not come up): ask it, then insist, signalling only what is provably its coordinator.

A coordinator of this host is signalled only once its pid is found to be a coordinator
of that run directory (fleet.control.identity), and through a psutil.Process, which
refuses a pid used again since. Before 2026-12-06 a fleet.json left by a coordinator
killed with SIGKILL led `fleet down` to send SIGTERM and SIGKILL to whatever process
had its pid since, and to say the fleet was down. A coordinator of another host is only
asked (its pid means nothing here)."""

from __future__ import annotations

import signal
import socket
import sys
import time
from pathlib import Path

import psutil

from fleet.control import identity
from fleet.control.channel import Client, FleetError, stopped
from fleet.site import jobstate
from fleet.wire import connection
from fleet.wire import messages as P


def down(run_dir: Path, pid: int | None = None, timeout: float = 20.0,
         name: str = connection.NAME) -> bool:
    """Stop the fleet in run_dir whose connection file is `name` (else the coordinator
    pid, one this process started): ask, then insist. True if one was running. A
    coordinator of another host (a run directory on a shared file system, `fleet down`
    from a login node) is only asked: its pid means nothing here, so nothing here is
    signalled; FleetError if it does not stop."""
    run_dir = Path(run_dir).resolve()
    path = run_dir / name
    conn = _live_connection(path)
    answered, proc = False, None
    if conn is not None:
        answered, timeout = _ask_down(conn, timeout)
        if conn.host != socket.gethostname():
            return _gone_elsewhere(path, conn, answered, timeout)
        proc = identity.coordinator(conn.pid, conn.run_dir)
        if proc is None:
            if answered or identity.gone(conn.pid, conn.run_dir, conn.started):  # (it ended as it was asked)
                return True
            raise FleetError(f"the fleet of {path} did not answer, and its pid {conn.pid} is no coordinator of "
                             f"{conn.run_dir} by its command line: nothing was signalled. If no fleet is up there, "
                             f"remove that file")
    elif pid is not None:
        try:
            proc = psutil.Process(pid)
        except psutil.Error:
            return True
    if proc is None:
        return False
    _insist(proc, answered, timeout)
    return True


def _live_connection(path: Path) -> connection.Connection | None:
    """The connection file at path, or None: there is none, or it is stale (its coordinator
    of this host is gone, or its pid is another process's now: the file is removed)."""
    if not path.exists():
        return None
    try:
        conn = connection.read(path)
    except connection.ConnectionError_ as e:
        raise FleetError(str(e)) from None
    if conn.host == socket.gethostname() and identity.gone(conn.pid, conn.run_dir, conn.started):
        path.unlink(missing_ok=True)
        return None
    return conn


def _ask_down(conn: connection.Connection, timeout: float) -> tuple[bool, float]:
    """Ask the coordinator to stop: (whether it answered, how long to give it then)."""
    c = Client(conn)
    try:
        reply = c.ask(P.Down(), timeout=5.0)
        if isinstance(reply, P.Stopping):
            # Its steps may take their grace to stop, and its agents a little more
            # (fleet.control.coordinator's teardown): only then insist.
            timeout = max(timeout, 2 * (reply.grace + 12.0))
        return True, timeout
    except FleetError:
        return False, timeout
    finally:
        c.close()


def _insist(proc: psutil.Process, answered: bool, timeout: float) -> None:
    """Wait for the coordinator proc to end: SIGTERM once half of `timeout` passed (at
    once if it did not answer because it is stopped), SIGKILL at its end."""
    deadline = time.monotonic() + timeout
    sent_term = False
    while _running(proc):
        if not sent_term and (time.monotonic() > deadline - timeout / 2 or (not answered and stopped(proc.pid))):
            _signal(proc, signal.SIGTERM)
            _signal(proc, signal.SIGCONT)  # a stopped coordinator (SIGSTOP, Ctrl-Z) handles its SIGTERM then
            sent_term = True
        if time.monotonic() > deadline:
            _signal(proc, signal.SIGKILL)
            break
        time.sleep(0.02)


def _running(proc: psutil.Process) -> bool:
    """Not ended (a zombie child of ours, not yet waited for, has ended)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal(proc: psutil.Process, sig: int) -> None:
    try:
        proc.send_signal(sig)
    except psutil.Error:  # (gone, and so its pid may be another's: psutil sends nothing then)
        pass


def _gone_elsewhere(path: Path, conn: connection.Connection, answered: bool, timeout: float) -> bool:
    """Wait for a coordinator of another host that was asked to stop to remove its
    connection file (its teardown's last step). One that did not answer, of a Slurm job
    that has ended (fleet.site.jobstate), is gone: its file is removed. FleetError if it
    did not answer otherwise, or did not stop."""
    where = f"its coordinator runs on {conn.host} (pid {conn.pid})"
    if not answered and jobstate.ended_elsewhere(conn.host, conn.job, conn.cluster, outside=True):
        print(f"fleet: removed {path}: its fleet's coordinator (pid {conn.pid} on {conn.host}) ran in {conn.job}, "
              f"which has ended", file=sys.stderr)
        path.unlink(missing_ok=True)
        return True
    if not answered:
        raise FleetError(f"the fleet in {path.parent} did not answer: {where}, and only `fleet down` there can "
                         f"stop it for sure (ssh {conn.host} fleet down --run-dir {path.parent})")
    deadline = time.monotonic() + timeout
    while path.exists():
        if time.monotonic() > deadline:
            raise FleetError(f"the fleet in {path.parent} said it was stopping but is still up after {timeout:g} s: "
                             f"{where}; run `fleet down` there (ssh {conn.host} fleet down --run-dir {path.parent})")
        time.sleep(0.1)
    return True
