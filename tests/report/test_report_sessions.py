"""`fleet report` over what several submissions and several fleets wrote to one stream,
and the outcomes it lists as problems:
synthetic streams, each record tagged with its fleet as fleet.wire.events writes it."""

from __future__ import annotations

import json

import pytest

import fleet.report as R
from fleet.core import waits as W
from fleet.report.html import render
from fleet.report.trace import build_trace, validate
from fleet.wire import events as E


def read_back(recs: list[E.Record]) -> list:
    """The records as a reader gets them from events.jsonl."""
    return [E.parse(json.loads(json.dumps(r.to_dict()))) for r in recs]


def up(t: float, fleet: str, node: str = "node1", cores=(0, 1)) -> list[E.Record]:
    return [E.FleetStarting(t=t, fleet=fleet, nodes=1, pid=1),
            E.NodeJoined(t=t, fleet=fleet, node=node, host="h", cores=list(cores), memory=100),
            E.FleetUp(t=t, fleet=fleet, nodes=[node])]


def declare(t: float, fleet: str, sub: int, *steps, foreign=None) -> list[E.Record]:
    out: list[E.Record] = [E.Submitted(t=t, fleet=fleet, submission=sub, name="s", steps=len(steps))]
    for sid, deps in steps:
        out.append(E.StepDeclared(t=t, fleet=fleet, step=sid, submission=sub, cores=1, min_cores=1, deps=list(deps),
                                  step_kind="call", task=sid, foreign=foreign))
    return out


def ran(t: float, fleet: str, step: str, core: int, secs: float, outcome="succeeded", attempt=1,
        node="node1") -> list[E.Record]:
    return [E.Start(t=t, fleet=fleet, step=step, attempt=attempt, node=node, cores=[core], memory=10,
                    placement=[dict(node=node, cores=[core], gpus=[], memory=10)]),
            E.Started(t=t, fleet=fleet, step=step, attempt=attempt, node=node, pid=9),
            E.Exit(t=t + secs, fleet=fleet, step=step, attempt=attempt, node=node, outcome=outcome,
                   reason="" if outcome == "succeeded" else "exit status 3", cores=[core], memory=10,
                   decided_at=t, startup_s=0.0, work_s=secs)]


def test_steps_that_succeeded_in_a_session_stay_succeeded_when_a_later_submission_skips_them():
    f = "vm-1-aaaaaa"
    recs = up(0, f) + declare(1, f, 1, ("a", []), ("b", ["a"]), ("c", []))
    recs += ran(1, f, "a", 0, 0.5) + ran(1, f, "c", 1, 0.1, outcome="failed") + ran(1.5, f, "b", 0, 0.5)
    recs += declare(3, f, 2, ("a", []), ("b", ["a"]), ("c", []))
    recs += [E.Skipped(t=3, fleet=f, step="a"), E.Skipped(t=3, fleet=f, step="b")]
    recs += ran(3, f, "c", 0, 0.1, outcome="failed") + [E.FleetDown(t=4, fleet=f)]
    r = R.build(read_back(recs))
    assert r.counts == {"succeeded": 2, "failed": 1}
    assert r.steps["a"].outcome == r.steps["b"].outcome == "succeeded"
    probs = [(p["step"], p["attempt"], p["retried"], p.get("again")) for p in r.problems]
    assert probs == [("c", 1, False, "submitted again"), ("c", 1, False, None)]
    text = R.format_text(r)
    assert "retried" not in text and "(attempt 1, submitted again)" in text


def test_only_an_attempt_the_fleet_retried_is_labelled_retried():
    f = "vm-1-aaaaaa"
    recs = up(0, f) + declare(1, f, 1, ("d", []))
    recs += ran(1, f, "d", 0, 0.1, outcome="failed") + [E.Retry(t=1.1, fleet=f, step="d", attempt=2)]
    recs += ran(1.2, f, "d", 0, 0.1, outcome="failed", attempt=2)
    recs += declare(2, f, 2, ("d", [])) + ran(2, f, "d", 0, 0.1, outcome="failed") + [E.FleetDown(t=3, fleet=f)]
    r = R.build(read_back(recs))
    probs = [(p["attempt"], p["retried"], p.get("again")) for p in r.problems]
    assert probs == [(1, True, None), (2, False, "submitted again"), (1, False, None)]
    assert r.steps["d"].outcome == "failed"


