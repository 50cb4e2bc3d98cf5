"""`fleet report` on synthetic event streams whose answers are known exactly."""

from __future__ import annotations

import json
import re

import pytest

import fleet.report as R
from fleet.core import waits as W
from fleet.report.command import run as report_command
from fleet.report.html import COLOURS, EXACT_BARS, render
from fleet.report.trace import build_trace, validate
from fleet.wire import events as E


class Stream:
    """Records as fleet.control.coordinator writes them: built with fleet.wire.events'
    classes and read back through the stream's own serialisation (to_dict, JSON, parse),
    so a field renamed on either side breaks these tests."""

    def __init__(self):
        self.written: list[E.Record] = []
        self._starts: dict[tuple[str, int], E.Start] = {}

    @property
    def recs(self) -> list:
        """The records as a reader gets them from events.jsonl."""
        return [E.parse(json.loads(line)) for line in self.lines()]

    def lines(self) -> list[str]:
        return [json.dumps(r.to_dict(), separators=(",", ":"), default=str) for r in self.written]

    def write(self, path) -> None:
        log = E.EventLog(path)
        for r in self.written:
            log.write(r)
        log.close()

    def add(self, rec: E.Record) -> "Stream":
        self.written.append(rec)
        return self

    def fleet(self, t, nodes):
        self.add(E.FleetStarting(t=t, nodes=len(nodes), pid=1))
        for name, cores, gpus, memory in nodes:
            self.add(E.NodeJoined(t=t + 1, node=name, host="h", cores=list(cores), gpus=list(gpus),
                                  memory=memory, pid=2, zygote_pid=3))
        return self.add(E.FleetUp(t=t + 1, nodes=[n[0] for n in nodes]))

    def submit(self, t, steps, serial=False, sub=1):
        self.add(E.Submitted(t=t, submission=sub, suite="s.toml", name="s", steps=len(steps), skipped=0,
                             serial=serial, force=False))
        for sid, deps, cores, memory in steps:
            self.add(E.StepDeclared(t=t, step=sid, submission=sub, cores=cores, min_cores=cores, gpus=0,
                                    memory=memory, deps=list(deps), priority=3, step_kind="call", task=sid))
        return self

    def wait(self, t, step, why: W.WaitReason, behind=0):
        return self.add(E.Wait.of(t, step, why, behind=behind))

    def start(self, t, step, node, cores, gpus=(), memory=0, attempt=1):
        rec = E.Start(t=t, step=step, attempt=attempt, node=node, cores=list(cores), gpus=list(gpus), memory=memory,
                      nodes=[node], placement=[dict(node=node, cores=list(cores), gpus=list(gpus), memory=memory)])
        self._starts[(step, attempt)] = rec
        self.add(rec)
        return self.add(E.Started(t=t + 0.0001, step=step, attempt=attempt, node=node, pid=99))

    def exit(self, t, step, startup, work, outcome="succeeded", attempt=1, reason=""):
        st = self._starts[(step, attempt)]
        decided = st.t
        return self.add(E.Exit(t=t, step=step, attempt=attempt, node=st.node, outcome=outcome,
                               returncode=0 if outcome == "succeeded" else 1, signal=None, cores=st.cores,
                               gpus=st.gpus, memory=st.memory, decided_at=decided, first_at=decided + startup / 2,
                               work_start=decided + startup, work_end=decided + startup + work, ended_at=t,
                               startup_s=round(startup, 6), work_s=round(work, 6), utime=0.0, stime=0.0,
                               maxrss_kb=1, error=None, reason=reason))

    def down(self, t):
        return self.add(E.FleetDown(t=t))


def two_chains() -> Stream:
    """Two nodes of 2 cores (1000 bytes each); chains a -> b (b: 2 cores) and c -> d."""
    s = Stream().fleet(990, [("n1", [0, 1], [], 1000), ("n2", [2, 3], [], 1000)])
    s.submit(1000, [("a", [], 1, None), ("b", ["a"], 2, None), ("c", [], 1, None), ("d", ["c"], 1, None)])
    s.start(1000, "a", "n1", [0], memory=250).start(1000, "c", "n1", [1], memory=250)
    s.exit(1004, "c", startup=2, work=2).start(1004, "d", "n1", [1], memory=250)
    s.exit(1005, "a", startup=1, work=4).start(1005, "b", "n2", [2, 3], memory=500)
    s.exit(1010, "b", startup=0.5, work=4.5).exit(1010, "d", startup=1, work=5)
    return s.down(1011)


