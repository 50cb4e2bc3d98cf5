"""The agent's watcher: what ends a node's steps when the agent and its zygote cannot.

The zygote stops every step when its agent goes, and the agent every step of a zygote
that died; but a SIGKILL of the agent's process group (`kill -9 -- -PGID`, a batch
system's kill of the task whose tracking misses the steps) ends the two at once, and
each step runs in a session and process group of its own:
nothing was left to stop it. A command step ran on whole, a call step's child died
(its death signal) but what it started went on, and the coordinator, hearing no more
heartbeats, retried the step elsewhere: it ran twice.

So each agent starts one watcher (:func:`start`): this file run as a script by its path
(:func:`command`: the standard library only, no `fleet` package, no site-packages; some
10 MiB of RSS, mostly the interpreter's own, started in ~10 ms), in a session of its
own, which a signal to the agent's group does not reach. It holds the read end of a
pipe whose write end only the agent holds (not inherited: close-on-exec, and not passed
to the zygote). At end of file (the agent died, however, or exited) it ends every
process of the agent's steps and exits:

- every process whose environment carries the agent's token (``FLEET_AGENT_TOKEN``,
  in the zygote's environment from its start, so that every step and whatever a step
  starts inherits it: nothing is done per step), and the process groups they lead;
  found by one pass over /proc/PID/environ, at that moment only. Another agent's steps
  on the same host (a local fleet's pretend nodes, another fleet) carry another token;
- whatever is in the steps' memory cgroups, where the node has them (those cgroups
  are removed then too).

SIGTERM (and SIGCONT) first, SIGKILL after ``grace`` (the zygote's own grace for a lost
agent, at most a quarter of the heartbeat timeout: done well before the coordinator can
count the node lost and start the steps elsewhere), again for what they started
meanwhile, within a bound.

A frozen node: an agent stopped (SIGSTOP, a debugger) is looked at every ``fence / 5``
seconds (at least 0.05, at most 1); once it has been seen stopped for ``fence`` (half
the heartbeat timeout) while its zygote is stopped too or gone (a running zygote fences
its steps itself then), its steps are killed at once, as the zygote's fencing does; the
agent and zygote are left as they are (woken, the coordinator tells them to stop).
A watcher that was itself stopped does not count that time.

Not found: a process that scrubbed its environment of the token (``env -i``, or an
exec with an environment of its own, or one that wrote over its environment block as
setproctitle does) and left its step's process group, with no memory cgroup to hold it;
a process of another user.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

TOKEN_VAR = "FLEET_AGENT_TOKEN"
KILL_WAIT_S = 3.0  # after the grace, for what is SIGKILLed (and what it started) to go
STOPPED = frozenset("Tt")  # /proc states: stopped by a signal, by a debugger


def new_token() -> str:
    """A token no other agent has: 32 random hex digits."""
    return os.urandom(16).hex()


def with_token(env, token: str) -> dict:
    """``env`` with ``token`` added to TOKEN_VAR (a fleet run inside a step keeps the
    outer agent's token too: that agent's watcher ends the inner fleet's steps as well)."""
    old = env.get(TOKEN_VAR, "")
    return {**env, TOKEN_VAR: f"{old}:{token}" if old else token}


def command(fd: int, agent: int, zygote: int, token: str, grace: float, fence: float, cgroups: str = "") -> list[str]:
    """The watcher's command line: this file, by its path, in this Python without its
    site (no site-packages, no `fleet` package: it needs neither) nor, from 3.11, the
    script's directory on sys.path (on 3.10 that is fleet/node, whose modules shadow
    none of the few it imports). PYTHONHOME and the like are kept: a site may need them."""
    from fleet.wire import interpreter
    return [sys.executable, "-S", *interpreter.SAFE, os.path.abspath(__file__), str(fd), str(agent), str(zygote),
            token, f"{grace:g}", f"{fence:g}", cgroups]


def start(zygote_pid: int, token: str, grace: float, fence: float, cgroups: str = ""):
    """(In the agent) Start the watcher of this agent; (its Popen, the pipe's write end,
    which the agent keeps open until it exits and must pass to nothing)."""
    import subprocess
    r, w = os.pipe()  # (both close-on-exec: only r is passed on)
    env = {k: v for k, v in os.environ.items() if k != TOKEN_VAR}  # (not one of the steps)
    argv = command(r, os.getpid(), zygote_pid, token, grace, fence, cgroups)
    try:
        proc = subprocess.Popen(argv, pass_fds=(r,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env,
                                start_new_session=True)  # (its stderr: the agent's log)
    finally:
        os.close(r)
    return proc, w


# --- the watcher's side --------------------------------------------------------------------

def _stat(pid: int) -> tuple[str, int] | None:
    """(state, process group) of a process; None if there is none (or not readable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split(None, 4)  # state ppid pgrp ...
    return (fields[0].decode(), int(fields[2])) if len(fields) > 3 else None


def carriers(token: bytes, but_group: int = 0) -> dict[int, int]:
    """pid -> process group of every live process whose environment carries ``token``
    (but those in process group ``but_group``), from one pass over /proc."""
    me, out = os.getpid(), {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if token not in f.read():  # (a zombie's reads empty)
                    continue
        except OSError:  # gone meanwhile, or another user's
            continue
        st = _stat(int(name))
        if st is not None and st[0] not in "ZX" and st[1] != but_group:
            out[int(name)] = st[1]
    return out


def cgroup_members(root: str) -> dict[int, int]:
    """pid -> process group of what is in the steps' cgroups under ``root``."""
    out = {}
    try:
        names = os.listdir(root) if root else []
    except OSError:
        return out
    for name in names:
        try:
            with open(os.path.join(root, name, "cgroup.procs")) as f:
                pids = [int(p) for p in f.read().split()]
        except (OSError, ValueError):
            continue
        for pid in pids:
            st = _stat(pid)
            if st is not None and st[0] not in "ZX":
                out[pid] = st[1]
    return out


def _signal(found: dict[int, int], sig: int) -> None:
    for pid, pgid in found.items():
        try:
            if pgid == pid:  # a step's group (or one a step made): what else is in it goes too
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        except OSError:
            pass


def _alive(found: dict[int, int]) -> dict[int, int]:
    return {pid: g for pid, g in found.items() if (st := _stat(pid)) is not None and st[0] not in "ZX"}


def end(token: bytes, grace: float, cgroups: str = "", but_group: int = 0) -> int:
    """End the agent's steps (see the module doc): SIGTERM, up to ``grace`` s, then
    SIGKILL, again for what they started meanwhile, within a bound. How many processes."""
    def find() -> dict[int, int]:
        return {**carriers(token, but_group), **cgroup_members(cgroups)}
    found = find()
    ended = set(found)
    if found and grace > 0:
        _signal(found, signal.SIGTERM)
        _signal(found, signal.SIGCONT)
        deadline = time.monotonic() + grace
        while found and time.monotonic() < deadline:
            time.sleep(0.01)
            found = _alive(found)
        found = {**_alive(found), **find()}
    stop_at = time.monotonic() + KILL_WAIT_S
    while found and time.monotonic() < stop_at:
        ended |= set(found)
        _signal(found, signal.SIGKILL)
        time.sleep(0.01)
        found = {**_alive(found), **find()}
    return len(ended)


def _remove_cgroups(root: str) -> None:
    """The steps' cgroups and their parent, once emptied (bounded: best effort)."""
    deadline = time.monotonic() + 1.0
    while root and time.monotonic() < deadline:
        try:
            names = os.listdir(root)
        except OSError:
            return
        for name in names:
            try:
                os.rmdir(os.path.join(root, name))
            except OSError:
                pass
        try:
            os.rmdir(root)
            return
        except OSError:
            time.sleep(0.02)


def stopped(pid: int) -> bool:
    """A process stopped (by a signal or a debugger), or gone."""
    st = _stat(pid)
    return st is None or st[0] in STOPPED or st[0] in "ZX"


def watch(fd: int, agent: int, zygote: int, fence: float, on_frozen) -> None:
    """Until end of file on ``fd``: every fence / 5 s, ``on_frozen()`` once the agent has
    been seen stopped for ``fence`` s with its zygote stopped or gone (once a freeze)."""
    period = min(1.0, max(0.05, fence / 5)) if fence > 0 else None  # (0: no freeze watched)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    frozen_for, last, fenced = 0.0, None, False
    while True:
        if poller.poll(-1 if period is None else int(period * 1000)):
            try:
                if not os.read(fd, 512):
                    return
            except OSError:
                return
            continue
        now = time.monotonic()
        if stopped(agent) and stopped(zygote):
            if last is not None:  # (a longer gap: this watcher was stopped too, it counts not)
                frozen_for += min(now - last, 2 * period)
            last = now
            if frozen_for >= fence and not fenced:
                fenced = True
                on_frozen()
        else:
            frozen_for, last, fenced = 0.0, None, False


def _say(agent: int, text: str) -> None:
    fleet = os.environ.get("FLEET_ID", "")  # (fleet.wire.logtag's tag: this file imports no fleet module)
    print(f"{f'[{fleet}] ' if fleet else ''}fleet watcher of agent {agent}: {text}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    fd, agent, zygote = int(argv[0]), int(argv[1]), int(argv[2])
    token, grace, fence, cgroups = argv[3].encode(), float(argv[4]), float(argv[5]), argv[6]
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):  # ends with its agent, not before
        signal.signal(sig, signal.SIG_IGN)
    try:
        agent_group = os.getpgid(agent)
    except OSError:
        agent_group = 0

    def frozen() -> None:  # the agent's own group (it, its zygote) is left as it is
        n = end(token, 0.0, cgroups, but_group=agent_group)
        if n:
            _say(agent, f"agent and zygote stopped for {fence:g} s: killed {n} process(es) of its steps")

    watch(fd, agent, zygote, fence, frozen)
    n = end(token, grace, cgroups)
    _remove_cgroups(cgroups)
    if n:
        _say(agent, f"the agent is gone: ended {n} process(es) of its steps")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
