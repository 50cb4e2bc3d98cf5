"""How an agent knows its zygote ended: not by its pipe alone.

The agent read its zygote's reports from a pipe and took the pipe's end of file for
the zygote's death (fleet.node.rezygote). Two ways that failed, before 2026-12-06:

- a process the zygote forked that outlives it holds the pipe's write end open (a
  preload module's daemon, forked at import; a step's child not yet past closing the
  zygote's descriptors: fleet.node.child). No end of file came: the agent never heard
  of the death, and its node took launches that nothing ran, until `fleet down`;
- a launch written to a zygote just killed failed (EPIPE) in the same loop turn, before
  the pipe's end of file was read: the agent stopped ("the zygote is gone") and its node
  left the fleet, rather than getting a new zygote.

So the zygote has ended when any of these says so: its pipe's end of file; a write to
it that failed; its pid, through a pidfd (Linux 5.3: readable once the process
exits) in the agent's poll, or, where there is none, a look once a heartbeat. What it
wrote before it ended is read then, without waiting for an end of file that may not
come; a write that failed leaves its launches to the rules of a zygote's death.
"""

from __future__ import annotations

import os
import subprocess
import time


class Watch:
    """One zygote's end, as its agent sees it (``proc``: the zygote)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.gone = False  # a write to it failed, or a look found it ended
        self.poller = None
        try:
            self.fd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):  # (not Linux, or before 5.3: a look each heartbeat)
            self.fd = -1

    def register(self, poller, pollin) -> Watch:
        """Watched in the agent's ``poller`` (a zmq.Poller) from now on; returns self."""
        if self.fd >= 0:
            self.poller = poller
            poller.register(self.fd, pollin)
        return self

    def ended(self, ready: dict) -> bool:
        """True if the zygote ended (``ready``: what the agent's poll found readable)."""
        return self.gone or (self.fd >= 0 and self.fd in ready)

    def look(self) -> None:
        """(Once a heartbeat) where no pidfd tells, whether the process ended."""
        if self.fd < 0 and self.proc is not None and self.proc.poll() is not None:
            self.gone = True

    def close(self) -> None:
        """Done with this zygote (it ended, or the agent stops)."""
        if self.poller is not None:
            self.poller.unregister(self.fd)
            self.poller = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def drain(fd: int) -> list[bytes]:
    """What the pipe ``fd`` holds now, without waiting: its writer ended, but a process
    it left may hold the pipe open (no end of file)."""
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            data = os.read(fd, 1 << 16)
        except OSError:  # (BlockingIOError: all of it read)
            return chunks
        if not data:
            return chunks
        chunks.append(data)


def read_out(fd: int, proc: subprocess.Popen, deadline: float, feed, flush=None) -> None:
    """``feed`` what the stopping zygote ``proc`` writes on ``fd`` until its end of file,
    or until it ended and all it wrote was read, or until ``deadline`` (time.monotonic());
    ``flush()``, each time: the agent's writes still waiting for its pipe (its Shutdown)."""
    os.set_blocking(fd, False)
    ended = False
    while time.monotonic() < deadline:
        if flush is not None:
            flush()
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            if ended:
                return
            ended = proc.poll() is not None  # (then one more read: what it wrote as it went)
            time.sleep(0.01)
            continue
        if not data:
            return
        feed(data)
