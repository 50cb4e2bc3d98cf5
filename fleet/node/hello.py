"""The zygote's first words to its agent: Hello, or why it will not serve.

Before its Hello, a zygote says each ``--preload`` module it is about to import
(Importing). A module that kills the interpreter while being imported -- a crash in a C
extension (SIGSEGV), a build for another CPU (SIGILL), an ``os._exit`` -- leaves no
Refused behind, only a closed pipe and an exit status: the agent then names the module
and how the zygote ended, as the zygote itself names one that raises.
"""

from __future__ import annotations

import signal
import subprocess

from fleet.wire import framing
from fleet.wire import messages as P


def zygote_end(zygote: subprocess.Popen, wait: float = 2.0) -> str:
    """How a zygote that closed its pipe ended: "was killed by SIGKILL", "exited with
    status 1" (a step may kill it: it is every step's parent, $PPID to a command)."""
    try:
        return ended(zygote.wait(timeout=wait))
    except subprocess.TimeoutExpired:
        return "closed its pipe"


def ended(returncode: int) -> str:
    """How a process with this return code ended: "was killed by SIGSEGV", "exited with status 3"."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def await_hello(zygote: subprocess.Popen, rep_r: int):
    """The zygote's Hello or Refused (or whatever else it sent first); a Refused made
    here if its pipe closed first, naming the preload module it was importing then."""
    importing = ""
    while True:
        try:
            msg = framing.read_message(rep_r)
        except (ValueError, EOFError) as e:  # it died mid-frame, or is not a zygote we can read
            return P.Refused(f"the zygote's first message was unreadable: {e}")
        if not isinstance(msg, P.Importing):
            break
        importing = msg.module
    if msg is not None:
        return msg
    # (A core dump can take a while to write: longer than a step's zygote is waited for.)
    end = zygote_end(zygote, wait=10.0)
    if importing:
        return P.Refused(f"module '{importing}' failed to import: the zygote importing it {end}", preload=True)
    return P.Refused(f"the zygote {end} before saying hello")