def test_wall_work_speedup_and_startup_are_exact_and_startup_is_not_work():
    r = R.build(two_chains().recs)
    assert r.wall_s == pytest.approx(10.0)
    assert r.work_s == pytest.approx(4 + 2 + 5 + 4.5)
    assert r.speedup == pytest.approx(15.5 / 10)
    assert r.startup["count"] == 4
    assert r.startup["total_s"] == pytest.approx(4.5)
    assert r.startup["median_s"] == pytest.approx(1.0)
    assert r.startup["p95_s"] == pytest.approx(2.0)
    assert r.work_core_s == pytest.approx(4 + 2 + 5 + 2 * 4.5)
    assert not r.in_progress and r.counts == {"succeeded": 4}


def test_a_run_that_spends_its_time_starting_steps_reports_a_speedup_below_one():
    # Four steps side by side, each 35 s of imports and 5 s of work: held-time would say 4x.
    s = Stream().fleet(0, [("n1", [0, 1, 2, 3], [], 4000)])
    s.submit(10, [(f"s{i}", [], 1, None) for i in range(4)])
    for i in range(4):
        s.start(10, f"s{i}", "n1", [i], memory=1000)
    for i in range(4):
        s.exit(50, f"s{i}", startup=35, work=5)
    r = R.build(s.down(51).recs)
    assert r.wall_s == pytest.approx(40)
    assert r.work_s == pytest.approx(20)
    assert r.speedup == pytest.approx(0.5)
    assert r.startup["total_s"] == pytest.approx(140)
    assert r.utilization["overall"]["cores_held"] == pytest.approx(1.0)
    assert r.utilization["overall"]["cores_working"] == pytest.approx(20 / 160)


def test_the_floor_is_the_longest_chain_of_the_steps_own_work():
    r = R.build(two_chains().recs)
    assert r.floor_s == pytest.approx(8.5)  # a (4) -> b (4.5); c -> d is 7
    assert r.floor_path == ["a", "b"]
    assert r.floor_with_startup_s == pytest.approx(10.0)
    j = r.to_json()
    assert j["floor_s"] == pytest.approx(8.5)
    assert j["from_floor_s"] == pytest.approx(1.5)
    assert j["capacity_floor_s"] == pytest.approx(20 / 4)


def test_critical_path_follows_deps_across_a_diamond_and_ignores_unknown_ids():
    deps = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c", "nowhere"]}
    length, path = R.critical_path(deps, {"a": 1, "b": 5, "c": 2, "d": 1})
    assert length == 7 and path == ["a", "b", "d"]
    assert R.critical_path({}, {}) == (0.0, [])


def test_critical_path_breaks_ties_by_the_order_of_deps_and_leaves_cycles_out():
    # Equal chains: the first to end in Kahn's order of the mapping; the first predecessor.
    assert R.critical_path({"b": [], "a": []}, {"a": 1, "b": 1}) == (1, ["b"])
    assert R.critical_path({"x": [], "y": [], "z": ["y", "x"]}, {"x": 1, "y": 1, "z": 1}) == (2, ["x", "z"])
    # A cycle, and what depends on it, is left out; the rest still counts.
    assert R.critical_path({"p": ["q"], "q": ["p"], "r": ["q"], "s": []}, {"p": 5, "q": 5, "r": 5, "s": 1}) == (1, ["s"])


def test_utilization_of_cores_and_memory_is_exact_per_node_and_overall():
    u = R.build(two_chains().recs).utilization
    assert u["overall"]["cores_held"] == pytest.approx(25 / 40)
    assert u["overall"]["cores_working"] == pytest.approx(20 / 40)
    assert u["nodes"]["n1"]["cores_held"] == pytest.approx(15 / 20)
    assert u["nodes"]["n2"]["cores_held"] == pytest.approx(10 / 20)
    assert u["nodes"]["n1"]["cores_working"] == pytest.approx(11 / 20)
    assert u["nodes"]["n1"]["memory_held"] == pytest.approx(250 * 15 / 10000)
    assert u["nodes"]["n2"]["memory_held"] == pytest.approx(500 * 5 / 10000)
    assert u["overall"]["gpus_held"] is None  # no GPUs: no figure, not 0 %