def test_a_step_submitted_again_after_it_failed_or_was_blocked_is_to_run_again_not_ended():
    f = "vm-1-aaaaaa"
    recs = up(0, f) + declare(1, f, 1, ("x", []), ("y", ["x"]))
    recs += ran(1, f, "x", 0, 0.1, outcome="failed") + [E.Blocked(t=1.1, fleet=f, step="y", because="x")]
    recs += declare(2, f, 2, ("x", []), ("y", ["x"]))
    r = R.build(read_back(recs), now=2.5)
    assert r.in_progress and (r.steps["x"].outcome, r.steps["y"].outcome) == ("waiting", "waiting")
    recs += ran(2, f, "x", 0, 0.1) + ran(2.1, f, "y", 0, 0.1) + [E.FleetDown(t=3, fleet=f)]
    r = R.build(read_back(recs))
    assert r.counts == {"succeeded": 2}


def shards() -> list[E.Record]:
    """Two embedded fleets (each's node is `node1`) on one run directory at once; y,
    which X runs, depends on w, which Y runs: X skips w once it sees Y's marker."""
    x, y = "vm-10-aaaaaa", "vm-20-bbbbbb"
    recs = up(0, x) + declare(0.5, x, 1, ("w", []), foreign=True) + declare(0.5, x, 1, ("v", []), ("y", ["w"]))
    recs += up(1, y) + declare(1.5, y, 1, ("w", []), ("u", []))
    recs += ran(0.5, x, "v", 0, 4) + ran(1.5, y, "w", 0, 2) + ran(1.5, y, "u", 1, 5)
    recs += [E.Skipped(t=4, fleet=x, step="w", by="another shard")] + ran(4, x, "y", 1, 2)
    recs.sort(key=lambda rec: rec.t)
    return recs + [E.FleetDown(t=6, fleet=x), E.FleetDown(t=7, fleet=y)]


def test_overlapping_fleets_keep_their_own_nodes_and_utilization_stays_within_the_cores():
    r = R.build(read_back(shards()))
    assert list(r.nodes) == ["node1@vm-10-aaaaaa", "node1@vm-20-bbbbbb"]
    assert r.counts == {"succeeded": 4}
    u = r.utilization
    assert u["nodes"]["node1@vm-10-aaaaaa"]["core_s"] == pytest.approx(4 + 2)
    # In the wall window (0.5, the first submission, to 6.5, the last end): Y's node from
    # its join at 1, X's until its fleet went down at 6.
    assert u["nodes"]["node1@vm-20-bbbbbb"]["alive_s"] == pytest.approx(5.5)
    assert u["nodes"]["node1@vm-10-aaaaaa"]["alive_s"] == pytest.approx(5.5)
    assert u["overall"]["capacity_core_s"] == pytest.approx(2 * 5.5 + 2 * 5.5)
    assert u["overall"]["cores_held"] <= 1 and all(n["cores_held"] <= 1 for n in u["nodes"].values())
    assert validate(build_trace(r)) == []
    # y waited for w until its fleet saw w done (its skip at 4), not until w's exit at 3.5.
    assert r.steps["y"].segments[-1][:3] == (0.5, 4, "dependency")
    assert any("2 fleets shared the run directory" in n for n in r.notes)


def test_the_page_of_overlapping_fleets_names_each_fleets_node_and_the_lost_column():
    page = render(R.build(read_back(shards())))
    assert "<th>lost, zygote restarts</th>" in page and "<th></th>" not in page and "<th>fleet</th>" in page
    assert page.count(">node1@vm-10-aaaaaa (2)</text>") == 1 and page.count(">node1@vm-20-bbbbbb (2)</text>") == 1


def test_a_stream_of_one_fleet_names_its_nodes_as_before():
    r = R.build(read_back(up(0, "vm-1-aaaaaa") + declare(1, "vm-1-aaaaaa", 1, ("a", []))
                          + ran(1, "vm-1-aaaaaa", "a", 0, 1) + [E.FleetDown(t=3, fleet="vm-1-aaaaaa")]))
    assert list(r.nodes) == ["node1"] and r.utilization["nodes"]["node1"]["cores_held"] == pytest.approx(0.5)


