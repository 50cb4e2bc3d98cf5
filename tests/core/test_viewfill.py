"""A step's view made without the frozen dataclass's __init__ (fleet.core.viewfill) is
the view its constructor makes: equal, the same fields in the same order."""

from __future__ import annotations

import dataclasses

from fleet.core import waits as W
from fleet.core.decisions import JobView, NodeJoined, Start, submission
from fleet.core.scheduler import Scheduler

from coretools import node, suite


def made(v: JobView) -> JobView:
    return JobView(*(getattr(v, f.name) for f in dataclasses.fields(JobView)))


def test_a_view_filled_directly_equals_the_one_its_constructor_makes_waiting_or_running():
    s = Scheduler()
    s.handle(NodeJoined(node("n1", 4)), 0.0)
    ds = s.handle(submission(suite({"id": "a", "cores": 4}, {"id": "b", "cores": 4}).steps), 1.0)
    assert [d.step for d in ds if isinstance(d, Start)] == ["a"]
    for step in ("a", "b"):
        v = s.view(step)
        assert v == made(v) and list(v.__dict__) == [f.name for f in dataclasses.fields(JobView)]
        assert hash(v.spec) == hash(made(v).spec)
    running, waiting = s.view("a"), s.view("b")
    assert running.state == "running" and running.placement[0].node == "n1" and running.attempt == 1
    assert waiting.why is not None and isinstance(waiting.why, W.WaitReason) and waiting.wait_reason == waiting.why.text()


def test_a_report_s_check_and_a_start_s_generation_read_what_the_view_says_without_one():
    s = Scheduler()
    s.handle(NodeJoined(node("n1", 4)), 0.0)
    s.handle(submission(suite({"id": "a", "cores": 4}, {"id": "b", "cores": 4}).steps), 1.0)
    v = s.view("a")
    assert s.placed("a") == (v.attempt, v.placement) and s.placed("a").placement[0].node == "n1"
    assert s.placed("b") is None and s.placed("no such step") is None  # waiting, unknown: not running
    assert [s.generation(x) for x in ("a", "b")] == [s.view("a").generation, s.view("b").generation] == [1, 1]
