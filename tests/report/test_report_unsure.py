"""`fleet report` on a queued step its node may have started unheard (fleet.core.unsure):
its `unqueued` record says `may_have_started`, and it runs again as attempt + 1. Before
2026-12-07 the report read nothing of it: the step showed one attempt and no problem,
though its side effect may have happened twice (the review's F3). Synthetic streams
whose answers are known exactly; tests/control/test_zygote_restart_unsure.py has a real one."""

from __future__ import annotations

import json

import fleet.report as R
from fleet.report.html import render
from fleet.wire import events as E
from test_report import Stream

LOST = ("n1 was lost before its start was heard (agent missed heartbeats); it may have started there: "
        "it runs again as attempt 2")


def taken_back(may_have_started: bool = True) -> Stream:
    """Nodes n1 and n2 of one core each; a and b submitted at 100, then c. a runs on n1,
    b on n2, c is queued on n1 behind a; n1 is lost at 105, a with it, and c is taken
    back (it may have started there); c runs again on n2 at 110 as attempt 2."""
    s = Stream().fleet(90, [("n1", [0], [], 100), ("n2", [0], [], 100)])
    s.submit(100, [("a", [], 1, None), ("b", [], 1, None), ("c", [], 1, None)])
    s.start(100, "a", "n1", [0]).start(100, "b", "n2", [0])
    s.add(E.Queued(t=100, step="c", attempt=1, node="n1", after="a"))
    s.add(E.NodeLost(t=105, node="n1", reason="agent missed heartbeats"))
    s.exit(105, "a", 0.1, 4, outcome="lost", reason="its node n1 was lost")
    s.add(E.Retry(t=105, step="a", attempt=2, reason="lost"))
    s.add(E.Unqueued(t=105, step="c", attempt=1, reason=LOST if may_have_started else "n1 was lost before it started",
                     may_have_started=may_have_started))
    s.exit(110, "b", 0.1, 9.9)
    s.start(110, "c", "n2", [0], attempt=2).exit(115, "c", 0.1, 4.9, attempt=2)
    s.start(115, "a", "n2", [0], attempt=2).exit(120, "a", 0.1, 4.9, attempt=2)
    return s.down(121)


def test_an_attempt_that_may_have_run_counts_among_the_steps_attempts_and_is_a_problem_apart_from_the_failures():
    r = R.build(taken_back().recs)
    j = r.to_json()
    c = j["steps"]["c"]
    assert (c["outcome"], c["attempts"], c["may_have_run"], c["node"]) == ("succeeded", 2, [1], "n2"), c
    assert j["counts"] == {"succeeded": 3}
    mine = [p for p in j["problems"] if p["step"] == "c"]
    assert mine == [dict(step="c", outcome="may have run", attempt=1, node="n1", t=5.0,
                         reason="n1 was lost before its start was heard (agent missed heartbeats)", retried=False,
                         next_attempt=2, log="steps/c/log")]
    # a's lost attempt is the failure it was; c's is no failure, nor counted as work or a start
    assert [(p["step"], p["outcome"]) for p in j["problems"]] == [("a", "lost"), ("c", "may have run")]
    assert "may_have_run" not in j["steps"]["a"] and j["steps"]["a"]["attempts"] == 2
    assert j["startup"]["count"] == 4 and abs(j["work_s"] - (4 + 9.9 + 4.9 + 4.9)) < 1e-6

    text = R.format_text(r)
    line = next(x for x in text.splitlines() if "may have run" in x)
    assert line.split()[:5] == ["may", "have", "run", "c", "on"], line
    assert ("c on n1 (attempt 1, before attempt 2): n1 was lost before its start was heard (agent missed "
            "heartbeats) (log: steps/c/log)") in line, line
    page = render(r)
    assert "may have run" in page and "(attempt 1, before attempt 2) n1 was lost before its start" in page


