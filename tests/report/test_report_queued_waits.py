"""What a ready step with no wait record of its own waited for: its turn, until a record
of its kind says what the kind waits for, and that from the record's time on, even where
the record came a moment after the step became ready (a big submission's steps are
declared over several turns of the coordinator's loop before the scheduler's first pass
writes the record)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import fleet.report as R
from fleet.core import waits as W
from fleet.report.command import run as report_command
from fleet.wire import events as E
from fleetharness import assert_nothing_left, env, events, fleet, wait_for, write_suite
from test_report import Stream

TURN = "ready; no wait recorded for it or its kind"
CORES = "needs 1 core, 0 free"


def record_after_ready() -> Stream:
    """One node of 2 cores; a, x, b, c, d (1 core each) ready at 100. a starts at 100, x
    at 100.1 (the first pass, entering in parts), the kind's record (b's) only at 100.16;
    then b at 110, c at 111, d at 120."""
    s = Stream().fleet(90, [("n1", [0, 1], [], 100)])
    s.submit(100, [(x, [], 1, None) for x in ("a", "x", "b", "c", "d")])
    s.start(100, "a", "n1", [0], memory=50).start(100.1, "x", "n1", [1], memory=50)
    s.wait(100.16, "b", W.WaitReason(W.CORES, cores=1, free_cores=0), behind=2)
    s.exit(110, "a", 0, 10).start(110, "b", "n1", [0], memory=50)
    s.exit(111, "x", 0, 10.9).start(111, "c", "n1", [1], memory=50)
    s.exit(120, "b", 0, 10).start(120, "d", "n1", [0], memory=50)
    s.exit(125, "c", 0, 14).exit(125, "d", 0, 5)
    return s.down(126)


def test_a_kinds_wait_record_written_after_its_steps_became_ready_applies_to_them_from_its_time_on(tmp_path):
    record_after_ready().write(tmp_path / "events.jsonl")
    code, out, _ = report_command(str(tmp_path), as_json=True)
    assert code == 0
    j = json.loads(out)
    # Before the record each waited for its turn; from it on, for cores, as the record says.
    assert j["waits"]["cores"] == {"steps": 3, "step_s": pytest.approx(9.84 + 10.84 + 19.84)}
    assert j["waits"]["queued"] == {"steps": 4, "step_s": pytest.approx(0.1 + 3 * 0.16)}
    assert {sid: j["steps"][sid]["waited_for"] for sid in "xbcd"} == {
        "x": "queued", "b": "cores", "c": "cores", "d": "cores"}
    r = R.build(list(E.read_records(tmp_path / "events.jsonl")))
    assert [seg[2:] for seg in r.steps["c"].segments] == [(W.QUEUED, TURN), (W.CORES, f"queued behind b: {CORES}")]
    assert [seg[:2] for seg in r.steps["c"].segments] == [(100, pytest.approx(100.16)), (pytest.approx(100.16), 111)]
    assert r.steps["x"].segments == [(100, pytest.approx(100.1), W.QUEUED, TURN)]  # it started before the record
    code, text, _ = report_command(str(tmp_path))
    assert code == 0
    assert "waited for: cores 40.52 s (3 steps), its turn (ready, no wait recorded) 580.0 ms (4 steps)" in text, text


def test_a_step_whose_own_earlier_record_is_its_kinds_latest_takes_the_kinds_next_one_from_its_time():
    # r waited (its own record at 101), ran, failed and was retried at 105; its kind's next
    # record, q's, came at 105.5: r's second wait is its turn until then, cores after it.
    s = Stream().fleet(90, [("n1", [0], [], 100)])
    s.submit(100, [("a", [], 1, None), ("r", [], 1, None), ("q", [], 1, None)])
    s.start(100, "a", "n1", [0], memory=100).wait(101, "r", W.WaitReason(W.CORES, cores=1, free_cores=0))
    s.exit(102, "a", 0, 2).start(102, "r", "n1", [0], memory=100)
    s.exit(105, "r", 0, 3, outcome="failed").add(E.Retry(t=105, step="r", attempt=1, reason="exit status 1"))
    s.start(105, "q", "n1", [0], memory=100).wait(105.5, "q", W.WaitReason(W.CORES, cores=1, free_cores=0))
    s.exit(107, "q", 0, 2).start(107, "r", "n1", [0], memory=100, attempt=2).exit(108, "r", 0, 1, attempt=2)
    r = R.build(s.down(109).recs)
    assert r.steps["r"].segments == [(100, 101, W.QUEUED, TURN), (101, 102, W.CORES, CORES),
                                     (105, 105.5, W.QUEUED, TURN), (105.5, 107, W.CORES, f"queued behind q: {CORES}")]


MANY = """
[suite]
name = "many"
[[steps]]
id = "s/{i}"
array = "1-20000"
command = "sleep 300"
"""


def test_a_big_submission_queued_behind_a_cores_record_written_after_it_was_declared_waited_for_cores(tmp_path):
    # A real fleet on this machine takes 20,000 one-core steps: they are declared a thousand
    # a turn over several turns of its loop, and the scheduler's first pass, after them,
    # writes the kind's one `cores` record. The report (of the run in progress) says the
    # steps waited for cores from that record on, not for their turn all the time.
    suite = write_suite(tmp_path / "s.toml", MANY)
    run = tmp_path / "run"
    environ = {**env(), "FLEET_RUN_DIR": str(run)}
    up = fleet("up", "--local", "--nodes", "1", cwd=tmp_path, timeout=120, environ={"FLEET_RUN_DIR": str(run)})
    assert up.returncode == 0, up.stderr
    with open(tmp_path / "run.out", "w") as out:
        p = subprocess.Popen([sys.executable, "-m", "fleet", "run", str(suite)], cwd=tmp_path, env=environ,
                             stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        recs = wait_for(lambda: (lambda ev: ev if any(e["kind"] == "entered" for e in ev)
                                 and any(e["kind"] == "wait" for e in ev) else None)(events(run)),
                        timeout=120, what="the submission entered and its kind's wait record")
        declared = min(e["t"] for e in recs if e["kind"] == "step")
        [first_wait, *_] = [e for e in recs if e["kind"] == "wait"]
        assert first_wait["cause"] == W.CORES, first_wait
        gap = first_wait["t"] - declared
        assert gap > 0, "the record was written in the turn that declared the first steps"
        # Until the steps have waited longer behind the record than before it (a moment).
        wait_for(lambda: time.time() > first_wait["t"] + 2 * gap + 0.5, timeout=60, what="the steps to wait")
        j = json.loads(fleet("report", str(run), "--json", cwd=tmp_path, check=True, timeout=120).stdout)
    finally:
        down = fleet("down", cwd=tmp_path, timeout=120, environ={"FLEET_RUN_DIR": str(run)})
        try:
            p.wait(timeout=60)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=30)
    assert down.returncode == 0, down.stderr
    waiting = {sid: s["waited_for"] for sid, s in j["steps"].items() if s["outcome"] == "waiting"}
    assert len(waiting) > 19_000, len(waiting)
    assert set(waiting.values()) == {"cores"}, {k: v for k, v in waiting.items() if v != "cores"}
    assert j["waits"]["queued"]["step_s"] < gap * 20_000 + 1e-6, (j["waits"], gap)
    assert_nothing_left(run)
