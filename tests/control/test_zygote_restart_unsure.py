"""A step queued on a node (its window) that the zygote started just before it was
killed, its start unreported: it may have run, so it runs again as its next attempt,
and the events say the first may have (fleet.core.unsure, fleet.node.rezygote.unreaped).
Before 2026-12-07 the agent took it for unstarted (its predecessor's end had not come
either) and handed it to the new zygote: it ran twice as attempt 1, the first run
recorded nowhere (the crashfuzz audit's F4). Real fleets; the zygote is held after the
start by a test hook (FLEET_TEST_PROMOTED_HOLD) and killed by this test."""

from __future__ import annotations

import collections
import os
import signal
import sys

import pytest
from fleetharness import assert_nothing_left, finish, spawn, wait_for, write_suite
from test_zygote_restart import _down_after, of  # noqa: F401  (its fixture: a failed test leaves nothing up)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fleet's nodes need Linux")


def side_lines(path) -> list[tuple[str, str]]:
    """(step, FLEET_ATTEMPT) of each run of a step, as the steps wrote them."""
    if not path.exists():
        return []
    return [tuple(line.split()[:2]) for line in path.read_text().splitlines() if len(line.split()) >= 2]


def test_a_queued_step_started_just_before_its_zygote_was_killed_runs_again_as_attempt_2_and_the_events_say_it_may_have_run(
        tmp_path, monkeypatch):
    hold, side = tmp_path / "hold", tmp_path / "side.txt"
    hold.write_text("")
    monkeypatch.setenv("FLEET_TEST_PROMOTED_HOLD", str(hold))
    n = 2 * len(os.sched_getaffinity(0)) + 2  # more than one node's cores: some are queued behind others
    body = "".join(f'\n[[steps]]\nid = "s{i}"\ncores = 1\nretries = 1\n'
                   f'command = "echo $FLEET_STEP $FLEET_ATTEMPT $$ >> {side}; sleep 1"\n' for i in range(n))
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "s"\nrun_dir = "run"\n' + body)
    run_dir = tmp_path / "run"
    p = spawn("run", str(suite), "--nodes", "1", cwd=tmp_path)
    try:
        zygote = wait_for(lambda: of("node_joined", run_dir), 60, "the node to join")[0]["zygote_pid"]
        # A queued step ran (its line is written): the zygote started it and is held before reporting it.
        ran = wait_for(lambda: [s for s, _ in side_lines(side) if s in {e["step"] for e in of("queued", run_dir)}],
                       60, "a queued step to start")[0]
        assert not [e for e in of("started", run_dir) if e["step"] == ran], "its start was heard: the test proves nothing"
        os.kill(zygote, signal.SIGKILL)
        hold.unlink()  # (the new zygote is not held)
        rc, out, err = finish(p, 150)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(30)
    assert [e["node"] for e in of("zygote_restarted", run_dir)] == ["node1"]
    runs = side_lines(side)
    assert [a for s, a in runs if s == ran] == ["1", "2"], runs  # before: ["1", "1"]
    twice = [k for k, c in collections.Counter(runs).items() if c > 1]
    assert not twice, f"ran twice as one attempt: {twice}"
    back = [e for e in of("unqueued", run_dir) if e["step"] == ran]
    assert [(e["attempt"], e["may_have_started"]) for e in back] == [(1, True)], back
    assert "may have started" in back[0]["reason"] and "before it started" not in back[0]["reason"], back
    assert [(e["attempt"], e["outcome"]) for e in of("exit", run_dir) if e["step"] == ran] == [(2, "succeeded")]
    log = (run_dir / "steps" / ran / "log").read_text()
    assert f"step {ran} attempt 1 " in log and f"step {ran} attempt 2 " in log, log
    assert_nothing_left(run_dir)