def test_a_step_stopped_at_the_attempt_limit_is_a_problem():
    f = "vm-1-aaaaaa"
    recs = up(0, f) + declare(1, f, 1, ("s", [])) + ran(1, f, "s", 0, 0.1, outcome="failed")
    recs += [E.Exit(t=1.2, fleet=f, step="s", attempt=1, outcome="stopped", reason="3 attempts: the limit"),
             E.FleetDown(t=2, fleet=f)]
    r = R.build(read_back(recs))
    assert r.steps["s"].outcome == "stopped"
    assert [(p["step"], p["outcome"], p["reason"]) for p in r.problems] == [("s", "stopped", "3 attempts: the limit")]


def test_a_step_another_fleet_adopted_from_a_dead_one_no_longer_holds_the_dead_fleets_node():
    x, y = "vm-10-aaaaaa", "vm-20-bbbbbb"
    recs = up(0, x) + declare(0, x, 1, ("a", [])) + ran(0, x, "a", 0, 1)[:2]  # x is killed while a runs
    recs += up(1, y) + declare(1, y, 1, ("a", [])) + [E.Elsewhere(t=1, fleet=y, step="a", holder=x)]
    recs += [E.Adopted(t=3, fleet=y, step="a", attempt=1, previous={"fleet": x, "attempt": 1})]
    recs += ran(3, y, "a", 0, 1) + [E.FleetDown(t=5, fleet=y)]
    r = R.build(read_back(recs), now=9)
    first = r.steps["a"].attempts[0]
    assert (first.fleet, first.end, first.outcome) == (x, 3, "unfinished")
    assert r.steps["a"].outcome == "succeeded"
    u = r.utilization["nodes"]
    assert u[f"node1@{x}"]["core_s"] == pytest.approx(3)  # not until now
    assert all(n["cores_held"] <= 1 for n in u.values())


def test_a_dead_fleet_said_gone_twice_by_the_fleet_beside_it_and_by_the_next_ends_its_session_once():
    # (counted twice, the second fleet_gone ended the session while the fleet beside it ran on)
    a, b, c = "vm-1-aaaaaa", "vm-2-bbbbbb", "vm-3-cccccc"
    recs = up(0, a) + up(1, b, node="node1") + ran(2, b, "x", 0, 1.0)
    recs += [E.FleetGone(t=1.5, fleet=b, gone=a, pid=1, host="h")]  # (b found a dead beside it)
    recs += [E.FleetGone(t=1.5, fleet=c, gone=a, pid=1, host="h")] + up(5, c, node="node1")  # (c took a's lease)
    recs += ran(6, c, "y", 1, 1.0) + [E.FleetDown(t=8, fleet=b), E.FleetDown(t=9, fleet=c)]
    stream = read_back(recs)
    assert len(R.ingest.sessions(stream)) == 1
    g, n, _ = R.ingest.gather_session([stream])
    assert n == 1 and g.gone == [f"{a} (pid 1 on h)"] and g.fleets_up == 0, (n, g.gone, g.fleets_up)