def test_waiting_for_dependencies_and_the_idle_stretch_are_exact():
    r = R.build(two_chains().recs)
    assert r.waits == {"dependency": {"steps": 2, "step_s": pytest.approx(9.0)}}
    assert [seg[2:] for seg in r.steps["b"].segments] == [("dependency", "dependency a")]
    assert len(r.stretches) == 1
    st = r.stretches[0]
    assert (st["from"], st["to"]) == (pytest.approx(0), pytest.approx(5))
    assert st["idle_core_s"] == pytest.approx(10)
    assert (st["min_idle"], st["max_idle"]) == (2, 2)
    assert st["by_category"] == {"dependency": 2}
    assert {w["step"]: w["waited_s"] for w in st["steps"]} == {"b": pytest.approx(5), "d": pytest.approx(4)}


def resource_waits() -> Stream:
    s = Stream().fleet(90, [("n1", [0, 1], [0], 100), ("n2", [2, 3], [], 100)])
    s.submit(100, [("x", [], 1, 80), ("y", [], 1, None), ("m", [], 1, 60), ("w", [], 2, None),
                   ("g", [], 1, None), ("q", [], 2, None)])
    s.start(100, "x", "n1", [0], gpus=[0], memory=80).start(100, "y", "n2", [2], memory=50)
    s.wait(100, "m", W.WaitReason(W.WHOLE_NODE, cores=1, memory=60))
    s.wait(100, "w", W.WaitReason(W.WHOLE_NODE, cores=2), behind=1)
    s.wait(100, "g", W.WaitReason(W.GPUS, gpus=1, free_gpus=0))
    s.exit(104, "y", 0, 4).start(104, "m", "n2", [2], memory=60)
    s.exit(108, "m", 0, 4).start(108, "w", "n2", [2, 3], memory=100)
    s.exit(110, "x", 0, 10).start(110, "g", "n1", [0], gpus=[0], memory=50)
    s.exit(111, "g", 0, 1).start(111, "q", "n1", [0, 1], memory=100)
    s.exit(112, "w", 0, 4).exit(113, "q", 0, 2)
    return s.down(114)


def test_waits_tell_memory_from_a_whole_node_and_gpus_and_queued_steps_take_their_kinds_reason():
    r = R.build(resource_waits().recs)
    cat = {sid: r.steps[sid].waited_for() for sid in ("m", "w", "g", "q")}
    assert cat == {"m": W.MEMORY, "w": W.WHOLE_NODE, "g": W.GPUS, "q": W.WHOLE_NODE}
    assert r.waits[W.MEMORY] == {"steps": 1, "step_s": pytest.approx(4)}
    assert r.waits[W.WHOLE_NODE] == {"steps": 2, "step_s": pytest.approx(8 + 11)}
    assert r.waits[W.GPUS] == {"steps": 1, "step_s": pytest.approx(10)}
    assert r.steps["q"].segments[0][3].startswith("queued behind w: no node has 2 cores")
    st = r.stretches[0]
    assert (st["from"], st["to"]) == (pytest.approx(0), pytest.approx(11))
    assert st["idle_core_s"] == pytest.approx(2 * 8 + 1 * 3)
    assert st["by_category"] == {W.MEMORY: 1, W.WHOLE_NODE: 2, W.GPUS: 1}
    # The JSON names the categories as it always has.
    j = r.to_json()
    assert set(j["waits"]) == {"memory", "whole node", "gpus"}
    assert {sid: j["steps"][sid]["waited_for"] for sid in cat} == {"m": "memory", "w": "whole node", "g": "gpus",
                                                                   "q": "whole node"}
    assert j["stretches"][0]["by_category"] == {"memory": 1, "whole node": 2, "gpus": 1}
    assert {w["for"] for w in j["stretches"][0]["steps"]} == {"memory", "whole node", "gpus"}


