"""The zygote's forking helper: forks the spare children so the zygote need not.

Why: after a fork, every page the parent and a living child share is copied on the
first write by either. The zygote runs Python between two forks (framing, reaping,
reports), and CPython writes a page for every object it merely references
(reference counts), so a zygote that forks its steps itself takes ~300 copy-on-write
faults per step (~1 ms here), against ~40 for a bare fork loop.

So the zygote forks this helper once (and again after a preload), and the helper
forks each spare child: between two forks it reads one byte, makes a pipe, forks,
and sends the child's pid and the pipe's write end back (SCM_RIGHTS), no more. Its
forks use clone(CLONE_PARENT): the child is the *zygote's* child, exactly as if the
zygote had forked it (the zygote reaps it with its rusage, signals its process
group, is the parent its death signal watches). The pages the zygote writes it then
copies once, from the helper, not once per step.

Linux on x86_64 and aarch64 only (the clone system call's number); elsewhere, or if
the helper dies, :class:`fleet.node.spare.Spare` forks in the zygote as before.
FLEET_ZYGOTE_FORKER=0 turns the helper off (to compare, or to rule it out).
Single-threaded like the zygote: no threads here either.
"""

from __future__ import annotations

import ctypes
import gc
import os
import platform
import signal
import socket
import struct
import sys
from typing import Callable

from fleet.node import child, oomscore

CLONE_PARENT = 0x00008000
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}.get(platform.machine())
_PID = 4  # bytes of a pid in the helper's answer
ANSWER_TIMEOUT = 10.0  # s: a fork takes a millisecond


def available() -> bool:
    """True if this system can run the helper (and it is not turned off)."""
    return (sys.platform.startswith("linux") and _SYS_CLONE is not None
            and os.environ.get("FLEET_ZYGOTE_FORKER", "1") != "0")


_syscall = None


def clone_parent() -> int:
    """fork(), except that the new process is a child of our parent, not of us.
    The interpreter's fork hooks run as os.fork runs them (PyOS_*Fork: import lock,
    os.register_at_fork callbacks such as random's reseeding, signal state)."""
    global _syscall
    if _syscall is None:
        # PyDLL: the GIL stays held across the call, as it is across os.fork's fork().
        # Arguments made once: each object made between two forks is a page copied.
        call = ctypes.PyDLL(None, use_errno=True).syscall
        call.restype = ctypes.c_long
        args = (ctypes.c_long(_SYS_CLONE), ctypes.c_ulong(CLONE_PARENT | signal.SIGCHLD),
                ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
        api = ctypes.pythonapi
        _syscall = (call, args, api.PyOS_BeforeFork, api.PyOS_AfterFork_Child, api.PyOS_AfterFork_Parent)
    call, args, before, after_child, after_parent = _syscall
    before()
    pid = call(*args)
    if pid == 0:
        after_child()
        return 0
    after_parent()
    if pid < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return pid


class Forker:
    """The zygote's end of the helper: start it, ask for a spare, collect the answer."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self._sock: socket.socket | None = None
        self.pending = False  # asked for a spare, answer not read yet
        self.failed = False  # no answer in time: stopped, not to be used again

    @property
    def fds(self) -> tuple[int, ...]:
        """Our descriptor another child of the zygote must close."""
        return () if self._sock is None else (self._sock.fileno(),)

    def start(self, close_fds: tuple[int, ...], spare: Callable[[int, int], None]) -> bool:
        """Fork the helper; True if it runs. ``close_fds``: the zygote's descriptors;
        ``spare(r, parent)`` is what each spare child runs (never returns)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        parent = os.getpid()
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError:
            ours.close()
            theirs.close()
            return False
        if pid == 0:
            try:
                ours.close()
                _helper(theirs, close_fds, parent, spare)
            finally:
                os._exit(0)
        theirs.close()
        ours.set_inheritable(False)
        # A stopped or stuck helper must not hang the zygote: the kernel's timeouts, not
        # settimeout(), which would poll() before every send and receive (two calls a step).
        timeout = struct.pack("ll", int(ANSWER_TIMEOUT), 0)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeout)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeout)
        self.pid, self._sock = pid, ours
        return True

    def ask(self) -> bool:
        """Ask for a spare; False if the helper is gone."""
        try:
            self._sock.send(b"f")
        except OSError:
            return False
        self.pending = True
        return True

    def collect(self) -> tuple[int, int] | None:
        """The asked-for spare: (pid, write end of its pipe); None if the helper is gone."""
        self.pending = False
        try:
            data, fds, _, _ = socket.recv_fds(self._sock, _PID, 1)
        except OSError:  # a timeout too (EAGAIN): the zygote forks for itself from now on
            self.stop()
            self.failed = True
            return None
        if len(data) != _PID or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            return None
        return int.from_bytes(data, "little"), fds[0]

    def stop(self) -> None:
        """End the helper (end of file on its socket, then SIGKILL) and reap it."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        pid, self.pid, self.pending = self.pid, None, False
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass

    def gone(self) -> None:
        """The helper died (reaped by the zygote): forget it."""
        if self._sock is not None:
            self._sock.close()
        self._sock, self.pid, self.pending = None, None, False


def _helper(sock: socket.socket, close_fds: tuple[int, ...], parent: int,
            spare: Callable[[int, int], None]) -> None:
    """The helper's life: as little Python between two forks as can be."""
    signal.set_wakeup_fd(-1)
    for sig in child.DEFAULT_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    child.signals_clean = True  # so its forks need not do this again
    # Its forks are steps: the OOM killer's first choice (fleet.node.oomscore), inherited.
    child.oom_raised = oomscore.raise_for()
    for fd in close_fds:
        try:
            os.close(fd)
        except OSError:
            pass
    child.set_pdeathsig(signal.SIGKILL)
    if os.getppid() != parent:
        return
    # What the zygote made since its own gc.freeze() (its loop's state, childprep's streams)
    # out of the collector's reach too: a collection in a step would otherwise walk (and so
    # copy) the pages it lies on.
    gc.freeze()
    fd = sock.fileno()
    read, pipe, close, send_fds = os.read, os.pipe, os.close, socket.send_fds
    while read(fd, 1):
        r, w = pipe()
        pid = clone_parent()
        if pid == 0:
            close(w)
            close(fd)
            spare(r, parent)  # never returns
            os._exit(0)
        close(r)
        send_fds(sock, [pid.to_bytes(_PID, "little")], [w])
        close(w)
