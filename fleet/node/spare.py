"""The zygote's spare: the next call step's child, forked ahead of demand.

Between starts the zygote forks a child that waits on a pipe of its own for a
Launch; a start then costs a write instead of a fork. The child, once handed its
Launch, runs :func:`fleet.node.child.run_call` exactly as a child forked on demand
would. Part of the zygote's single-threaded loop: no threads here either.
"""

from __future__ import annotations

import fcntl
import marshal
import os
import pickle
import signal
import sys
import time
from typing import Mapping

from fleet.node import child, childprep, forker, session
from fleet.wire import framing, messages


REPORT_PIPE = 1 << 20  # bytes: a step's two small records need no wake-up of their own


def roomy(fd: int) -> bool:
    """Make the children's report pipe hold ~5,000 records (each step writes two of
    ~200 bytes: at its start and its end); True if it does. Then the zygote need not
    wake for each record, nor read them every loop turn: it reads them all when it
    reaps (a child writes its records before it exits), once per batch of exits. At
    most two a running step wait in the pipe, so a child never blocks writing one."""
    try:
        return fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), REPORT_PIPE) >= REPORT_PIPE
    except OSError:  # over /proc/sys/fs/pipe-max-size
        return False


def _pack(msg: messages.Launch) -> bytes:
    """A Launch for our own child: its fields marshalled (b"m"), or pickled (b"p") if a
    value is not marshallable. Rebuilding it from a dict of plain values costs the
    child ~20 page faults fewer than unpickling (no class lookup, no pickle machine);
    either costs ~35 fewer than decoding (and checking) the message again."""
    try:
        return b"m" + marshal.dumps(msg.__dict__)
    except ValueError:
        return b"p" + pickle.dumps(msg, pickle.HIGHEST_PROTOCOL)


def _unpack(data: bytes) -> messages.Launch:
    if data[:1] == b"m":
        msg = object.__new__(messages.Launch)
        object.__setattr__(msg, "__dict__", marshal.loads(data[1:]))
        return msg
    return pickle.loads(data[1:])


def _read_launch(fd: int) -> messages.Launch | None:
    """The Launch framed on ``fd`` (Spare.hand, :func:`_pack`); None at end of file."""
    data = os.read(fd, 1 << 16)  # the common case: the whole frame (one write) at once
    if len(data) > 4 and int.from_bytes(data[:4], "big") == len(data) - 4:
        return _unpack(data[4:])
    header = data[:4]
    if len(data) > 4:  # more than the header came: keep what followed it
        return _read_rest(fd, int.from_bytes(header, "big"), [data[4:]], len(data) - 4)
    while header and len(header) < 4:
        more = os.read(fd, 4 - len(header))
        if not more:
            return None
        header += more
    if not header:
        return None
    return _read_rest(fd, int.from_bytes(header, "big"), [], 0)


def _read_rest(fd: int, length: int, chunks: list, got: int) -> messages.Launch | None:
    while got < length:
        chunk = os.read(fd, length - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return _unpack(b"".join(chunks))


class Spare:
    """At most one waiting child: make it, hand it a Launch, or let it go. Forked by
    the zygote's helper (:mod:`fleet.node.forker`) where it can run, else here."""

    def __init__(self, report_fd: int, restore_env: Mapping[str, str | None]):
        self.report_fd = report_fd
        self.restore_env = restore_env
        self.pid: int | None = None
        self._w: int | None = None  # the write end of its pipe
        self.forker = forker.Forker() if forker.available() else None
        self._prepared = False  # childprep made for the spares to come

    @property
    def fds(self) -> tuple[int, ...]:
        """Our descriptors another child of the zygote must close (its pipe's write
        end, the helper's socket)."""
        return (() if self._w is None else (self._w,)) + (self.forker.fds if self.forker else ())

    def _run(self, r: int, parent: int, close_fds: tuple[int, ...]) -> None:
        """The spare child's life: wait for a Launch on ``r``, run it; never returns."""
        try:
            session.lead()  # while it waits: its group and session exist when it is handed a step
            msg = _read_launch(r)  # None at end of file: the zygote let us go
            first_at = time.time()
            if isinstance(msg, messages.Launch):
                child.run_call(msg, self.report_fd, first_at=first_at, close_fds=(*close_fds, r),
                               restore_env=self.restore_env, parent=parent)
        finally:
            os._exit(0)

    def make(self, close_fds: tuple[int, ...]) -> None:
        """Fork the spare, unless there is one; ``close_fds`` are the zygote's own
        descriptors, which the child closes."""
        if self.pid is not None:
            return
        if not self._prepared:
            childprep.prepare(self.restore_env)
            self._prepared = True
        if self.forker is not None:
            if self.forker.pending or self._ask(close_fds):
                return
            self.forker = None  # it cannot run here: fork ourselves from now on
        sys.stdout.flush()  # or the child would write our buffered bytes again
        sys.stderr.flush()
        r, w = os.pipe()
        parent = os.getpid()
        try:
            pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            return
        if pid == 0:
            os.close(w)
            self._run(r, parent, close_fds)
        os.close(r)
        self.pid, self._w = pid, w

    def _ask(self, close_fds: tuple[int, ...]) -> bool:
        """Ask the helper for a spare (starting it first if need be)."""
        f = self.forker
        if f.pid is None and not f.start(close_fds, lambda r, parent: self._run(r, parent, ())):
            return False
        return f.ask()

    def _collect(self) -> None:
        """Read the helper's answer: the spare it forked (if it still runs)."""
        got = self.forker.collect()
        if got is not None:
            self.pid, self._w = got
        elif self.forker.failed:
            self.forker = None

    def hand(self, msg: messages.Launch) -> int | None:
        """Give the spare a Launch; its pid, or None if there was no spare or it
        died waiting (then it is reaped in the loop and the caller forks)."""
        if self.forker is not None and self.forker.pending:
            self._collect()
        if self.pid is None:
            return None
        pid, w = self.pid, self._w
        self.pid = self._w = None
        try:
            framing.write_payload(w, _pack(msg))
            handed = True
        except OSError:
            handed = False
        os.close(w)
        return pid if handed else None

    def reaped(self, pid: int) -> None:
        """``pid`` was reaped: if it was the spare (it died waiting), forget it; if it
        was the helper, fork spares here from now on, once its last answer is read."""
        if self.forker is not None and self.forker.pending:
            # It may be the spare whose pid we were about to hear; or the helper, killed
            # with its group (a batch system's SIGTERM to every process of the agents'
            # step) after it forked and sent the spare asked for: that spare is ours to
            # drop. Before 2026-12-07 it was forgotten, and the zygote's stop named it
            # among the processes steps left running (fleet.node.orphans).
            self._collect()
        if self.forker is not None and pid == self.forker.pid:
            self.forker.gone()
            self.forker = None
        if self.pid is not None and pid == self.pid:
            os.close(self._w)
            self.pid = self._w = None

    def drop(self) -> None:
        """Let the spare go (end of file on its pipe) and reap it; stop the helper
        (after a preload the next one is forked with the new modules)."""
        if self.forker is not None and self.forker.pending:
            self._collect()
        if self.forker is not None:
            self.forker.stop()
        self._prepared = False  # (a preload may change what the children inherit)
        if self.pid is not None:
            pid, w = self.pid, self._w
            self.pid = self._w = None
            os.close(w)
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
