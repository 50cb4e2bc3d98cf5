"""A stopped step's session: what its command put in process groups of its own.

Every step runs in a session of its own (a command step: fleet.node.command's
start_new_session; a call step's child: :func:`lead`), so its session
id is its pid. Signalling the step's process group misses what the step moved to
another group of that session: coreutils `timeout` runs its command in a group of its
own, and so does every job of a shell with job control (`set -m`).
Those outlived `fleet down`, a cancel and a timeout. When a step is stopped, and when a
stopped step is reaped, the zygote (and the agent, for a zygote that died) signals
every group of the step's session too: found in /proc, one pass over it, which is why
it is done only for steps being stopped, not at every step's end (the kernel writes
each process's stat for the pass: its cost per process is measured in
benchmarks/README.md, "A stopped step's session").

Before 2026-12-06 a call step ran in the zygote's session (it only led a process
group), so a pass found nothing for it, and what it ran under `timeout` or `set -m`
outlived its stop. What leaves the session (setsid, a call step's subprocess with
start_new_session) is not reached here; a step with a memory cgroup has it killed through the cgroup when it ends
(fleet.node.memlimit.kill_members; docs/operations.md, "Nothing outlives the fleet").
"""

from __future__ import annotations

import os
import signal
import time


# One pass over /proc serves every signal sent within this long of it: a stop's SIGTERM
# and SIGCONT, and the stops, SIGKILLs and reaps of every step of a node shutting down,
# which come in bursts (a pass each would cost a big node seconds of its shutdown's
# grace: benchmarks/README.md). What a session gains in that moment waits for the next.
FRESH_S = 0.05
_seen: tuple[float, dict[int, set[int]]] = (float("-inf"), {})


def lead() -> None:
    """Make this process (a call step's child) the leader of a session and process
    group of its own, as a command step's is, so that what it moves to other groups of
    it goes with it when it is stopped. A spare does it while it waits, so its session
    exists before it is handed a step; the zygote does no setpgid of its own (a group
    leader cannot make a session)."""
    if os.getsid(0) == os.getpid():
        return
    try:
        os.setsid()
    except OSError:  # (a group leader already: its own group at least)
        try:
            os.setpgid(0, 0)
        except OSError:
            pass


def sessions() -> dict[int, set[int]]:
    """Every session's process groups, from one pass over /proc (Linux; {} elsewhere)."""
    found: dict[int, set[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        # pid (comm) state ppid pgrp session ...: comm may hold spaces and parentheses
        fields = stat[stat.rfind(b")") + 2:].split(None, 4)
        if len(fields) > 3:
            found.setdefault(int(fields[3]), set()).add(int(fields[2]))
    return found


def groups(sid: int, but: int) -> set[int]:
    """The process groups of session `sid` other than `but`, from a pass over /proc made
    less than FRESH_S ago (else a new one)."""
    global _seen
    now = time.monotonic()
    if now - _seen[0] > FRESH_S:
        _seen = (now, sessions())
    return _seen[1].get(sid, set()) - {but}


def signal_rest(sid: int, pgid: int, sig: int) -> int:
    """Send `sig` to every process group of session `sid` but `pgid` (the step's own,
    signalled by the caller); how many groups were signalled."""
    n = 0
    for g in groups(sid, pgid):
        try:
            os.killpg(g, sig)
            n += 1
        except OSError:  # (ended meanwhile)
            pass
    return n


def signal_each(leaders, sig: int) -> None:
    """signal_rest for each session led by one of `leaders` (its group: the leader's pid)."""
    for sid in leaders:
        signal_rest(sid, sid, sig)


def kill_all(leaders) -> None:
    """SIGKILL each step's process group (its leader's pid) and the other groups of its
    session (every step has one): what a zygote that died could not stop."""
    leaders = list(leaders)
    for pgid in leaders:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    signal_each(leaders, signal.SIGKILL)
