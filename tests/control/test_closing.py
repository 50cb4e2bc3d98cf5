"""The drain's close (fleet.control.closing) counts every step that never ended, once,
a bounded part each loop turn: at a job end of 700,000 steps the whole walk in one turn
held the coordinator's loop ~0.9 s. Built from the real parts the close uses: a real
suite checked and entered through fleet.control.submissions, the real scheduler, a real
event stream on disk."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

from fleetharness import write_suite

from fleet.control import closing
from fleet.control.submissions import Submissions
from fleet.core import states as S
from fleet.core.deadline import DrainNow
from fleet.core.resources import NodeSpec
from fleet.core.scheduler import NodeJoined, Scheduler
from fleet.wire import events as E
from fleet.wire import messages as P

STEPS = 10


ARRAY = f"""
[suite]
name = "closing"
[[steps]]
id = "s/{{i}}"
array = "0-{STEPS - 1}"
command = "true"
"""


def closing_of(tmp_path, monkeypatch, per_turn: int, text: str = ARRAY, window: float | None = None):
    """A Closing over one submission of never-started steps (STEPS of them, unless `text`
    says others), CLOSE_STEPS = per_turn; `window`: what the allocation gave steps before
    its drain point, if its end is known."""
    monkeypatch.setattr(closing, "CLOSE_STEPS", per_turn)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    suite = write_suite(tmp_path / "s.toml", text)
    sched = Scheduler()
    sched.handle(NodeJoined(NodeSpec("n1", (0,), (), 2**30)), 0.0)
    sched.handle(DrainNow("the test's"), 0.0)  # drained: nothing starts
    log = E.EventLog(run_dir / "events.jsonl", fleet="f")
    subs = Submissions(run_dir, sched, {}, log)
    msg = P.Submit(str(suite))
    acc = subs.accept(msg)
    now = time.time()
    sched.handle(subs.enter(acc, msg, now), now)
    assert sched.running_count() == 0 and all(sched.state(s) not in S.FINAL for s in acc.sub.steps)
    coord = SimpleNamespace(sched=sched, submissions=subs, events=log, interrupted=set(),
                            recorder=SimpleNamespace(parents={}), specs=subs.specs)
    drain = SimpleNamespace(dropped=set(), why=lambda: "drained: the test's", window=lambda: window, ran_out={})
    return closing.Closing(coord, drain), acc.sub, log


def rows(sub) -> list[str]:
    return [r[0] for r in sub.finished if r[1] != "retry"]


def not_started_events(log) -> list[dict]:
    log.flush()
    lines = [json.loads(line) for line in log.path.read_text().splitlines()]
    return [e for e in lines if e["kind"] == "not_started"]


def test_a_close_counts_at_most_close_steps_a_turn_and_says_not_started_once_when_done(tmp_path, monkeypatch):
    c, sub, log = closing_of(tmp_path, monkeypatch, per_turn=3)
    c.close(time.time(), "not started: the test's")
    assert c.busy and len(rows(sub)) == 3 and not not_started_events(log)
    turns = 1
    while c.busy:
        before = len(rows(sub))
        c.step(time.time())
        turns += 1
        assert len(rows(sub)) - before <= 3
    assert turns == 4  # 10 steps, 3 a turn
    assert sorted(rows(sub)) == sorted(sub.steps) and sub.remaining == 0
    assert {r[1] for r in sub.finished} == {closing.NOT_STARTED}
    [ns] = not_started_events(log)
    assert ns["steps"] == STEPS
    c.step(time.time())  # nothing more to say
    assert len(not_started_events(log)) == 1 and not c.open_subs()


def test_a_step_that_ends_while_the_close_walks_its_submission_is_counted_once(tmp_path, monkeypatch):
    c, sub, log = closing_of(tmp_path, monkeypatch, per_turn=4)
    c.close(time.time(), "not started: the test's")
    walked, ahead = sub.steps[0], sub.steps[-1]
    # A cancel of a step the walk has counted, and of one it has yet to reach.
    c.coord.submissions.ended(walked, S.CANCELLED, 0, "cancelled", final=True)
    c.coord.submissions.ended(ahead, S.CANCELLED, 0, "cancelled", final=True)
    while c.busy:
        c.step(time.time())
    counted = rows(sub)
    assert sorted(counted) == sorted(sub.steps), counted  # each once
    assert sub.remaining == 0
    outcome = {r[0]: r[1] for r in sub.finished}
    assert outcome[walked] == closing.NOT_STARTED and outcome[ahead] == S.CANCELLED
    [ns] = not_started_events(log)
    assert ns["steps"] == STEPS - 1


LONG = """
[suite]
name = "long"
[[steps]]
id = "huge"
command = "true"
estimate = 600
[[steps]]
id = "after"
command = "true"
deps = ["huge"]
[[steps]]
id = "also"
command = "true"
estimate = 900
"""


def test_the_not_started_record_names_the_steps_that_need_a_longer_allocation_by_reason_and_whether_all_do(
        tmp_path, monkeypatch):
    # (before 2026-12-06 it held the counts alone: the report and the audit said of `huge`
    # that the fleet went down before it ran, and that the next run goes on)
    c, sub, log = closing_of(tmp_path, monkeypatch, per_turn=2, text=LONG, window=100.0)
    c.close(time.time(), "not started: the test's")
    while c.busy:
        c.step(time.time())
    [ns] = not_started_events(log)
    assert ns["steps"] == 3 and ns["reason"] == "not started: the test's"
    assert ns["longer"] == {
        "needs a longer allocation: it takes about 10 min, and an allocation like this one gives steps 100 s "
        "before its drain point": ["huge"],
        "needs a longer allocation: it takes about 15 min, and an allocation like this one gives steps 100 s "
        "before its drain point": ["also"]}
    assert ns["needs"] == ["after", "huge"]  # (a step that needs one: with that step, not a reason of its own)
    assert ns["longer_only"] is True and c.longer_only
    # Each step's reason as fleet run heard it, read back from the record.
    [rec] = [r for r in E.read_records(log.path) if isinstance(r, E.NotStarted)]
    assert dict(rec.named()) == {row[0]: row[3] for row in sub.finished}


def test_a_not_started_step_that_another_job_like_this_one_could_run_means_the_next_run_goes_on(
        tmp_path, monkeypatch):
    c, sub, log = closing_of(tmp_path, monkeypatch, per_turn=10, text=LONG + """
[[steps]]
id = "fits"
command = "true"
estimate = 10
""", window=100.0)
    c.close(time.time(), "not started: the test's")
    [ns] = not_started_events(log)
    assert ns["steps"] == 4 and sorted(x for v in ns["longer"].values() for x in v) == ["also", "huge"]
    assert ns["needs"] == ["after", "huge"]
    assert "longer_only" not in ns and not c.longer_only
