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

from test_zygote import TIMEOUT, assert_nothing_left, launch, subreaper, zygote  # noqa: F401  (fixtures)

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