@pytest.mark.parametrize("adopted_first", [False, True])
def test_a_dead_fleets_running_steps_end_with_its_nodes_however_late_another_fleet_takes_them_over(adopted_first):
    # x is killed while a and b run on its node's two cores; y, beside it, says it gone
    # (at its lease's last refresh: t=2) and takes a over at t=3; b it never takes over.
    # Before, a held x's node until 3 and b until y's end, past the node's end at 2:
    # 100 % shown for 2.5 times the cores, and a note blaming the records.
    x, y = "vm-10-aaaaaa", "vm-20-bbbbbb"
    recs = up(0, x) + declare(0, x, 1, ("a", []), ("b", [])) + ran(0, x, "a", 0, 9)[:2] + ran(0, x, "b", 1, 9)[:2]
    recs += up(1, y, cores=(0,)) + declare(1, y, 1, ("a", [])) + [E.Elsewhere(t=1, fleet=y, step="a", holder=x)]
    gone = [E.FleetGone(t=2, fleet=y, gone=x, pid=1, host="h")]
    adopted = [E.Adopted(t=3, fleet=y, step="a", attempt=1, previous={"fleet": x, "attempt": 1})]
    recs += adopted + gone if adopted_first else gone + adopted
    recs += ran(3, y, "a", 0, 1) + [E.FleetDown(t=5, fleet=y)]
    r = R.build(read_back(recs))
    a, b = r.steps["a"].attempts[0], r.steps["b"].attempts[0]
    assert (a.fleet, a.end, a.outcome) == (x, 2, "unfinished") and "took the step over" in a.reason
    assert (b.fleet, b.end, b.outcome) == (x, 2, "unfinished")
    assert r.steps["a"].outcome == "succeeded" and r.steps["b"].outcome == "unfinished"
    u = r.utilization
    assert u["nodes"][f"node1@{x}"]["core_s"] == pytest.approx(4)
    assert u["nodes"][f"node1@{x}"]["cores_held"] == pytest.approx(1.0)
    assert not u.get("over_capacity") and not any("more than the cores offered" in n for n in r.notes), r.notes


def test_a_dependency_of_another_shard_is_named_with_its_shard_where_the_submission_says_which():
    # (before 2026-12-06 "(another fleet runs it)" whatever the stream said)
    x = "vm-10-aaaaaa"
    sub = [E.Submitted(t=1, fleet=x, submission=1, name="s", steps=2, shard="0/2", foreign=1),
           E.StepDeclared(t=1, fleet=x, step="w", submission=1, cores=1, min_cores=1, step_kind="call", task="7",
                          foreign=True),
           E.StepDeclared(t=1, fleet=x, step="y", submission=1, cores=1, min_cores=1, deps=["w"], step_kind="call",
                          task="4")]
    r = R.build(read_back(up(0, x) + sub + [E.FleetDown(t=5, fleet=x)]))
    assert r.steps["y"].segments == [(1, 5, "dependency", "dependency w (shard 1/2's step) not done")]
    assert (r.steps["w"].outcome, r.steps["w"].reason) == ("elsewhere", "shard 1/2 runs it")
    # Without its shard (a hand-made stream), the words say only that another shard's it is.
    unsaid = [E.Submitted(t=1, fleet=x, submission=1, name="s", steps=2)] + sub[1:]
    r = R.build(read_back(up(0, x) + unsaid + [E.FleetDown(t=5, fleet=x)]))
    assert r.steps["y"].segments == [(1, 5, "dependency", "dependency w (another shard's step) not done")]
    assert r.steps["w"].reason == "another shard runs it"


def test_a_fleet_that_declared_a_step_after_another_fleet_ran_it_out_of_memory_takes_that_end_without_running_it():
    # The audit's stream: fleet B declares oom after A ran it out of memory, waits on A's
    # claim and then takes A's end (its exit record with `by`). Before 2026-12-07 the
    # step stayed `elsewhere` (both fleets down), its attempt "submitted again", and
    # B's words (`failed`, "out_of_memory in fleet A: ...") replaced A's outcome.
    a, b = "vm-1-aaaaaa", "vm-2-bbbbbb"
    recs = up(0, a) + declare(1, a, 1, ("oom", []), ("t", []))
    recs += ran(1, a, "oom", 0, 0.1, outcome="out_of_memory") + ran(1, a, "t", 1, 3)
    recs += up(1.5, b) + declare(2, b, 1, ("oom", []), ("t", []))
    recs += [E.Elsewhere(t=2, fleet=b, step=s, attempt=1, holder=a, reason=f"claimed by fleet {a}") for s in ("oom", "t")]
    recs.sort(key=lambda rec: rec.t)
    recs += [E.Exit(t=4.5, fleet=b, step="oom", attempt=1, outcome="failed", by=a,
                    reason=f"out_of_memory in fleet {a}: exit status 3"),
             E.Skipped(t=4.5, fleet=b, step="t", by=a), E.FleetDown(t=5, fleet=a), E.FleetDown(t=5, fleet=b)]
    r = R.build(read_back(recs))
    assert r.counts == {"out_of_memory": 1, "succeeded": 1}
    assert (r.steps["oom"].outcome, r.steps["oom"].reason) == ("out_of_memory", "exit status 3")
    assert [(p["step"], p["outcome"], p["reason"], p.get("again")) for p in r.problems] == [
        ("oom", "out_of_memory", "exit status 3", None)]
    assert r.steps["oom"].waited_s == 0.0  # it ran at once in A; B's wait is no wait of the step's
    assert "submitted again" not in R.format_text(r) and "out_of_memory in fleet" not in render(r)


