"""The per-step lines the coordinator puts together by shape (fleet.control.linetext,
eventlines.exit_line) are byte for byte what json's encoder writes for their records."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from fleet.control import eventlines, launching, linetext, outcomes
from fleet.core.decisions import Start
from fleet.core.resources import Slot
from fleet.wire import events
from fleet.wire import messages as P
from fleet.wire import numtext

ONE = (Slot("n1", (0, 3), (), 1 << 30),)
TWO = (Slot("n1", (0, 1), (2,), 5), Slot("n2", (4,), (0, 1), 7))


def exited(**over) -> P.Exited:
    fields = dict(step="s/1\u00e9\"q", attempt=2, pid=77, outcome="succeeded", returncode=0, signal=None,
                  decided_at=1796091680.4997356, first_at=1796091680.5, work_start=1796091680.51234567,
                  work_end=1796091681, ended_at=1796091681.0000001, utime=0.012, stime=0.0, maxrss_kb=9000,
                  affinity=(0, 3), placement_ok=True, error=None)
    fields.update(over)
    return P.Exited(**fields)


@pytest.mark.parametrize("v", [0, -3, 1 << 70, 0.1, 1e-05, 1796091680.4997356, 1e300, float("inf"), float("-inf"),
                               True, None, "a\u00e9\n\"", [1, 2], {"a": None}])
def test_a_value_is_spelled_as_json_spells_it(v):
    assert linetext.value(v) == events.dumps(v)
    if type(v) in (int, float):
        assert linetext.num(v) == events.dumps(v)


@pytest.mark.parametrize("v", [0.0, -0.0, 1e-05, 9.99999e-05, 0.0001, 0.00010000049, 0.1, 0.2500005, 1.0, 3, 12.0000001,
                               1796091680.4997356, 1796091681.0, 1796091681.9999996, 1796091681.0000004,
                               7999999999.9999995, 8e9, 8.1e9, 1e16, 2.5e20, float("nan"), float("inf"), -1.5])
def test_a_value_rounded_to_the_microsecond_is_spelled_as_json_spells_it(v):
    assert numtext.r6(v) == events.dumps(round(v, 6))


def test_times_and_durations_across_their_range_are_spelled_rounded_as_json_spells_them():
    import random
    rng = random.Random(12)
    for i in range(100_000):
        v = rng.choice((rng.uniform(1e9, 8e9), rng.uniform(1e-4, 10.0), rng.expovariate(0.01), rng.uniform(0, 2e-4)))
        if i % 3 == 0:
            v = round(v, rng.randint(0, 8))
        assert numtext.r6(v) == events.dumps(round(v, 6)), v


def test_start_lines_that_share_their_time_and_those_that_do_not_are_each_their_record_s_line():
    ds = [Start("a/1", 1, ONE), Start("a/2", 1, ONE), Start("a/3", 2, ONE)]
    for now, d in [(1796091681.25, ds[0]), (1796091681.25, ds[1]), (1796091682.0000005, ds[2]), (1796091681.25, ds[0]),
                   (5e-05, ds[1]), (1796091681.25, ds[2])]:
        assert eventlines.start("f-1", now, d) == events.dumps(launching.start_record(now, d).to_dict("f-1"))


def test_marker_ids_are_new_hex_and_a_forked_child_draws_none_its_parent_does():
    import os
    from fleet.control import store
    ids = [store._new_id() for _ in range(2000)]  # more than one draw ahead
    assert len(set(ids)) == 2000 and all(len(i) == 16 and int(i, 16) >= 0 for i in ids)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its ids, then gone
        try:
            os.write(w, " ".join(store._new_id() for _ in range(100)).encode())
        finally:
            os._exit(0)
    os.close(w)
    try:
        with os.fdopen(r) as f:
            child = set(f.read().split())
    finally:
        os.waitpid(pid, 0)
    assert len(child) == 100 and not child & {store._new_id() for _ in range(1000)}


def test_a_list_of_ints_is_spelled_as_json_spells_it():
    for v in ([], [5], [0, 1, 2, 63], (4, 5)):
        assert linetext.ints(v) == events.dumps(list(v))


@pytest.mark.parametrize("fleet", ["", "host-12-ab\u00e9"])
@pytest.mark.parametrize("placement", [ONE, TWO, ()])
@pytest.mark.parametrize("msg", [
    exited(),
    exited(outcome="failed", returncode=3, error="boom \u2603", memory_peak=1 << 33),
    exited(error="the kernel killed 2 processes of it at its memory 1MiB", memory_peak=1 << 20, oom_kills=2),
    exited(outcome="timed_out", returncode=None, signal=9, error="took too long", utime=1, stime=2),
    exited(outcome="out_of_memory", returncode=None, signal=9, decided_at=float("nan"), work_start=2.0),
    exited(decided_at=0.5, first_at=0.5, work_start=-1e308, work_end=1e308, ended_at=2.5, utime=5),
])
def test_an_exit_line_is_byte_for_byte_the_exit_record_the_event_log_writes(fleet, placement, msg):
    view = SimpleNamespace(placement=placement)
    rec = outcomes.reported_exit(1796091681.0123456789, "n1", msg, view, sched=None)
    line, ended = eventlines.exit_line(fleet, 1796091681.0123456789, "n1", msg, view)
    assert line == events.dumps(rec.to_dict(fleet))
    assert (ended.reason, ended.work_s, ended.cores) == (rec.reason, rec.work_s, rec.cores)
    # Its numbers spelled by its node (as fleet.node.exits sends them, through the wire):
    # the same line, and the same values for the success's records.
    spelt = P.decode(P.encode(dataclasses.replace(msg, spelt=numtext.exit_numbers(
        msg.decided_at, msg.first_at, msg.work_start, msg.work_end, msg.ended_at, msg.utime, msg.stime))))
    assert len(spelt.spelt) == numtext.EXIT_NUMBERS
    line2, ended2 = eventlines.exit_line(fleet, 1796091681.0123456789, "n1", spelt, view)
    assert line2 == line and (ended2.work_s, ended2.spelt) == (ended.work_s, ended.spelt)


def test_a_terminated_step_keeps_its_record_naming_what_ran_beside_it(tmp_path):
    log = events.EventLog(tmp_path / "events.jsonl", fleet="f")
    sched = SimpleNamespace(running_on=lambda node: [])
    msg = exited(outcome="terminated", returncode=None, signal=9, placement_ok=False, affinity=(7,))
    rec = outcomes.written(log, 5.0, "n1", msg, SimpleNamespace(placement=ONE), sched)
    log.close()
    got = list(events.read_records(tmp_path / "events.jsonl"))
    assert isinstance(rec, events.Exit) and [type(r) for r in got] == [events.PlacementMismatch, events.Exit]
    assert got[1].neighbours == [] and "nothing" in got[1].reason


@pytest.mark.parametrize("deps", [(), ("a", "b.c")])
@pytest.mark.parametrize("submission, rerun, work_end", [(3, "", 1796091682.25), (None, "forced", float("inf"))])
def test_a_success_s_marker_and_attempt_texts_are_byte_for_byte_the_records_the_journal_encodes(
        tmp_path, deps, submission, rerun, work_end):
    from fleet.control import doneline, journal, store
    from fleet.core.suite import parse_suite
    steps = [{"id": d, "command": "true"} for d in deps] + [{"id": "x/1", "command": "true", "deps": list(deps)}]
    spec = parse_suite({"steps": steps}, tmp_path / "s.toml").step("x/1")
    store.flying(tmp_path, spec, 2, 1)
    msg = exited(step="x/1", work_end=work_end)
    work_s = round(max(0.0, msg.work_end - msg.work_start), 6)
    # The attempt record names the step's definition now (here another than ran: a later
    # submission changed the running step), the marker the one that ran.
    _, att = store.attempt_record(tmp_path, "x/1", "f-1", 2, {
        "outcome": "succeeded", "node": "n1", "reason": "", "work_s": work_s, "started_at": msg.work_start,
        "ended_at": msg.ended_at, "spec": "changed-0123", "rerun": rerun, "submission": submission})
    _, rec = store.done_record(tmp_path, spec, {"attempt": 2, "node": "n1", "work_s": work_s,
                                                "ended_at": msg.ended_at, "fleet": "f-1"})
    msg = exited(step="x/1", attempt=2, work_end=work_end)
    got = doneline.texts("f-1", "n1", msg, work_s, "", rec["spec"], rec["deps"], rec["generation"], rec["id"],
                         rerun, submission, "changed-0123")
    assert got == (journal.encode(rec), journal.encode(att))
    # As the coordinator makes them: with the values its `exit` line spelled (Ended.spelt).
    _, ended = eventlines.exit_line("f-1", 1796091683.5, "n1", msg, SimpleNamespace(placement=ONE))
    assert ended.work_s == work_s and ended.spelt is not None
    assert doneline.texts("f-1", "n1", msg, work_s, "", rec["spec"], rec["deps"], rec["generation"], rec["id"], rerun,
                          submission, "changed-0123", ended.spelt) == got


def test_a_real_run_s_per_step_lines_and_markers_are_what_the_encoder_writes_for_the_records_read_back(tmp_path):
    import json

    from fleetharness import assert_nothing_left, fleet, write_suite

    from fleet.wire import records
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "shapes"
[[steps]]
id = "ok/{i}"
array = "1-6"
call = "fleet_steps:count_runs"
[[steps]]
id = "after"
call = "fleet_steps:count_runs"
deps = ["ok/1", "ok/2"]
[[steps]]
id = "bad"
command = ["sh", "-c", "echo no >&2; exit 3"]
retries = 1
[[steps]]
id = "missing"
command = ["/nonexistent/fleet-no-such-command"]
""")
    run_dir = tmp_path / "run"
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "2", cwd=tmp_path, timeout=120)
    assert r.returncode != 0 and "bad" in r.stdout + r.stderr
    kinds, missing = set(), []
    for raw in (run_dir / "events.jsonl").read_text().splitlines():
        d = json.loads(raw)
        if d["kind"] in ("start", "started", "exit"):
            kinds.add((d["kind"], d.get("outcome")))
            assert events.dumps(events.parse(d).to_dict()) == raw  # byte for byte the record's own line
            if d["kind"] == "exit" and d["step"] == "missing":
                missing.append(d)
    assert {("start", None), ("started", None), ("exit", "succeeded"), ("exit", "failed")} <= kinds
    # A step that could not start: its node sent no spelled numbers; the coordinator spelled them.
    assert [(d["outcome"], "No such file" in d["error"]) for d in missing] == [("failed", True)], missing
    done = [json.loads(raw) for p in (run_dir / records.JOURNALS).glob("*.jsonl")
            for raw in p.read_text().splitlines() if '"k":"done"' in raw]
    assert len(done) == 7
    for line in done:  # the marker file holds its journal line's text; both re-encode to themselves
        marker = (records.fleet_dir(run_dir, line["step"]) / records.DONE).read_text()
        assert marker == events.dumps(line["rec"]) and json.loads(marker) == line["rec"]
        assert line["att"]["spec"] == line["rec"]["spec"] and line["att"]["outcome"] == "succeeded"
    ids = {x["step"]: x["rec"]["id"] for x in done}
    assert next(x for x in done if x["step"] == "after")["rec"]["deps"] == {s: ids[s] for s in ("ok/1", "ok/2")}
    assert_nothing_left(run_dir)
