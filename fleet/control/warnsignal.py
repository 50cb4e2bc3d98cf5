"""`fleet run` and the batch system's warning signal (SIGUSR1, `#SBATCH
--signal=B:USR1@300`): caught from the start, passed on to the coordinator once there is one.

SIGUSR1's default action ends a process. `fleet run` catches it from the start of its
command (catch), before it reads the suite and while its embedded fleet comes up: a
warning then is remembered, not fatal. Once the fleet is known (pass_to: the one `fleet
up` started, or the embedded one, up) a remembered warning goes on to its coordinator
at once, and every later one as it comes. The coordinator drains at once: the
submission that follows is answered with every step `not_started` (none starts), and
`fleet run` exits 3, as a job script that resubmits itself on 3 wants. (Until 2026-12-06
a warning while the embedded fleet came up killed `fleet run`: exit 138, no drain.) But
in a job shorter than its drain margin, where Slurm sends its warning at the start,
the coordinator drains at its drain point, as without the warning
(fleet.control.drain.early_warning; until 2026-12-06 at once, whatever the job's length). A
coordinator on another host is not signalled (its pid means nothing here): the job
script signals it itself (docs/operations.md).
"""

from __future__ import annotations

import os
import signal
import socket

_came = False  # a warning came before there was a coordinator to pass it to
_conn = None  # the fleet's connection (fleet.wire.connection), once known


def _handler(signum, frame) -> None:
    global _came
    if _conn is None:
        _came = True
    else:
        _send(_conn)


def _send(conn) -> None:
    if conn.host == socket.gethostname():
        try:
            os.kill(conn.pid, signal.SIGUSR1)
        except OSError:
            pass


def catch() -> None:
    """From now on SIGUSR1 is caught (remembered until pass_to). Idempotent."""
    signal.signal(signal.SIGUSR1, _handler)


def came() -> bool:
    """A warning came and was not passed on yet."""
    return _came


def pass_to(conn) -> None:
    """The fleet is `conn`'s: a warning that came already goes to its coordinator now,
    later ones as they come."""
    global _came, _conn
    catch()
    _conn = conn
    if _came:
        _came = False
        _send(conn)


def release() -> None:
    """The run is over: nothing is passed any more, nothing remembered (the caller
    puts SIGUSR1's handler back)."""
    global _came, _conn
    _came, _conn = False, None
