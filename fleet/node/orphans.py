"""What a step leaves running outside its process group and its session: orphans.

A step may start a process that leaves its session (setsid; a call step's
``subprocess.Popen(..., start_new_session=True)``) and then end. No signal to the
step's group or session reaches that process (fleet.node.session), and without a
memory cgroup (fleet.node.memlimit) nothing else holds it: it outlived the fleet.

So the zygote, and the agent above it, are child subreapers (PR_SET_CHILD_SUBREAPER,
Linux 3.4): a process orphaned anywhere below them becomes their child, not init's.
The zygote reaps such a child when it exits, as any other (fleet.node.exits), and
ends those still running when it stops, after its steps; the agent does the same for
a zygote that died first. Which step left an orphan is not known by then (its parent
is gone), so an orphan is ended when the fleet stops, not when some step ends: a
running step's own helper, orphaned on purpose (a double fork), is not killed under it.
An agent killed together with its zygote leaves its steps to its watcher
(fleet.node.watcher).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
KILL_WAIT_S = 3.0  # after the grace, for SIGKILLed orphans to go (all rounds together)


def become_subreaper() -> bool:
    """Adopt what is orphaned below this process (Linux); False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def children() -> list[int]:
    """This process's children, zombies included: /proc's children list of each of its
    threads (a child is listed under the thread that forked it, an adopted one under
    the leader), else a pass over /proc where the kernel has no such list."""
    me = os.getpid()
    try:
        tids = os.listdir(f"/proc/{me}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{me}/task/{tid}/children") as f:
                out += [int(p) for p in f.read().split()]
        except FileNotFoundError:  # no CONFIG_PROC_CHILDREN
            return _by_parent(me)
        except OSError:
            continue
    return out


def below(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux's /proc children lists; [] where there are none)."""
    out, todo = [], [pid]
    while todo and len(out) < 10000:  # (a fork bomb: the rest goes with the fleet, fleet.node.orphans)
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def _by_parent(me: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split(None, 2)  # state ppid ...
        if len(fields) > 1 and int(fields[1]) == me:
            out.append(int(name))
    return out


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def _signal(pid: int, sig: int) -> None:
    # Its group too, when it leads one (a daemon's setsid made it leader of both): what it
    # started there goes with it rather than being adopted in turn.
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
            return
    except OSError:
        pass
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def _reap(pids: list[int]) -> list[int]:
    """Those of pids still running (the exited ones reaped)."""
    left = []
    for pid in pids:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        if done == 0:
            left.append(pid)
    return left


def end(grace: float, keep: frozenset = frozenset(), rounds: int = 8, log=None) -> list[str]:
    """End this process's children but those in ``keep``: SIGTERM (with their groups),
    up to ``grace`` s to go, then SIGKILL; each reaped. Again for what that orphaned in
    turn, at most ``rounds`` times. Returns "pid (name)" of each one ended, and says
    so through ``log`` (a function of one line) if there were any."""
    ended: list[str] = []
    # Bounded as a whole: a process stuck in the kernel (D state: a hung file system)
    # takes SIGKILL only when it comes back, and stopping must not wait for that.
    stop_at = time.monotonic() + grace + KILL_WAIT_S
    for _ in range(rounds):
        pids = [p for p in children() if p not in keep]
        pids = _reap(pids)  # (zombies: nothing to end)
        if not pids or time.monotonic() > stop_at:
            break
        ended += [f"{p} ({_name(p)})" for p in pids]
        for pid in pids:
            _signal(pid, signal.SIGTERM)
        deadline = min(time.monotonic() + grace, stop_at)
        while pids and time.monotonic() < deadline:
            time.sleep(0.01)
            pids = _reap(pids)
        for pid in pids:
            _signal(pid, signal.SIGKILL)
        while pids and time.monotonic() < stop_at:
            time.sleep(0.005)
            pids = _reap(pids)
    if ended and log is not None:
        log(f"ended {len(ended)} process(es) that steps left running outside their process groups: "
            f"{', '.join(ended[:10])}{' ...' if len(ended) > 10 else ''}")
    return ended