def test_a_step_without_memory_short_of_its_cores_share_beside_a_bigger_declaration_waited_for_memory():
    # n1: 2 cores, 100 bytes. "big" declares 80 (its one core's share is 50): the other core
    # is free, its share (50) is not. A record of an earlier scheduler says whole_node.
    s = Stream().fleet(90, [("n1", [0, 1], [], 100)])
    s.submit(100, [("big", [], 1, 80), ("p", [], 1, None), ("n", [], 1, None)])
    s.start(100, "big", "n1", [0], memory=80)
    s.wait(100, "p", W.WaitReason(W.WHOLE_NODE, cores=1))
    s.wait(100, "n", W.WaitReason(W.MEMORY, cores=1))  # as this scheduler says it
    s.exit(104, "big", 0, 4).start(104, "p", "n1", [0], memory=50).start(104, "n", "n1", [1], memory=50)
    s.exit(105, "p", 0, 1).exit(105, "n", 0, 1)
    r = R.build(s.down(106).recs)
    assert {sid: r.steps[sid].waited_for() for sid in ("p", "n")} == {"p": W.MEMORY, "n": W.MEMORY}
    assert r.waits[W.MEMORY] == {"steps": 2, "step_s": pytest.approx(8)}


def test_a_wait_is_classified_from_its_structure_not_its_words():
    s = Stream().fleet(0, [("n1", [0], [], 100)])
    s.submit(1, [("a", [], 1, None), ("b", [], 1, None)]).start(1, "a", "n1", [0], memory=100)
    s.add(E.Wait(t=1, step="b", reason="words a newer fleet chose", cause=W.CORES, need_cores=1, free_cores=0))
    s.exit(3, "a", 0, 2).start(3, "b", "n1", [0], memory=100).exit(4, "b", 0, 1)
    r = R.build(s.down(5).recs)
    assert r.steps["b"].segments == [(1, 3, W.CORES, "words a newer fleet chose")]


def test_time_held_back_by_a_reservation_is_its_own_category_named_in_words():
    s = Stream()
    s.submit(1, [("a", [], 1, None), ("b", [], 1, None)]).start(1, "a", "n1", [0], memory=100)
    why = W.WaitReason(W.RESERVED, 1, 0, None, 0, 0, detail="wide")
    s.add(E.Wait.of(1, "b", why))
    s.exit(3, "a", 0, 2).start(3, "b", "n1", [0], memory=100).exit(4, "b", 0, 1)
    r = R.build(s.down(5).recs)
    assert r.steps["b"].segments == [(1, 3, W.RESERVED, "held back by a reservation for wide (needs 1 core)")]
    assert R.CATEGORY_TEXT[W.RESERVED] == "a reservation for another step"


def test_classify_takes_each_cause_the_scheduler_writes():
    for cause in (W.CORES, W.GPUS, W.WHOLE_NODE, W.SPAN, W.ALONE, W.ELSEWHERE, W.RESERVED, W.OTHER):
        assert R.classify(W.WaitReason(cause, cores=8)) == cause
    assert R.classify(W.WaitReason("a cause from a newer fleet")) == W.OTHER


def test_classify_reads_each_reason_a_0_1_stream_wrote_in_words():
    def of(text):
        return R.classify(E.parse({"t": 1, "kind": "wait", "step": "x", "reason": text}).why())
    assert of("needs 4 cores, 2 free") == W.CORES
    assert of("needs 2 GPUs, 0 free") == W.GPUS
    assert of("no node has 8 cores free together (the step may not span nodes)") == W.WHOLE_NODE
    assert of("needs 8 cores with 0 GPUs and its memory across nodes") == W.SPAN
    assert of("runs alone: waiting for 3 running step(s) to finish") == W.ALONE
    assert of("elsewhere: held by fleet f2: claimed") == W.ELSEWHERE
    assert of("something new") == W.OTHER


