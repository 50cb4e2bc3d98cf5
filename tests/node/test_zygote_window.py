"""The zygote's queued launches (a node's window): a Launch with `after` waits for
that step's process to be reaped here, then starts at once; a cancel drops it unrun."""

from __future__ import annotations

import sys

import pytest

from fleet.wire.messages import Dropped, Exited, Kill, Shutdown, Started

from test_zygote import assert_nothing_left, launch, subreaper, zygote  # noqa: F401  (fixtures)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote needs Linux")


def gated(tmp_path, step):
    gate = tmp_path / f"gate-{step}"
    return gate, launch(tmp_path, step, "steps:wait_for_file", args={"path": str(gate)})


def test_a_queued_launch_starts_only_when_its_predecessor_is_reaped_and_reports_after_its_exit(zygote, tmp_path):
    z = zygote()
    gate, a = gated(tmp_path, "a")
    z.send(a)
    z.send(launch(tmp_path, "b", "steps:record", after="a"))
    assert z.expect(Started).step == "a"
    z.send(launch(tmp_path, "c", "steps:record"))  # a launch after it is served meanwhile
    assert z.expect(Started).step == "c" and z.exited("c").outcome == "succeeded"
    assert not (tmp_path / "steps" / "b" / "record.json").exists()  # a still runs: b cannot have
    gate.touch()
    order = [z.next() for _ in range(3)]
    assert [(type(m).__name__, m.step) for m in order] == [("Exited", "a"), ("Started", "b"), ("Exited", "b")]
    assert order[0].outcome == "succeeded" and order[2].outcome == "succeeded"
    assert order[2].first_at >= order[0].ended_at  # b's process began after a's was reaped


def test_a_launch_queued_behind_a_step_not_running_here_starts_at_once(zygote, tmp_path):
    z = zygote()
    z.send(launch(tmp_path, "b", "steps:record", after="never-launched"))
    assert z.expect(Started).step == "b"
    assert z.exited("b").outcome == "succeeded"


def test_cancelling_a_queued_launch_drops_it_and_it_never_runs(zygote, tmp_path):
    z = zygote()
    gate, a = gated(tmp_path, "a")
    z.send(a)
    z.send(launch(tmp_path, "b", "steps:record", after="a"))
    assert z.expect(Started).step == "a"
    z.send(Kill("b", 1, cancel=True))
    assert z.expect(Dropped) == Dropped("b", 1, "cancelled before it started")
    gate.touch()
    assert z.expect(Exited).step == "a"
    z.send(launch(tmp_path, "c", "steps:record"))
    assert z.expect(Started).step == "c"  # nothing of b came in between
    assert z.exited("c").outcome == "succeeded"
    assert not (tmp_path / "steps" / "b" / "record.json").exists()


def test_a_shutdown_drops_queued_launches_says_so_and_leaves_nothing_behind(zygote, tmp_path, subreaper):
    z = zygote()
    _, a = gated(tmp_path, "a")
    z.send(a)
    z.send(launch(tmp_path, "b", "steps:record", after="a"))
    started = z.expect(Started)
    z.send(Shutdown(grace=0.5))
    ended = z.exited("a")
    assert ended.outcome == "terminated" and ended.error.startswith("stopped with its node"), ended
    assert z.wait() == 0
    # Said, so the coordinator knows it never ran (a job ending under the fleet: fleet.node.jobend).
    assert [m for m in z.inbox if getattr(m, "step", "") == "b"] == [
        Dropped("b", 1, "its node stopped before it started", stopped=True)]
    assert not (tmp_path / "steps" / "b" / "record.json").exists()
    assert_nothing_left([started.pid], [started.pgid])


def test_a_withdrawal_drops_a_held_launch_and_leaves_one_already_started_running(zygote, tmp_path):
    z = zygote()
    gate, a = gated(tmp_path, "a")
    z.send(a)
    z.send(launch(tmp_path, "b", "steps:record", after="a"))
    assert z.expect(Started).step == "a"
    z.send(Kill("b", 1, withdraw=True))
    assert z.expect(Dropped) == Dropped("b", 1, "withdrawn before it started")
    gate2, c = gated(tmp_path, "c")
    z.send(c)
    assert z.expect(Started).step == "c"
    z.send(Kill("c", 1, withdraw=True))  # started already: it runs on, nothing is said
    z.send(launch(tmp_path, "d", "steps:record"))
    assert z.expect(Started).step == "d" and z.exited("d").outcome == "succeeded"
    gate.touch()
    gate2.touch()
    assert {z.exited("a").outcome, z.exited("c").outcome} == {"succeeded"}
    assert not [m for m in z.inbox if getattr(m, "step", "") == "b"]
    assert not (tmp_path / "steps" / "b" / "record.json").exists()
