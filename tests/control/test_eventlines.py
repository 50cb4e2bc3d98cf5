"""The `start` and `started` lines and the Launch the coordinator builds without the
frozen dataclasses' __init__ are exactly what the records and the message give."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from fleet.control import eventlines, launching
from fleet.core.decisions import Resume, Start
from fleet.core.resources import Slot
from fleet.core.suite import parse_suite
from fleet.core.window import Begin, Queue
from fleet.site.profiles import Profile
from fleet.wire import events
from fleet.wire import messages as P

ONE = (Slot("n1", (0, 3), (), 1 << 30),)
TWO = (Slot("n1", (0, 1), (2,), 5), Slot("n2", (4,), (0, 1), 7))


@pytest.mark.parametrize("fleet", ["", "f-1"])
@pytest.mark.parametrize("d", [Start("a/1", 1, ONE), Start("b", 3, TWO), Begin("c", 2, ONE, after="a/1")])
def test_a_start_line_is_byte_for_byte_the_start_record_the_event_log_writes(fleet, d):
    expected = events.dumps(launching.start_record(1234.56789012, d).to_dict(fleet))
    assert eventlines.start(fleet, 1234.56789012, d) == expected


@pytest.mark.parametrize("fleet", ["", "f-1"])
def test_a_started_line_is_byte_for_byte_the_started_record_the_event_log_writes(fleet):
    msg = SimpleNamespace(step="x/9", attempt=2, pid=4321, at=99.125)
    rec = events.Started(t=7.0000004, step="x/9", attempt=2, node="n3", pid=4321, at=99.125)
    assert eventlines.started(fleet, 7.0000004, "n3", msg) == events.dumps(rec.to_dict(fleet))


@pytest.mark.parametrize("fleet", ["", "f-1"])
@pytest.mark.parametrize("step, after", [("q/7", "a/1"), ('odd "step"\u00e9', "b\\c")])
def test_a_queued_line_is_byte_for_byte_the_queued_record_the_event_log_writes(fleet, step, after):
    d = Queue(step, 3, ONE, after=after)
    rec = events.Queued(t=5.1234567, step=step, attempt=3, node="n1", after=after)
    assert eventlines.queued(fleet, 5.1234567, d) == events.dumps(rec.to_dict(fleet))
    assert launching.start_records(5.1234567, d, None) == [rec]


def test_a_launch_built_from_its_fields_equals_the_message_made_by_its_constructor_and_encodes_the_same(tmp_path):
    steps = [{"id": "plain", "call": "m:f"}, {"id": "cmd", "command": ["echo", "x"], "memory": "1GiB", "timeout": 5},
             {"id": "proto", "command": "true", "protocol": "steps"}]
    specs = parse_suite({"steps": steps}, tmp_path / "s.toml").steps
    for spec, d in zip(specs, [Start("plain", 1, ONE), Start("cmd", 2, TWO),
                               Start("proto", 1, ONE, Resume(2, "b", 1, (("proto/k", "failed"),)))]):
        msg = launching.launch(Profile("local", ""), spec, d, tmp_path, "f-1")
        made = P.Launch(**{f.name: getattr(msg, f.name) for f in dataclasses.fields(P.Launch)})
        assert msg == made and list(msg.__dict__) == list(made.__dict__) and P.encode(msg) == P.encode(made)
    again = launching.launch(Profile("local", ""), specs[0], Start("plain", 1, ONE), tmp_path)
    assert again.env is not msg.env and again.children is not msg.children  # fresh dicts each


@pytest.mark.parametrize("cls, fields", [
    (events.Exit, dict(t=3.5, step="s", attempt=2, node="n1", outcome="succeeded", reason="", returncode=0,
                       cores=[1, 2], memory=9, work_s=0.25, neighbours=None)),
    (events.Start, dict(t=1.0, step="s", attempt=1, node="n1")),  # (fields with default factories)
])
def test_a_record_made_without_its_init_equals_the_record_made_by_it_and_is_written_the_same(cls, fields):
    rec, made = eventlines.record(cls, **fields), cls(**fields)
    assert rec == made and events.dumps(rec.to_dict("f")) == events.dumps(made.to_dict("f"))
    if cls is events.Start:
        assert eventlines.record(cls, **fields).cores is not rec.cores  # fresh lists each


@pytest.mark.parametrize("fleet", ["", "f-1"])
@pytest.mark.parametrize("step", ["s/000123", 'odd "step"\u00e9\\'])
@pytest.mark.parametrize("by", [None, "other-fleet-7"])
def test_a_skipped_line_is_byte_for_byte_the_skipped_record_the_event_log_writes(fleet, step, by):
    rec = events.Skipped(t=1764698000.1234567, step=step, by=by)
    assert eventlines.skipped(fleet, 1764698000.1234567, step, by) == events.dumps(rec.to_dict(fleet))
    line = eventlines.skipped(fleet, 3.5, step, by)
    assert events.parse(json.loads(line)) == events.Skipped(t=3.5, fleet=fleet, step=step, by=by)
