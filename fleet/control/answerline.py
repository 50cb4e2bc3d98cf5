"""Reading a helper process's answer line within a bound, whatever it leaves behind.

`fleet validate --imports` runs the suite's imports in a child (fleet.control.checks).
A module may leave a process at import (a child, or a daemon in a session of its own)
that holds the child's stdout and stderr open: Popen.communicate() waits for those
pipes' end of file, so such a module gave a false "took longer than 120 s" after 120 s,
and a daemon that outlived the bound hung validate until it exited (before 2026-12-07:
a second communicate() without a timeout). Here the answer is read until its line is
complete or the child has exited (then what the pipes hold is taken, not waited for),
within the bound; then the child, its process group and every process below it (the
importer is a subreaper: what it orphans stays below it) are killed.
"""

from __future__ import annotations

import os
import select
import selectors
import signal
import subprocess
import time

from fleet.node.orphans import below


def answer(p: subprocess.Popen, text: str, mark: str, timeout: float) -> tuple[str, str, bool]:
    """Write ``text`` to ``p``'s stdin (closed after), then read its stdout and stderr
    until a whole line starting with ``mark`` is in stdout, ``p`` has exited, or
    ``timeout`` s have passed; then end ``p`` and what it left (:func:`end`). Returns
    (stdout, stderr, timed out). ``p``: text pipes on all three, its own session."""
    try:
        p.stdin.write(text)
        p.stdin.close()
    except (BrokenPipeError, OSError):
        pass
    deadline = time.monotonic() + timeout
    out, err = bytearray(), bytearray()
    bufs = {p.stdout.fileno(): out, p.stderr.fileno(): err}
    sel = selectors.DefaultSelector()
    for fd in bufs:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    timed_out = False
    try:
        while sel.get_map():
            if _done(out, mark.encode()):
                break
            exited = p.poll() is not None
            left = deadline - time.monotonic()
            if left <= 0 and not exited:
                timed_out = True
                break
            for key, _ in sel.select(0 if exited else min(left, 0.5)):
                chunk = _read(key.fd)
                if chunk:
                    bufs[key.fd] += chunk
                elif chunk is not None:  # its end of file
                    sel.unregister(key.fd)
            if exited and not any(_readable(fd) for fd in list(sel.get_map())):
                break  # it has ended: what the pipes held is read; an heir's writes are not waited for
    finally:
        sel.close()
        end(p)
        for f in (p.stdout, p.stderr):
            f.close()
    return out.decode(errors="replace"), err.decode(errors="replace"), timed_out


def _done(out: bytearray, mark: bytes) -> bool:
    at = out.rfind(mark)
    return at >= 0 and (at == 0 or out[at - 1:at] == b"\n") and out.find(b"\n", at) >= 0


def _read(fd: int) -> bytes | None:
    try:
        return os.read(fd, 65536)
    except BlockingIOError:
        return None


def _readable(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return any(ev & select.POLLIN for _, ev in poller.poll(0))


def end(p: subprocess.Popen) -> None:
    """SIGKILL ``p``, every process below it and its process group (its session's
    leader: what stayed in it goes too); reap ``p``."""
    left = below(p.pid) if p.poll() is None else []
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass
    p.wait()
