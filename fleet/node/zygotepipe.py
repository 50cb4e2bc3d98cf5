"""The pipes between an agent and its zygote, and the agent's writes to it, which never block.

Both write to each other: the agent its batches of launches (fleet.wire.framing,
"Batches"), the zygote its reports (fleet.node.outbox), each in one write of the turn.
Until 2026-12-07 both writes blocked. When a turn handed a node more launches than the
pipe holds (64 KiB: 128 steps of 400-character ids, 256 of 250, 64 of 1,800), the zygote
read part of them, started and ended steps, and wrote more reports than the other pipe
holds: each then waited for the other for good, the agent stopped heartbeating, and
every step of the node ended lost (the limits audit's F3).

So the agent writes to its zygote without blocking (:class:`Requests`): what the pipe
does not take now waits, in order, and its loop watches the pipe for room (POLLOUT) while
something waits, reading the zygote's reports meanwhile. The zygote stays single-threaded
and simple: its blocking write of reports always ends, as the agent always reads.

Test hook: ``FLEET_TEST_PIPE_BYTES=N`` makes both pipes N bytes (F_SETPIPE_SZ; 4096, a
page, is the least), so that a test reaches the sizes of a big node with few steps.
"""

from __future__ import annotations

import fcntl
import os
import subprocess

from fleet.node import watcher
from fleet.wire import framing, interpreter

PIPE_BYTES_ENV = "FLEET_TEST_PIPE_BYTES"
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def start_zygote(preload: str, fence: float = 0.0, limits: str = "none",
                 token: str = "") -> tuple[subprocess.Popen, int, int]:
    """The zygote process and the agent's ends of its pipes (requests out, replies in);
    ``limits``: how it holds steps to their memory (fleet.node.memlimit.Choice.arg);
    ``token``: what marks the processes of this agent's steps (fleet.node.watcher)."""
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    _test_size(req_w, rep_w)
    proc = subprocess.Popen(
        [*interpreter.module("fleet.node.zygote"), "--fd-in", str(req_r), "--fd-out", str(rep_w),
         "--preload", preload, "--fence", str(fence), "--memlimit", limits, "--agent-pid", str(os.getpid())],
        pass_fds=(req_r, rep_w), stdin=subprocess.DEVNULL, env=watcher.with_token(os.environ, token) if token else None)
    os.close(req_r)
    os.close(rep_w)
    return proc, req_w, rep_r


def _test_size(*fds: int) -> None:
    """(Tests only: FLEET_TEST_PIPE_BYTES) Make the pipes of ``fds`` that small."""
    size = int(os.environ.get(PIPE_BYTES_ENV) or 0)
    for fd in fds if size else ():
        fcntl.fcntl(fd, _F_SETPIPE_SZ, size)


class Requests:
    """What the agent writes to its zygote's request pipe ``fd``: written at once as far
    as the pipe takes it, the rest kept, in order, for when it has room."""

    def __init__(self, fd: int, poller=None, pollout: int = 0):
        os.set_blocking(fd, False)
        self.fd = fd
        self.pending = bytearray()  # frames, or the rest of one, the pipe has not taken yet
        self.poller, self.pollout = poller, pollout  # (a zmq.Poller: the fd watched while pending)
        self.watched = False

    def renewed(self, fd: int, poller=None, pollout: int = 0) -> Requests:
        """For the pipe ``fd``, watched in ``poller`` for ``pollout`` (by default as this
        one): the agent's loop's, or a new zygote's (fleet.node.rezygote), for which what
        waited for the old one is dropped (a new one gets its launches again)."""
        if fd == self.fd and poller is not None:  # (the loop's: what waits now is kept)
            self.poller, self.pollout = poller, pollout
            self._watch(bool(self.pending))
            return self
        self.close()
        return Requests(fd, poller or self.poller, pollout or self.pollout)

    def write(self, payloads: list[bytes] | tuple[bytes, ...]) -> None:
        """Frame ``payloads`` after what waits and write what the pipe takes now;
        OSError (BrokenPipeError) if the zygote is gone."""
        self.pending += b"".join(framing.frame_payload(p) for p in payloads)
        self.flush()

    def flush(self) -> None:
        """Write what waits, as far as the pipe takes it now (its loop calls this when
        the pipe has room); OSError (BrokenPipeError) if the zygote is gone."""
        try:
            while self.pending:
                try:
                    n = os.write(self.fd, self.pending)
                except BlockingIOError:
                    break
                del self.pending[:n]
        except OSError:  # (its death's rules take its launches: fleet.node.zygotewatch)
            self.close()
            raise
        self._watch(bool(self.pending))

    def _watch(self, wanted: bool) -> None:
        if wanted is not self.watched and self.poller is not None:
            if wanted:
                self.poller.register(self.fd, self.pollout)
            else:
                self.poller.unregister(self.fd)
            self.watched = wanted

    def close(self) -> None:
        """Done with this pipe (its zygote ended, or the agent stops): no longer watched."""
        self._watch(False)
        self.pending.clear()