def test_a_step_waiting_for_cores_in_the_fleet_that_ran_it_waits_for_cores_not_for_the_fleet_that_waited_on_it():
    # The audit's stream: B declares w while A, which holds it, has no core free for it;
    # B's `elsewhere` record is B's wait on A's claim, not what held w back in A (before
    # 2026-12-07 w "waited for another fleet (which holds its claim)" until A ran it).
    a, b = "vm-1-aaaaaa", "vm-2-bbbbbb"
    recs = up(0, a, cores=(0,)) + declare(1, a, 1, ("t", []), ("w", [])) + ran(1, a, "t", 0, 3)
    recs += [E.Wait(t=1, fleet=a, step="w", reason="needs 1 core, 0 free", cause=W.CORES, need_cores=1, free_cores=0)]
    recs += up(1.5, b) + declare(2, b, 1, ("t", []), ("w", []))
    recs += [E.Elsewhere(t=2, fleet=b, step=s, attempt=1, holder=a, reason=f"claimed by fleet {a}") for s in ("t", "w")]
    recs += ran(4, a, "w", 0, 1)
    recs.sort(key=lambda rec: rec.t)
    recs += [E.Skipped(t=5.5, fleet=b, step=s, by=a) for s in ("t", "w")]
    recs += [E.FleetDown(t=6, fleet=a), E.FleetDown(t=6, fleet=b)]
    r = R.build(read_back(recs))
    assert r.counts == {"succeeded": 2}
    assert [(x, y, c) for x, y, c, _ in r.steps["w"].segments] == [(1, 4, "cores")], r.steps["w"].segments
    assert "elsewhere" not in r.waits, r.waits


@pytest.mark.parametrize("its_own_first", [False, True])
def test_a_held_up_fleet_found_gone_ends_once_whichever_of_its_fleet_down_and_the_finders_fleet_gone_comes_first(
        its_own_first):
    # a, held up, is found gone by b (fleet_gone) and, resumed, stops saying why
    # (fleet_down): by a moment its own may come first. Counted twice, a session was cut
    # at c's start while b ran on, with b's records in it.
    a, b, c = "vm-1-aaaaaa", "vm-2-bbbbbb", "vm-3-cccccc"
    why = f"this fleet was found gone by fleet {b} at 10:00:00 (...): its steps run there"
    recs = up(0, a) + up(1, b) + ran(1, a, "x", 0, 1.0)
    ends = [E.FleetGone(t=1.5, fleet=b, gone=a, pid=1, host="h"), E.FleetDown(t=4, fleet=a, reason=why)]
    recs += (ends[::-1] if its_own_first else ends) + up(5, c) + ran(6, b, "y", 0, 1.0)
    recs += [E.FleetDown(t=8, fleet=b), E.FleetDown(t=9, fleet=c)]
    stream = read_back(recs)
    assert len(R.ingest.sessions(stream)) == 1
    g, n, _ = R.ingest.gather_session([stream])
    assert n == 1 and g.fleets_up == 0 and g.found_by == {a: b}, (n, g.fleets_up, g.found_by)
    r = R.build(stream)
    assert not r.in_progress and r.sessions == 1
    assert not [x for x in r.notes if "without fleet_down" in x], r.notes
    assert any(f"fleet {a} was found gone by fleet {b}" in x and why in x for x in r.notes), r.notes


def test_fleet_downs_of_a_stream_whose_records_name_no_fleet_each_end_one_fleet():
    recs = [E.FleetStarting(t=0, nodes=1), E.FleetStarting(t=1, nodes=1), E.FleetDown(t=2), E.FleetDown(t=3),
            E.FleetStarting(t=4, nodes=1), E.FleetDown(t=5)]
    assert [len(s) for s in R.ingest.sessions(read_back(recs))] == [4, 2]