def test_a_run_in_progress_ends_running_steps_and_waits_now():
    s = Stream().fleet(0, [("n1", [0, 1], [], 100)])
    s.submit(10, [("a", [], 1, None), ("b", [], 1, None), ("c", ["a"], 1, None), ("d", [], 2, None)])
    s.start(10, "a", "n1", [0], memory=50).start(10, "b", "n1", [1], memory=50)
    s.wait(10, "d", W.WaitReason(W.CORES, cores=2, free_cores=0))
    s.exit(13, "b", startup=1, work=2)
    r = R.build(s.recs, now=20)
    assert r.in_progress
    assert r.wall_s == pytest.approx(10)
    assert r.steps["a"].outcome == "running" and r.steps["c"].outcome == "waiting"
    assert r.work_s == pytest.approx(2)  # the running step's time is not work (yet)
    assert r.utilization["overall"]["cores_held"] == pytest.approx((10 + 3) / 20)
    assert r.floor_s == pytest.approx(10 - 0.0001)  # a so far (since it was started)
    assert r.waits["cores"]["step_s"] == pytest.approx(10)
    assert r.waits["dependency"]["step_s"] == pytest.approx(10)
    j = r.to_json()
    assert j["steps"]["a"]["end"] is None and j["steps"]["a"]["start"] == 0
    assert j["in_progress"] is True


def test_a_torn_last_line_of_a_live_stream_is_skipped(tmp_path):
    s = Stream().fleet(0, [("n1", [0], [], 100)])
    s.submit(1, [("a", [], 1, None)]).start(1, "a", "n1", [0], memory=100)
    text = "\n".join(s.lines()) + '\n{"t":3,"kind":"exi'
    (tmp_path / "events.jsonl").write_text(text)
    r = R.build(R.load(tmp_path), now=5)
    assert r.steps["a"].outcome == "running" and r.wall_s == pytest.approx(4)


def test_a_stopped_fleet_leaves_running_steps_unfinished_and_waiting_ones_not_run():
    s = Stream().fleet(0, [("n1", [0], [], 100)])
    s.submit(1, [("a", [], 1, None), ("b", [], 1, None)]).start(1, "a", "n1", [0], memory=100)
    r = R.build(s.down(7).recs, now=1000)
    assert (r.steps["a"].outcome, r.steps["b"].outcome) == ("unfinished", "not run")
    assert r.wall_s == pytest.approx(6) and not r.in_progress
    assert {p["step"]: p["outcome"] for p in r.problems} == {"a": "unfinished", "b": "not run"}


def test_failures_retries_lost_nodes_blocked_and_unrunnable_steps_are_listed_with_reasons():
    s = Stream().fleet(0, [("n1", [0], [], 100), ("n2", [1], [], 100)])
    s.submit(10, [("a", [], 1, None), ("b", [], 1, None), ("c", ["b"], 1, None), ("u", [], 1, None)])
    s.start(10, "a", "n1", [0], memory=100).start(10, "b", "n2", [1], memory=100)
    s.add(E.NodeLost(t=14, node="n1", reason="missed heartbeats"))
    s.add(E.Exit(t=14, step="a", attempt=1, outcome="lost", reason="agent missed heartbeats"))
    s.add(E.Retry(t=14, step="a", attempt=2, reason="attempt 1 lost"))
    s.add(E.Unrunnable(t=14, step="u", reason="after losing n1: needs 2 cores"))
    s.exit(15, "b", startup=1, work=4, outcome="failed", reason="exit status 3")
    s.add(E.Blocked(t=15, step="c", because="b"))
    s.start(15, "a", "n2", [1], memory=100, attempt=2).exit(18, "a", startup=1, work=2, attempt=2)
    r = R.build(s.down(19).recs)
    probs = [(p["step"], p["outcome"], p["retried"], p["reason"]) for p in r.problems]
    assert probs == [("a", "lost", True, "agent missed heartbeats"), ("u", "unrunnable", False, "after losing n1: needs 2 cores"),
                     ("b", "failed", False, "exit status 3"), ("c", "blocked", False, "dependency b did not succeed")]
    assert r.steps["a"].outcome == "succeeded" and len(r.steps["a"].attempts) == 2
    assert r.work_s == pytest.approx(4 + 2)  # the lost attempt's work is unknown: not counted
    assert r.utilization["nodes"]["n1"]["alive_s"] == pytest.approx(4)
    assert r.utilization["nodes"]["n1"]["cores_held"] == pytest.approx(1.0)
    assert any("lost attempt" in n for n in r.notes)
    # The retried step waited for its second start: cores (its own node was gone).
    assert r.steps["a"].segments and r.steps["a"].segments[0][:2] == (14, 15)


