"""The agent's watcher (fleet.node.watcher), run for real as the agent runs it: what it
ends when its pipe closes (its agent gone), and when its agent and zygote are stopped;
what it leaves alone (another agent's steps, anything without its token)."""

from __future__ import annotations

import os
import random
import signal
import subprocess

import psutil
import pytest

from fleetharness import wait_for

from fleet.node import watcher


def run_watcher(agent: int, zygote: int, token: str, grace: float = 0.3, fence: float = 1.0):
    """The watcher of `agent` (and its `zygote`), and the write end of its pipe."""
    r, w = os.pipe()
    p = subprocess.Popen(watcher.command(r, agent, zygote, token, grace, fence), pass_fds=(r,),
                         start_new_session=True, stderr=subprocess.PIPE, text=True)
    os.close(r)
    return p, w


def spawn(command: str, token: str | None, **kw) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != watcher.TOKEN_VAR}
    if token is not None:
        env = watcher.with_token(env, token)
    return subprocess.Popen(["sh", "-c", command], env=env, **kw)


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def family(p: subprocess.Popen, n: int) -> list[int]:
    """p's pid and its descendants', once there are n in all."""
    def found():
        try:
            pids = [p.pid] + [c.pid for c in psutil.Process(p.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return None
        return pids if len(pids) >= n else None
    return wait_for(found, 10, f"{n} processes under {p.pid}")


def ignores(pid: int, sig: int) -> bool:
    with open(f"/proc/{pid}/status") as f:
        mask = next(line for line in f if line.startswith("SigIgn:")).split()[1]
    return bool(int(mask, 16) & (1 << (sig - 1)))


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        for pid in [p.pid] + [c.pid for c in (psutil.Process(p.pid).children(recursive=True)
                                                 if psutil.pid_exists(p.pid) else [])]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        p.wait(timeout=10)


def test_when_its_agent_is_gone_the_watcher_ends_every_process_with_its_token_and_their_groups_and_nothing_else(
        procs):
    token, other = watcher.new_token(), watcher.new_token()
    n = random.randrange(20000, 30000)
    # A step in a session of its own: its shell, a sleep, and one with an empty environment
    # (no token) in the step's group; another agent's step; a process with no token at all.
    step = spawn(f"env -i sleep {n} & sleep {n + 1}; :", token, start_new_session=True)
    theirs = spawn(f"sleep {n + 2}; :", other, start_new_session=True)
    plain = spawn(f"sleep {n + 3}; :", None, start_new_session=True)
    procs += [step, theirs, plain]
    mine = family(step, 3)
    others = family(theirs, 2) + family(plain, 2)
    w_proc, w = run_watcher(os.getpid(), 0, token)
    procs.append(w_proc)
    wait_for(lambda: ignores(w_proc.pid, signal.SIGTERM), 10, "the watcher to be under way")
    os.kill(w_proc.pid, signal.SIGTERM)  # it ends with its agent, not before
    with pytest.raises(subprocess.TimeoutExpired):
        w_proc.wait(timeout=0.5)
    os.close(w)  # as when the agent dies: the only write end closes
    assert w_proc.wait(timeout=30) == 0
    assert not [p for p in mine if running(p)], mine
    assert all(running(p) for p in others), others
    assert f"the agent is gone: ended {len(mine) - 1} process(es) of its steps" in w_proc.stderr.read()


def test_a_watcher_whose_agent_and_zygote_are_stopped_kills_their_steps_and_leaves_them_be(procs):
    token = watcher.new_token()
    n = random.randrange(30000, 40000)
    agent = spawn(f"sleep {n}; :", None, process_group=0)
    zygote = spawn(f"sleep {n + 1}; :", token, process_group=agent.pid)  # in the agent's group, as a zygote is
    step = spawn(f"sleep {n + 2}; :", token, start_new_session=True)
    procs += [agent, zygote, step]
    steps = family(step, 2)
    w_proc, w = run_watcher(agent.pid, zygote.pid, token, fence=0.5)
    procs.append(w_proc)
    os.killpg(agent.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: not [p for p in steps if running(p)], 20, "the stopped node's step to be killed")
        assert psutil.Process(agent.pid).status() == psutil.STATUS_STOPPED
        assert psutil.Process(zygote.pid).status() == psutil.STATUS_STOPPED
    finally:
        os.killpg(agent.pid, signal.SIGCONT)
    os.close(w)
    assert w_proc.wait(timeout=30) == 0
    assert zygote.wait(timeout=10) != 0  # it carries the token: gone with its agent
    assert running(agent.pid)  # no token: not one of the steps
    assert "stopped for 0.5 s: killed 2 process(es) of its steps" in w_proc.stderr.read()
