"""What steps waited for once their fleet was going down (Ctrl-C, `fleet down`, a
signal): the fleet stopping, not the cores its stopped steps were giving back."""

from __future__ import annotations

import pytest

import fleet.report as R
from fleet.core import waits as W
from fleet.wire import events as E
from test_report import Stream


def interrupted_run() -> Stream:
    """Two cores, six steps: a and b run from 100; the rest wait for cores; the fleet is
    interrupted at 110 (a and b stopped) and down at 112."""
    s = Stream().fleet(90, [("n1", [0, 1], [], 100)])
    s.submit(100, [(x, [], 1, None) for x in "abcdef"])
    s.start(100, "a", "n1", [0]).start(100, "b", "n1", [1])
    s.wait(100, "c", W.WaitReason(W.CORES, cores=1, free_cores=0), behind=3)
    s.exit(110, "a", 0, 10, outcome="interrupted", reason="stopped with the fleet (it was going down)")
    s.exit(110.5, "b", 0, 10.5, outcome="interrupted", reason="stopped with the fleet (it was going down)")
    return s.down(112)


def test_steps_waiting_after_their_fleet_began_to_go_down_wait_for_it_not_for_cores():
    # Before 2026-12-06 the stretch from 110 to 112 was "1.9 core(s) idle; 4 step(s)
    # waiting for: cores 4 (queued behind c ...)": cores the fleet would never give them.
    r = R.build(interrupted_run().recs)
    assert r.waits[W.CORES] == {"steps": 4, "step_s": pytest.approx(40)}
    assert r.waits[W.STOPPING] == {"steps": 4, "step_s": pytest.approx(8)}
    [st] = r.stretches
    assert (st["from"], st["to"]) == (pytest.approx(10), pytest.approx(12))
    assert st["by_category"] == {W.STOPPING: 4}, st
    j = r.to_json()
    assert j["waits"]["stopping"]["steps"] == 4 and j["stretches"][0]["by_category"] == {"stopping": 4}
    text = R.format_text(r)
    assert "4 step(s) waiting for: its fleet, which was going down 4" in text, text
    assert "waiting for: cores" not in text, text


def test_a_fleet_down_alone_starts_the_stop_where_no_step_was_interrupted():
    s = Stream().fleet(90, [("n1", [0], [], 100)])
    s.submit(100, [("a", [], 1, None), ("b", [], 1, None)])
    s.start(100, "a", "n1", [0]).wait(100, "b", W.WaitReason(W.CORES, cores=1, free_cores=0))
    s.exit(105, "a", 0, 5).add(E.FleetDown(t=105))  # (b would have started: the fleet went down first)
    r = R.build(s.recs)
    assert r.steps["b"].segments == [(100, 105, W.CORES, "needs 1 core, 0 free")]
    assert W.STOPPING not in r.waits
