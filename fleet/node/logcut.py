"""A step that truncated its own log, said in that log.

A step's fds 1 and 2 are its log file itself (no fleet process reads a step's output).
A step that opens /dev/stdout or /dev/stderr for writing without appending
(``echo error > /dev/stderr``, ``tee /dev/stderr``, ``open("/dev/stdout", "w")``) opens
that same file again through /proc/self/fd with O_TRUNC, and empties it: the attempt's
header, the step's earlier output and every earlier attempt are gone.

Nothing prevents that at no cost: O_APPEND on our descriptor does not bind another open
of the file; a pipe between the step and its log needs a reader a step; a read-only mode
would make the step's own write fail, and append-only files need privilege. So it is
noticed and said: the log's length just after the attempt's header is noted (from the
fstat that places the header on a line of its own, no call more), and when the step ends
one fstat finds the log shorter and appends a ``fleet:`` line saying what happened and
what to write instead (``>&2``). A command's log is kept open by the zygote until it
reaps the command (:func:`keep`, :func:`reaped`: no open or path lookup more); a call
step checks its own fd 2 at its end (fleet.node.child; not if it is killed). A log
emptied and then written past its noted length again is not noticed: one fstat cannot
tell.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from fleet.node import stepdirs

CUT = ("fleet: this step truncated its own log (it opened it again for writing, e.g. `> /dev/stderr`, "
       "`tee /dev/stderr` or open('/dev/stdout', 'w'), which empties the file): this attempt's header, "
       "its earlier output and earlier attempts' logs are lost; write to the log with `>&2` or `>>`\n")


@dataclass(frozen=True)
class Mark:
    """A step's log as its header left it: a descriptor open on it, the file (device
    and inode: by the step's end that number may be another file's) and its length."""

    fd: int
    dev: int
    ino: int
    size: int


def write_header(fd: int, header: bytes) -> Mark | None:
    """Write an attempt's ``header`` to the log open (O_APPEND) at ``fd``, on a line of
    its own; the Mark to check at the step's end, or None (not a regular file, a write
    that failed: nothing to check)."""
    prefix, st = stepdirs.line_start_stat(fd)
    try:
        written = os.write(fd, prefix + header)
    except OSError:
        return None  # a full disk: the step may still run; its own writes will say so
    if st is None or not stat.S_ISREG(st.st_mode):
        return None
    return Mark(fd, st.st_dev, st.st_ino, st.st_size + written)


def cut(mark: Mark | None) -> bool:
    """At the step's end: if its log is shorter than after its header, append the
    ``fleet:`` line saying the step truncated it; True if it did. One fstat."""
    if mark is None:
        return False
    try:
        st = os.fstat(mark.fd)
    except OSError:  # the step closed it
        return False
    if (st.st_dev, st.st_ino) != (mark.dev, mark.ino) or st.st_size >= mark.size:
        return False
    try:
        os.write(mark.fd, stepdirs.line_start(mark.fd) + CUT.encode())
    except OSError:
        pass
    return True


# The zygote's: the logs of the command steps running (by pid), kept open until each is
# reaped; their descriptors, which every child it forks closes (fleet.node.zygote.own_fds).
_kept: dict[int, Mark] = {}
fds: tuple[int, ...] = ()


def keep(pid: int, mark: Mark | None) -> None:
    """Hold ``mark`` (its descriptor open) until :func:`reaped` of ``pid``."""
    global fds
    if mark is not None:
        _kept[pid] = mark
        fds = fds + (mark.fd,)


def reaped(pid: int) -> None:
    """``pid`` was reaped (before another child can take its pid): check its log, if it
    was a command step's, and close it."""
    global fds
    mark = _kept.pop(pid, None)
    if mark is None:
        return
    fds = tuple(fd for fd in fds if fd != mark.fd)
    try:
        cut(mark)
    finally:
        os.close(mark.fd)