def test_a_step_whose_last_word_was_that_it_may_have_run_is_not_run_once_its_fleet_went_down_and_says_both():
    s = Stream().fleet(90, [("n1", [0], [], 100)])
    s.submit(100, [("a", [], 1, None), ("c", [], 1, None)])
    s.start(100, "a", "n1", [0]).add(E.Queued(t=100, step="c", attempt=1, node="n1", after="a"))
    s.add(E.NodeLost(t=105, node="n1", reason="agent missed heartbeats"))
    s.exit(105, "a", 0.1, 4, outcome="lost", reason="its node n1 was lost")
    s.add(E.Unqueued(t=105, step="c", attempt=1, reason=LOST, may_have_started=True))
    j = R.build(s.down(106).recs).to_json()
    c = j["steps"]["c"]
    assert (c["outcome"], c["attempts"], c["may_have_run"], c["node"]) == ("not run", 1, [1], None), c
    assert [(p["outcome"], p["attempt"], p["node"]) for p in j["problems"] if p["step"] == "c"] == [
        ("may have run", 1, "n1"), ("not run", None, None)]


def test_a_stream_of_before_may_have_started_reads_as_it_did():
    # (an `unqueued` line of before 2026-12-07 has no may_have_started: the attempt was unused)
    old = [json.loads(line) for line in taken_back(may_have_started=False).lines()]
    for d in old:
        d.pop("may_have_started", None)
    recs = [E.parse(d) for d in old]
    without = [E.parse(d) for d in old if d["kind"] not in ("queued", "unqueued")]
    j = R.build(recs).to_json()
    assert j == R.build(without).to_json()
    assert j["steps"]["c"]["attempts"] == 1 and "may_have_run" not in j["steps"]["c"]
    assert [p["outcome"] for p in j["problems"]] == ["lost"]


def test_an_attempt_that_may_have_run_names_its_node_as_the_report_does_where_two_fleets_named_theirs_alike():
    s = Stream()
    for fleet, t in (("f1", 90), ("f2", 91)):
        s.add(E.FleetStarting(t=t, nodes=1, pid=1, fleet=fleet))
        s.add(E.NodeJoined(t=t + 1, node="node1", host="h", cores=[0], gpus=[], memory=100, pid=2, zygote_pid=3,
                           fleet=fleet))
    s.submit(100, [("a", [], 1, None), ("c", [], 1, None)])
    s.add(E.Queued(t=100, step="c", attempt=1, node="node1", after="a", fleet="f1"))
    s.add(E.Unqueued(t=105, step="c", attempt=1, reason=LOST, may_have_started=True, fleet="f1"))
    s.add(E.Queued(t=106, step="a", attempt=1, node="node1", after="x", fleet="f2"))
    s.add(E.Unqueued(t=107, step="a", attempt=1, reason=LOST, may_have_started=True, fleet="f2"))
    r = R.build(s.recs)
    assert set(r.nodes) == {"node1@f1", "node1@f2"}
    assert {p["step"]: p["node"] for p in r.to_json()["problems"] if p["outcome"] == "may have run"} == {
        "c": "node1@f1", "a": "node1@f2"}


def test_the_audit_counts_an_attempt_that_may_have_run_from_the_stream_and_reads_an_old_stream_as_before(tmp_path):
    # (the audit reads the step's files for what ran; this stream has none: only what it says of c)
    from fleet.report.audit import audit
    for name, may in (("new", True), ("old", False)):
        run_dir = tmp_path / name
        run_dir.mkdir()
        taken_back(may_have_started=may).write(run_dir / "events.jsonl")
        c = audit(run_dir).steps["c"]
        if may:
            assert (c.attempts, c.may_have_run) == (1, (1,)), c
            assert c.reason.endswith("; attempt 1 may have run on n1 before attempt 2: n1 was lost before its start "
                                     "was heard (agent missed heartbeats)"), c
        else:
            assert (c.attempts, c.may_have_run) == (0, ()) and "may have run" not in c.reason, c
