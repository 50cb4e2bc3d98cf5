"""A zygote restarted (fleet.node.rezygote) while a launch waits queued behind one of its
steps: the new zygote starts that launch at once, and its startup counts from when the
dead zygote's step was ended (its cores came free), not from when it was queued. Before
2026-12-07 it kept the coordinator's stamp from when it was queued, and `fleet report`
counted the whole run of the step it waited for as its startup. A real fleet, the zygote
found through the events and killed by this test."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest
from fleetharness import assert_nothing_left, wait_for, spawn, write_suite
from test_zygote_restart import _down_after, of  # noqa: F401  (its fixture: a failed test leaves nothing up)
from test_zygote_restart_queued import assert_each_started_once, run_until_done

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fleet's nodes need Linux")


def _queued_behind_a_running_step(run_dir):
    """(node, the step running there, the step queued behind it) while neither has ended
    nor the queued one started; else None."""
    started = {e["step"]: e["node"] for e in of("started", run_dir)}
    ended = {e["step"] for e in of("exit", run_dir)}
    for q in of("queued", run_dir):
        if started.get(q["after"]) == q["node"] and q["after"] not in ended and q["step"] not in started:
            return q["node"], q["after"], q["step"]
    return None


def test_a_step_queued_behind_a_step_of_a_killed_zygote_counts_its_startup_from_that_steps_end(tmp_path):
    body = "".join(f'\n[[steps]]\nid = "s{i}"\ncommand = "sleep 5"\ncores = 1\nretries = 1\n' for i in range(4))
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "s"\nrun_dir = "run"\n' + body)
    run_dir = tmp_path / "run"
    p = spawn("run", str(suite), "--nodes", "2", cwd=tmp_path)
    try:
        wait_for(lambda: len(of("node_joined", run_dir)) == 2, 60, "both nodes to join")
        node, running, queued = wait_for(lambda: _queued_behind_a_running_step(run_dir), 60,
                                         "a step queued behind one running on its node")
        zygote = [e for e in of("node_joined", run_dir) if e["node"] == node][0]["zygote_pid"]
        killed_at = time.time()  # (this host's clock: the node's, whose stamps the exit records carry)
        os.kill(zygote, signal.SIGKILL)
    except BaseException:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(30)
        raise
    rc, out, err = run_until_done(p)
    restarted = of("zygote_restarted", run_dir)
    assert [(e["node"], e["steps"]) for e in restarted] == [(node, [running])], \
        f"{running} was not running in the zygote killed: the test proves nothing ({restarted})"
    queued_at = [e["t"] for e in of("queued", run_dir) if e["step"] == queued][0]
    assert queued_at < killed_at
    [ended] = [e for e in of("exit", run_dir) if e["step"] == queued]
    assert (ended["node"], ended["attempt"], ended["outcome"]) == (node, 1, "succeeded"), ended
    # Decided (for its startup) once its cores came free, after the kill; before: when it was queued.
    assert ended["decided_at"] >= killed_at, (ended, queued_at, killed_at)
    assert ended["decided_at"] <= ended["work_start"], ended
    assert_each_started_once(run_dir)
    assert rc != 0, out + err  # (the step alone in the dead zygote failed, not retried)
    assert_nothing_left(run_dir)