def test_a_rerun_in_the_same_run_directory_is_a_new_session_and_the_last_is_reported():
    first = two_chains().recs
    s = Stream().fleet(2000, [("n1", [0], [], 100)])
    s.submit(2010, [("a", [], 1, None)]).add(E.Skipped(t=2010, step="a")).down(2011)
    recs = first + s.recs
    assert len(R.sessions(recs)) == 2
    last = R.build(recs)
    assert (last.session, last.sessions, last.counts, last.wall_s) == (2, 2, {"skipped": 1}, 0)
    assert R.build(recs, session=1).wall_s == pytest.approx(10)
    with pytest.raises(ValueError):
        R.build(recs, session=3)


def test_fleets_that_overlap_in_one_stream_are_reported_together_with_a_note():
    a = two_chains().recs
    b = Stream().fleet(995, [("m1", [5], [], 100)]).recs
    recs = sorted(a[:-1] + b, key=lambda x: x.t) + [E.FleetDown(t=1011), E.FleetDown(t=1012)]
    assert len(R.sessions(recs)) == 1
    r = R.build(recs)
    assert not r.in_progress and any("2 fleets" in n for n in r.notes)


def test_the_json_has_the_figures_and_every_step():
    j = R.build(two_chains().recs).to_json()
    for k in ("wall_s", "work_s", "startup_s", "speedup", "floor_s", "utilization", "steps"):
        assert k in j
    assert j["startup_s"] == pytest.approx(4.5)
    assert j["steps"]["b"] == {**j["steps"]["b"], "node": "n2", "cores": 2, "start": 5, "end": 10,
                               "outcome": "succeeded", "work_s": 4.5, "startup_s": 0.5}
    json.dumps(j)  # serializable


def test_the_text_summary_names_the_figures():
    text = R.format_text(R.build(resource_waits().recs))
    for word in ("wall", "work", "speedup", "startup", "floor", "utilization", "memory", "a node that would hold it whole"):
        assert word in text, word


# --- trace ------------------------------------------------------------------------------------

def test_the_trace_has_the_required_fields_and_nested_startup_and_work_slices():
    r = R.build(two_chains().recs)
    tr = build_trace(r)
    assert validate(tr) == []
    ev = tr["traceEvents"]
    for e in ev:
        assert all(k in e for k in ("ph", "ts", "pid", "tid", "name"))
        if e["ph"] == "X":
            assert e["dur"] >= 0
    steps = [e for e in ev if e["ph"] == "X" and e["cat"] not in ("startup", "work")]
    assert sorted(e["name"] for e in steps) == ["a", "b", "c", "d"]
    b = next(e for e in steps if e["name"] == "b")
    su = next(e for e in ev if e["ph"] == "X" and e["cat"] == "startup" and e["args"]["step"] == "b")
    wk = next(e for e in ev if e["ph"] == "X" and e["cat"] == "work" and e["args"]["step"] == "b")
    assert (b["ts"], b["dur"], b["tid"]) == (5_000_000, 5_000_000, 2)
    assert (su["ts"], su["dur"], wk["ts"], wk["dur"]) == (5_000_000, 500_000, 5_500_000, 4_500_000)
    # One track per node and core slot, named.
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert sorted(names.values()) == ["core 0", "core 1", "core 2", "core 3"]
    busy = [(e["ts"], e["args"]["cores"]) for e in ev if e["ph"] == "C" and e["name"] == "busy cores" and e["pid"] == 0]
    assert busy == [(0, 2), (5_000_000, 3), (10_000_000, 0)]


def test_the_trace_validator_catches_missing_fields_bad_durations_and_improper_nesting():
    assert validate({"traceEvents": [{"ph": "X", "ts": 0, "pid": 1, "name": "a", "dur": 1}]})[0].endswith("lacks tid")
    assert "duration" in validate([{"ph": "X", "ts": 0, "pid": 1, "tid": 1, "name": "a"}])[0]
    assert "numeric args" in validate([{"ph": "C", "ts": 0, "pid": 1, "tid": 1, "name": "c", "args": {"x": "1"}}])[0]
    overlap = [{"ph": "X", "ts": 0, "pid": 1, "tid": 1, "name": "a", "dur": 10},
               {"ph": "X", "ts": 5, "pid": 1, "tid": 1, "name": "b", "dur": 10}]
    assert "without nesting" in validate(overlap)[0]
    assert validate({"nope": 1}) == ["the object has no traceEvents list"]


