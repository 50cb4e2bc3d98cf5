"""Processes found by a tag in their environment: a test that kills part of a fleet with
SIGKILL finds what was left of it, whatever its process group (an orphan re-parented to
the test, a subreaper: tests/conftest.py), and kills it at the end."""

from __future__ import annotations

import os

import psutil


def reap(pid: int) -> None:
    """Reap `pid` if it is a zombie child of this process (an orphan it adopted)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def tagged(var: str, tag: str, ours: tuple[str, ...] = ()) -> dict[int, str]:
    """pid -> command line of every live process whose environment has `var`=`tag` (and
    whose command line names one of `ours`, if given); zombies this process can reap, reaped."""
    out = {}
    for p in psutil.process_iter(["cmdline"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            if p.pid == os.getpid() or (ours and not any(o in cmd for o in ours)) or p.environ().get(var) != tag:
                continue
            reap(p.pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                out[p.pid] = cmd[:160]
        except psutil.Error:
            continue
    return out


def kill_tagged(var: str, tag: str) -> None:
    """SIGKILL every process carrying the tag, wait for them, reap those adopted."""
    left = []
    for pid in tagged(var, tag):
        try:
            left.append(psutil.Process(pid))
            left[-1].kill()
        except psutil.Error:
            pass
    psutil.wait_procs(left, timeout=10)
    for proc in left:
        reap(proc.pid)
