"""The zygote's forking helper (fleet.node.forker): the spare children are forked by a
helper process, yet each is the zygote's own child; if the helper dies, the zygote
forks them itself."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import psutil
import pytest

from fleet.wire.messages import Shutdown, Started

from test_zygote import TIMEOUT, assert_nothing_left, launch, read_json_when_there, subreaper, zygote  # noqa: F401  (fixtures)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote needs Linux")


def _has_socket(pid: int) -> bool:
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
                   for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def live_children(pid: int) -> list[int]:
    out = []
    for c in psutil.Process(pid).children():
        try:
            if c.status() != psutil.STATUS_ZOMBIE:
                out.append(c.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def helper_of(pid: int) -> int:
    """The zygote's helper: its one child holding a socket (a spare holds only pipes)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        found = [c for c in live_children(pid) if _has_socket(c)]
        if len(found) == 1:  # (a spare holds the socket for a moment after its fork)
            return found[0]
        assert time.monotonic() < deadline, f"no helper among {live_children(pid)}"
        time.sleep(0.01)


_READ = {"x86_64": "0", "aarch64": "63"}.get(os.uname().machine)


def _reading(pid: int) -> bool:
    """``pid`` is blocked in read() (its system call in /proc)."""
    try:
        with open(f"/proc/{pid}/syscall") as f:
            return f.read().split(" ", 1)[0] == _READ
    except OSError:
        return False


def run_draws(z, tmp_path, names) -> list[dict]:
    out = []
    for name in names:
        z.send(launch(tmp_path, name, "steps:draw"))
        assert z.exited(name).outcome == "succeeded"
        out.append(json.loads((tmp_path / "steps" / name / "draw.json").read_text()))
    return out


def test_call_steps_are_forked_by_the_helper_yet_each_is_the_zygotes_child_with_its_own_random_state(
        zygote, tmp_path):
    z = zygote()
    helper = helper_of(z.proc.pid)
    draws = run_draws(z, tmp_path, ["a", "b", "c"])
    assert [d["ppid"] for d in draws] == [z.proc.pid] * 3
    assert len({d["draw"] for d in draws}) == 3  # the fork hooks ran (random reseeded)
    assert helper_of(z.proc.pid) == helper  # one helper, forked once
    assert [c.pid for c in psutil.Process(helper).children()] == []  # its forks are not its own


def test_when_the_helper_dies_the_zygote_forks_its_steps_itself_and_leaves_nothing_behind(
        zygote, tmp_path, subreaper):
    z = zygote()
    helper = helper_of(z.proc.pid)
    os.kill(helper, signal.SIGKILL)
    deadline = time.monotonic() + TIMEOUT
    while psutil.pid_exists(helper) and psutil.Process(helper).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    draws = run_draws(z, tmp_path, ["a", "b"])
    assert [d["ppid"] for d in draws] == [z.proc.pid] * 2
    assert not [c for c in live_children(z.proc.pid) if _has_socket(c)]  # no helper since
    started = [m for m in z.inbox if isinstance(m, Started)]
    z.send(Shutdown(1.0))
    assert z.wait() == 0
    assert_nothing_left([z.proc.pid, helper], [s.pgid for s in started])


def test_a_zygote_told_not_to_use_the_helper_forks_its_steps_itself(zygote, tmp_path):
    z = zygote(env={"FLEET_ZYGOTE_FORKER": "0"})
    draws = run_draws(z, tmp_path, ["a"])
    assert draws[0]["ppid"] == z.proc.pid
    assert not [c for c in live_children(z.proc.pid) if _has_socket(c)]


def test_a_helper_killed_with_a_spare_asked_of_it_and_unread_leaves_the_zygote_and_its_steps_running(
        zygote, tmp_path, subreaper):
    # A batch system's signal to every process of the job may kill the helper while the
    # zygote's ask for the next spare waits unread on its socket: the zygote's read of the
    # answer then fails (ECONNRESET), it stops the helper (reaping it), and its own reap of
    # the same pid must pass over it. Before ec3ac37 the zygote died of ChildProcessError.
    z = zygote()
    helper = helper_of(z.proc.pid)
    deadline = time.monotonic() + TIMEOUT
    # The first spare forked and its answer sent: the helper waits in read() for the next ask.
    while len([c for c in live_children(z.proc.pid) if c != helper]) != 1 or not _reading(helper):
        assert time.monotonic() < deadline, "no spare forked by the helper"
        time.sleep(0.01)
    os.kill(helper, signal.SIGSTOP)  # it answers no more asks
    try:
        z.send(launch(tmp_path, "a", "steps:ignore_sigterm"))  # takes the spare, then asks
        running = read_json_when_there(tmp_path / "steps" / "a" / "pids.json")
        # A request read in a later turn than a's launch: the ask (end of that turn) is made.
        z.send(launch(tmp_path, "probe", kind="no such kind"))
        assert "no such kind" in z.exited("probe").error
        os.kill(helper, signal.SIGKILL)
    finally:
        try:
            os.kill(helper, signal.SIGCONT)
        except ProcessLookupError:  # killed, and reaped by the zygote already
            pass
    while psutil.pid_exists(helper):  # reaped by the zygote's loop, not by the next launch
        assert time.monotonic() < deadline + TIMEOUT, "the helper was never reaped"
        time.sleep(0.01)
    draws = run_draws(z, tmp_path, ["b", "c"])
    assert [d["ppid"] for d in draws] == [z.proc.pid] * 2
    assert psutil.Process(running["pid"]).status() != psutil.STATUS_ZOMBIE  # a still runs
    assert not [c for c in live_children(z.proc.pid) if _has_socket(c)]  # no helper since
    started = [m for m in z.inbox if isinstance(m, Started)]
    z.send(Shutdown(0.5))
    assert z.wait() == 0
    assert_nothing_left([z.proc.pid, helper, running["pid"]], [s.pgid for s in started])