def test_the_trace_of_a_run_in_progress_validates_and_marks_running_slices():
    s = Stream().fleet(0, [("n1", [0, 1], [], 100)])
    s.submit(10, [("a", [], 1, None), ("b", [], 1, None)]).start(10, "a", "n1", [0]).start(10, "b", "n1", [1])
    s.exit(12, "b", 1, 1)
    tr = build_trace(R.build(s.recs, now=20))
    assert validate(tr) == []
    assert any(e["ph"] == "X" and e["name"] == "a (running)" and e["dur"] == 10_000_000 for e in tr["traceEvents"])


# --- html -------------------------------------------------------------------------------------

def test_the_html_is_self_contained_and_draws_a_bar_per_attempt_coloured_by_outcome():
    r = R.build(resource_waits().recs)
    page = render(r)
    assert not re.search(r"\b(src|href)\s*=", page)
    assert "@import" not in page and "url(" not in page and "<link" not in page and "<script" not in page
    assert page.count(COLOURS["succeeded"]) >= len(r.steps)
    assert page.count("<title>") >= len(r.steps) + 1  # hover details per bar
    assert "<svg" in page and 'id="utilization"' in page


@pytest.mark.parametrize("bad", ["failed", "out_of_memory"])
def test_the_html_of_thousands_of_steps_stays_small_and_still_shows_failures(bad):
    # (an out_of_memory ranked with timed_out and was drawn as one before 2026-12-06)
    s = Stream().fleet(0, [(f"n{k}", list(range(8 * k, 8 * k + 8)), [], 800) for k in range(4)])
    n = EXACT_BARS * 3
    s.submit(1, [(f"s{i}", [], 1, None) for i in range(n)])
    t = 1.0
    for i in range(n):
        k, c = divmod(i % 32, 8)
        s.start(t, f"s{i}", f"n{k}", [8 * k + c], memory=100)
        s.exit(t + 0.9, f"s{i}", 0.1, 0.7, outcome=bad if i == n // 2 else "succeeded")
        if i % 32 == 31:
            t += 1.0
    page = render(R.build(s.down(t + 2).recs))
    assert len(page) < 3_000_000
    assert COLOURS[bad] in page and f"shown as {bad}</title>" in page
    assert page.count("<rect") < 40_000


def test_report_command_says_when_there_is_no_stream(tmp_path):
    code, out, msgs = report_command(str(tmp_path))
    assert code == 2 and "no event stream" in msgs[0]
    two_chains().write(tmp_path / "events.jsonl")
    code, out, msgs = report_command(str(tmp_path), as_json=True, trace=str(tmp_path / "t.json"),
                                     html_file=str(tmp_path / "r.html"))
    assert code == 0 and json.loads(out)["wall_s"] == pytest.approx(10)
    assert validate(json.loads((tmp_path / "t.json").read_text())) == []
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


def test_the_stream_read_a_chunk_at_a_time_gives_the_records_line_by_line_gives(tmp_path, monkeypatch):
    from fleet.report import ingest, reading
    from fleet.wire import events as E
    lines = [json.dumps({"t": 1.0 + i, "kind": "step", "step": f"s\u00e9/{i}", "cores": 1}, ensure_ascii=False)
             for i in range(40)]  # (fleet writes ASCII; a stream by hand may not)
    lines[17] = lines[17][:25]  # a damaged line mid-stream: skipped, the rest still read
    lines.insert(30, "")        # and a blank one
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    line_by_line = list(E.read_records(path))
    with open(path, "ab") as f:  # a live run's torn last line, cut inside a character
        f.write(lines[5].encode()[:lines[5].encode().index("\u00e9".encode()) + 1])
    monkeypatch.setattr(reading, "CHUNK_BYTES", 97)  # many chunks, cut inside lines and characters
    got = ingest.load(tmp_path)
    assert got == line_by_line
    assert [r.step for r in got] == [f"s\u00e9/{i}" for i in range(40) if i != 17]


def test_a_step_cancelled_before_it_started_waits_until_its_cancel_not_to_the_end_of_the_run():
    s = Stream().fleet(90, [("n1", [0], [], 100)])
    s.submit(100, [("a", [], 1, None), ("b", [], 1, None)])
    s.start(100, "a", "n1", [0]).wait(100, "b", W.WaitReason(W.CORES, cores=1, free_cores=0))
    s.add(E.Cancelled(t=102, step="b", reason="cancelled (fleet cancel)"))
    s.exit(110, "a", 0, 10).down(111)
    r = R.build(s.recs)
    assert r.steps["b"].final == "cancelled"
    assert sum(b - a for a, b, _, _ in r.steps["b"].segments) == pytest.approx(2)  # 100 -> 102, not -> 111


def test_each_session_read_a_block_at_a_time_is_the_session_of_the_whole_list(tmp_path, monkeypatch):
    # Records before any fleet_starting, two fleets overlapping (one session), a rerun, and
    # a run still in progress: read from the file in blocks of every size that cuts them
    # differently, each session reports exactly as from the records in one list.
    from fleet.report import ingest, reading
    a = two_chains().recs
    b = Stream().fleet(995, [("m1", [5], [], 100)]).recs
    overlapped = sorted(a[:-1] + b, key=lambda x: x.t) + [E.FleetDown(t=1011), E.FleetDown(t=1012)]
    rerun = Stream().fleet(2000, [("n1", [0], [], 100)])
    rerun.submit(2010, [("a", [], 1, None)]).add(E.Skipped(t=2010, step="a")).down(2011)
    live = Stream().fleet(3000, [("n1", [0, 1], [], 100)]).submit(3001, [("x", [], 1, None)])
    live.start(3002, "x", "n1", [0])
    stray = [E.NodeLost(t=5, node="n9", reason="before any fleet")]
    stream = Stream()
    stream.written = [*stray, *overlapped, *rerun.written, *two_chains().written, *live.written]
    stream.write(tmp_path / "events.jsonl")
    recs = ingest.load(tmp_path)
    n = len(R.sessions(recs))
    assert n == 5
    whole = {k: R.build(recs, now=4000, session=k).to_json() for k in [*range(1, n + 1), *range(-n, 0)]}
    assert whole[-1]["in_progress"] and not whole[-2]["in_progress"] and whole[1]["steps"] == {}
    size = (tmp_path / "events.jsonl").stat().st_size
    for chunk in (1, 97, 700, size // 3, size):
        monkeypatch.setattr(reading, "CHUNK_BYTES", chunk)
        assert sum(1 for _ in ingest.blocks(tmp_path)) > 1 or chunk == size
        for k, want in whole.items():
            assert R.build(ingest.blocks(tmp_path), now=4000, session=k).to_json() == want, (chunk, k)
        for k in (0, n + 1, -n - 1):
            with pytest.raises(ValueError, match=f"holds {n} session"):
                R.build(ingest.blocks(tmp_path), now=4000, session=k)


def test_the_text_report_names_a_lost_node_even_past_the_first_twenty_nodes():
    nodes = [(f"n{i:04d}", [0], [], 100) for i in range(1000)]
    s = Stream().fleet(0, nodes)
    s.submit(1, [("a", [], 1, None)]).start(1, "a", "n0000", [0], memory=100).exit(3, "a", startup=1, work=1)
    s.add(E.NodeLost(t=5, node="n0500", reason="missed heartbeats"))
    text = R.format_text(R.build(s.down(9).recs))
    rows = [line for line in text.splitlines() if re.match(r"\s+n\d{4} ", line)]
    assert len(rows) == 20  # still twenty rows: the lost node takes one of them
    assert any(row.split()[0] == "n0500" and "LOST at 4.00 s: missed heartbeats" in row for row in rows), text
    assert "... and 980 more node(s) (--json has them all)" in text


def test_lost_nodes_beyond_the_rows_shown_are_counted_in_the_last_line():
    nodes = [(f"n{i:04d}", [0], [], 100) for i in range(100)]
    s = Stream().fleet(0, nodes)
    for i in range(30):
        s.add(E.NodeLost(t=5, node=f"n{3 * i:04d}", reason="missed heartbeats"))
    text = R.format_text(R.build(s.down(9).recs))
    rows = [line for line in text.splitlines() if re.match(r"\s+n\d{4} ", line)]
    assert len(rows) == 20 and all("LOST" in row for row in rows)
    assert "... and 80 more node(s), 10 of them lost (--json has them all)" in text
