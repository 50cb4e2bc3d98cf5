"""Chains of queued launches in the zygote (fleet.node.queued, a window deeper than one):
a launch may wait behind a launch that is itself waiting, and starts when that one's
process is reaped in turn."""

from __future__ import annotations

import dataclasses
import sys
import time

import pytest

from fleet.wire.messages import Dropped, Exited, Kill, Started

from test_zygote import launch, zygote  # noqa: F401  (fixtures)
from test_zygote_window import gated

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote needs Linux")


def chain_of_three(z, tmp_path):
    """a running (until its gate is opened), b held behind a, c behind b; the gate."""
    gate, a = gated(tmp_path, "a")
    z.send(a)
    z.send(launch(tmp_path, "b", "steps:record", after="a"))
    z.send(launch(tmp_path, "c", "steps:record", after="b"))
    assert z.expect(Started).step == "a"
    return gate


def test_a_chain_of_queued_launches_starts_one_after_the_other_each_after_the_exit_before_it(zygote, tmp_path):
    z = zygote()
    gate = chain_of_three(z, tmp_path)
    gate.touch()
    order = [z.next() for _ in range(5)]
    assert [(type(m).__name__, m.step) for m in order] == [
        ("Exited", "a"), ("Started", "b"), ("Exited", "b"), ("Started", "c"), ("Exited", "c")]
    assert all(m.outcome == "succeeded" for m in order if isinstance(m, Exited))
    # Each process began after the one before it was reaped: never two on the slot at once.
    assert order[2].first_at >= order[0].ended_at and order[4].first_at >= order[2].ended_at


def test_a_launch_dropped_in_the_middle_of_a_chain_hands_its_follower_to_what_it_waited_for(zygote, tmp_path):
    z = zygote()
    gate = chain_of_three(z, tmp_path)
    z.send(Kill("b", 1, cancel=True))
    assert z.expect(Dropped) == Dropped("b", 1, "cancelled before it started")
    assert not (tmp_path / "steps" / "c" / "record.json").exists()  # c still waits, now for a
    gate.touch()
    order = [z.next() for _ in range(3)]
    assert [(type(m).__name__, m.step) for m in order] == [("Exited", "a"), ("Started", "c"), ("Exited", "c")]
    assert order[2].first_at >= order[0].ended_at
    assert not (tmp_path / "steps" / "b" / "record.json").exists()


def test_a_queued_launch_that_cannot_start_when_due_releases_the_one_behind_it(zygote, tmp_path):
    z = zygote()
    gate, a = gated(tmp_path, "a")
    z.send(a)
    z.send(launch(tmp_path, "b", kind="no-such-kind", after="a"))
    z.send(launch(tmp_path, "c", "steps:record", after="b"))
    assert z.expect(Started).step == "a"
    gate.touch()
    order = [z.next() for _ in range(4)]
    assert [(type(m).__name__, m.step) for m in order] == [
        ("Exited", "a"), ("Exited", "b"), ("Started", "c"), ("Exited", "c")]
    assert "unknown step kind" in order[1].error and order[3].outcome == "succeeded"


def test_a_steps_reports_with_a_hold_wait_while_launches_are_queued_and_go_with_the_next_report_that_may_not(
        zygote, tmp_path):
    z = zygote()
    gate, a = gated(tmp_path, "a")
    # (in one write: b must be queued when a's Started is made, whatever the machine's load)
    z.send_together(dataclasses.replace(a, hold=60.0), launch(tmp_path, "b", "steps:record", after="a", hold=60.0))
    with pytest.raises(TimeoutError):
        z.next(timeout=1.0)  # a's Started waits: b is queued behind a
    z.send(launch(tmp_path, "c", "steps:record"))  # no hold: its Started goes at the turn's end, a's before it
    assert [(type(m).__name__, m.step) for m in (z.next(), z.next())] == [("Started", "a"), ("Started", "c")]
    assert z.expect(Exited).step == "c"
    gate.touch()  # a ends and b starts: nothing is queued any more, so nothing waits
    order = [z.next() for _ in range(3)]
    assert [(type(m).__name__, m.step) for m in order] == [("Exited", "a"), ("Started", "b"), ("Exited", "b")]


def test_a_held_report_goes_once_its_hold_has_passed_though_launches_are_still_queued(zygote, tmp_path):
    z = zygote()
    gate, a = gated(tmp_path, "a")
    sent = time.monotonic()
    z.send_together(dataclasses.replace(a, hold=0.3), launch(tmp_path, "b", "steps:record", after="a"))
    assert z.expect(Started).step == "a"
    assert time.monotonic() - sent >= 0.3  # held its hold, no longer than the wait for it
    assert not (tmp_path / "steps" / "b" / "record.json").exists()  # b still queued: the hold passed
    gate.touch()
    assert z.exited("b").outcome == "succeeded"
