"""Reservations and EASY backfill (fleet.core.reservations), through the real
Scheduler handlers and through `fleet simulate`'s runner."""

from __future__ import annotations

import heapq

from fleet.core import waits as W
from fleet.core.graph import build_graph
from fleet.core.scheduler import NodeJoined, Scheduler, Start, StepExited, Wait, submission
from fleet.core.simulate import pretend_nodes, simulate
from fleet.core.suite import StepSpec
from fleet.core.window import Queue, Withdraw

from coretools import node, suite  # noqa: E402


def started(decisions) -> list[str]:
    return [d.step for d in decisions if isinstance(d, Start)]


def fleet_of(cores: int, *tables, reserve_after=600.0, nodes=1):
    """A scheduler (reservations after `reserve_after`) on `nodes` nodes of `cores`,
    with these steps submitted at t=0."""
    sched = Scheduler(reserve_after)
    for i in range(nodes):
        sched.handle(NodeJoined(node(f"n{i + 1}", cores)), 0.0)
    return sched, sched.handle(submission(suite(*tables).steps), 0.0)


def narrow(i, est=10.0, **kw):
    return {"id": f"n{i}", "estimate": est, **kw}


def submit(sched, now, *tables):
    return sched.handle(submission(suite(*tables).steps), now)


def exit_(sched, step, now):
    return sched.handle(StepExited(step, 1, "succeeded"), now)


def test_a_wide_step_of_higher_priority_starts_when_the_narrow_steps_it_reserved_against_end():
    sched, out = fleet_of(4, *(narrow(i) for i in range(4)))
    assert started(out) == ["n0", "n1", "n2", "n3"]
    out = submit(sched, 1.0, {"id": "wide", "cores": 4, "priority": 1, "estimate": 5},
                 *(narrow(i) for i in range(4, 8)))
    assert started(out) == []
    # Each core that frees is held for the wide step, not given to the narrow ones behind it.
    for i, t in ((0, 10.0), (1, 10.0), (2, 10.0)):
        assert started(exit_(sched, f"n{i}", t)) == []
        assert sched.state("n4") == "ready"
    assert started(exit_(sched, "n3", 10.0)) == ["wide"]
    assert {s.node for s in sched.view("wide").placement} == {"n1"}


def test_without_reservations_the_narrow_steps_overtake_the_wide_one():
    sched, _ = fleet_of(4, *(narrow(i) for i in range(4)), reserve_after=None)
    submit(sched, 1.0, {"id": "wide", "cores": 4, "priority": 1, "estimate": 5}, *(narrow(i) for i in range(4, 8)))
    assert started(exit_(sched, "n0", 10.0)) == ["n4"]
    assert sched.state("wide") == "ready"


def test_a_short_step_backfills_onto_reserved_cores_when_it_ends_before_the_reservation():
    # n0, n1 end at 10; n2, n3 at 20: the wide step is reserved for t=20.
    sched, _ = fleet_of(4, narrow(0), narrow(1), narrow(2, 20.0), narrow(3, 20.0))
    submit(sched, 1.0, {"id": "wide", "cores": 4, "priority": 1, "estimate": 5},
           {"id": "long", "estimate": 50}, {"id": "short", "estimate": 5, "priority": 2})
    # The short one ends at 15: it borrows the core n0 frees, held for the wide step.
    assert started(exit_(sched, "n0", 10.0)) == ["short"]
    # The long step would run past t=20: it waits for the core n1 frees, and says for whom.
    assert started(exit_(sched, "n1", 10.0)) == []
    assert sched.state("long") == "ready"
    why = sched.view("long").why
    assert (why.cause, why.detail) == (W.RESERVED, "wide")
    assert "held back by a reservation for wide" in sched.view("long").wait_reason
    assert started(exit_(sched, "short", 15.0)) == []
    assert started(exit_(sched, "n2", 20.0)) == []
    assert started(exit_(sched, "n3", 20.0)) == ["wide"]


def test_a_step_with_no_estimate_does_not_backfill_onto_reserved_cores():
    sched, _ = fleet_of(4, narrow(0), narrow(1), narrow(2, 20.0), narrow(3, 20.0))
    submit(sched, 1.0, {"id": "wide", "cores": 4, "priority": 1, "estimate": 5}, {"id": "unknown", "priority": 2})
    assert started(exit_(sched, "n0", 10.0)) == []
    assert sched.view("unknown").why.cause == W.RESERVED
    exit_(sched, "n1", 10.0)
    exit_(sched, "n2", 20.0)
    assert started(exit_(sched, "n3", 20.0)) == ["wide"]
    assert started(exit_(sched, "wide", 25.0)) == ["unknown"]


def test_a_running_step_with_no_estimate_makes_the_reservation_time_unknown_so_nothing_borrows():
    sched, _ = fleet_of(2, narrow(0), {"id": "open"})  # `open` has no estimate
    submit(sched, 1.0, {"id": "wide", "cores": 2, "priority": 1, "estimate": 5}, {"id": "short", "estimate": 1})
    assert started(exit_(sched, "n0", 10.0)) == []
    assert sched.state("short") == "ready"
    assert started(exit_(sched, "open", 30.0)) == ["wide"]


def test_a_step_of_the_same_priority_gets_its_reservation_once_it_has_waited_reserve_after():
    sched, _ = fleet_of(2, narrow(0), narrow(1), reserve_after=60.0)
    submit(sched, 1.0, {"id": "wide", "cores": 2, "estimate": 5}, *(narrow(i, 100.0) for i in range(2, 12)))
    # Not yet old enough: greedy, the narrow steps take each core as it frees.
    assert started(exit_(sched, "n0", 10.0)) == ["n2"]
    assert started(exit_(sched, "n1", 10.0)) == ["n3"]
    # At t=110, older than a minute: the cores that free are held for it.
    assert started(exit_(sched, "n2", 110.0)) == []
    assert started(exit_(sched, "n3", 110.0)) == ["wide"]


def test_the_same_events_give_the_same_decisions_with_reservations():
    def run():
        sched, out = fleet_of(8, *(narrow(i, 1.0 + i % 7) for i in range(40)), nodes=2)
        log = list(out)
        log += submit(sched, 0.5, {"id": "wide", "cores": 6, "priority": 1, "estimate": 3},
                      {"id": "mid", "cores": 3, "priority": 2, "estimate": 2})
        now = 0.0
        while not sched.finished():
            now += 1.0
            for v in sched.running():
                if v.started_at + v.spec.estimate <= now:
                    log += exit_(sched, v.id, now)
        return log
    first = run()
    assert first == run()
    assert any(isinstance(d, Wait) and d.why.cause == W.RESERVED for d in first)


def test_the_issues_case_a_priority_1_wide_step_no_longer_waits_behind_300_one_core_steps():
    # Measured before: ready at 2.2 s, started at 104 s (fleet simulate, one 8-core node).
    steps = [StepSpec(id="setup", order=0, command=("x",), task="setup", workdir="s", estimate=2.2, priority=1),
             StepSpec(id="wide", order=1, command=("x",), task="wide", workdir="w", cores=8, min_cores=8,
                      estimate=5.0, priority=1, deps=("setup",))]
    steps += [StepSpec(id=f"n{i:03d}", order=2 + i, command=("x",), task="n", workdir=f"n{i}", estimate=2.75)
              for i in range(300)]
    graph, problems = build_graph(steps)
    assert not problems
    nodes = pretend_nodes(1, 8, 8 * 2**30)
    before = simulate(steps, graph, nodes, reserve_after=None)
    after = simulate(steps, graph, nodes)
    assert before.steps["wide"].start_s > 100
    # It starts as soon as the one-core steps running when it became ready end.
    assert after.steps["wide"].start_s == 2.75
    assert after.makespan_s == before.makespan_s


def test_an_old_narrow_step_gets_no_reservation_and_a_wide_one_of_higher_priority_gets_it():
    sched, _ = fleet_of(2, narrow(0, 100.0), narrow(1, 100.0), reserve_after=60.0)
    submit(sched, 1.0, narrow(2))
    # A pass after n2 is a minute old: it once got the reservation here, but nothing
    # passes it over (it takes the next free core anyway).
    submit(sched, 70.0, {"id": "later", "deps": ["n0"]})
    assert sched.reservations() == []
    submit(sched, 80.0, {"id": "wide", "cores": 2, "priority": 1, "estimate": 5})
    assert started(exit_(sched, "n0", 100.0)) == []
    assert started(exit_(sched, "n1", 100.0)) == ["wide"]
    assert sched.state("n2") == "ready"


def test_of_two_wide_steps_of_the_same_priority_the_one_ready_longest_keeps_the_reservation():
    # "early" is later in setup order but ready at once; "late" waits for "pre" first.
    # (Different widths: steps of one demand start in their own order, reserved or not.)
    sched, out = fleet_of(9, {"id": "pre", "estimate": 50}, *(narrow(i, 100.0) for i in range(12)))
    assert len(started(out)) == 9  # n8-n11 wait: the wide steps' priority is above theirs
    assert started(submit(sched, 1.0, {"id": "late", "cores": 8, "priority": 2, "estimate": 5, "deps": ["pre"]},
                          {"id": "early", "cores": 7, "priority": 2, "estimate": 5})) == []
    assert started(exit_(sched, "pre", 50.0)) == []  # "late" is ready now, and first in setup order
    for i in range(5):
        assert started(exit_(sched, f"n{i}", 100.0)) == []
    # The reservation stayed with the step that waited longest (it once went to whichever
    # failed first in the pass's order, which is setup order within a priority).
    assert started(exit_(sched, "n5", 100.0)) == ["early"]
    assert sched.state("late") == "ready"


def test_a_reservation_behind_a_step_that_overran_its_estimate_takes_a_handed_step_back_once_not_at_every_drop():
    # The corefuzz audit's ping-pong, with the defaults (window on, --reserve-after 600):
    # "overruns" was expected to end at 5; at 10 it still runs, and the one-core spanning
    # step gets a reservation on its node (a lower-priority step passes it over) whose time
    # is already past. "a", queued behind "overruns" at 0, is taken back for it. The plan
    # was dropped at every pass as past its time and made again the same, so "a" was handed
    # to the node again and taken back again at each of its Dropped, for ever.
    sched = Scheduler(window=None)
    sched.handle(NodeJoined(node("n1", 2)), 0.0)
    out = submit(sched, 0.0, {"id": "spanning", "span": True}, {"id": "overruns", "priority": 1, "estimate": 5},
                 {"id": "a"}, {"id": "low", "priority": 5}, {"id": "b"},
                 {"id": "long", "priority": 1, "estimate": 20})
    assert [(d.step, d.after) for d in out if isinstance(d, Queue)] == [("a", "overruns"), ("b", "long")]
    out = exit_(sched, "long", 10.0)
    withdrawn, now = [], 10.0
    for _ in range(20):  # the node answers each Withdraw with its Dropped, as a live one does
        withdrawn += [d for d in out if isinstance(d, Withdraw)]
        assert not any(isinstance(d, Queue) and d.step == "a" for d in out)
        if not any(isinstance(d, Withdraw) for d in out):
            break
        now += 0.01
        w = next(d for d in out if isinstance(d, Withdraw))
        out = sched.handle(StepExited(w.step, w.attempt, "cancelled", "withdrawn before it started"), now)
    assert [d.step for d in withdrawn] == ["a"]
    assert sched.state("a") == "ready" and [r.step for r in sched.reservations()] == ["spanning"]
    # The reservation is kept: the spanning step starts on the core "overruns" frees.
    assert started(exit_(sched, "overruns", 30.0)) == ["spanning"]


GIB, MIB = 2**30, 2**20


def mixed_cores_and_memory(n: int) -> list[StepSpec]:
    """Steps of distinct cores and memory: on 4 nodes of 64 cores and 256 GiB memory runs
    out first, and past reserve_after the reservations pass from step to step."""
    return [StepSpec(id=f"s{i}", order=i, command="true", estimate=1 + i % 50, cores=1 + i % 16,
                     memory=(16 + (i * 7) % 48) * GIB + i * MIB) for i in range(n)]


def test_a_step_held_back_for_one_reserved_step_then_another_gets_one_wait_record_not_one_per_holder():
    # Before 2026-12-07 each step held back got a Wait record again whenever the standing
    # reservation passed to another step: with thousands of steps of distinct demands
    # waiting, O(steps) records per reservation, 1.16M decisions for 4,000 steps
    # (benchmarks/README.md, "A ready set of distinct cores and memory").
    gib = GIB
    steps = mixed_cores_and_memory(400)
    graph, _ = build_graph(steps)
    r = simulate(steps, graph, pretend_nodes(4, 64, 256 * gib, 8), window=None, keep_log=True, reserve_after=30.0)
    assert sorted(r.steps) == sorted(s.id for s in steps)
    last: dict = {}
    held = 0
    for _, d in r.log:
        if isinstance(d, Wait):
            before = last.get(d.step)
            if d.why.cause == W.RESERVED:
                held += 1
                assert not (before is not None and before.cause == W.RESERVED and before.cores == d.why.cores), \
                    (d.step, before.text(), d.why.text())
            last[d.step] = d.why
        elif isinstance(d, Start):
            last.pop(d.step, None)
    assert held > 10  # (steps were held back: the case is there)


def test_a_held_back_steps_own_reason_names_the_reserved_step_of_its_last_try_though_no_record_says_it():
    # What `fleet status` shows (the step's reason) follows the reservation at each try;
    # only the Wait records stop repeating it (the test above).
    steps = mixed_cores_and_memory(300)
    est = {s.id: s.estimate for s in steps}
    sched = Scheduler(30.0)
    for spec in pretend_nodes(4, 64, 256 * GIB, 8):
        sched.handle(NodeJoined(spec), 0.0)
    said: dict[str, str] = {}
    ends: list = []
    moved = 0

    def act(decisions, now):
        for d in decisions:
            if isinstance(d, Start):
                heapq.heappush(ends, (now + est[d.step], d.step))
                said.pop(d.step, None)
            elif isinstance(d, Wait):
                said[d.step] = d.why.text()

    act(sched.handle(submission(steps), 0.0), 0.0)
    while ends:
        t, sid = heapq.heappop(ends)
        act(sched.handle(StepExited(sid, 1, "succeeded"), t), t)
        for step, text in said.items():
            now_says = sched.view(step).wait_reason or ""
            if now_says != text and "held back by a reservation" in now_says and "held back by a reservation" in text:
                moved += 1
    assert all(sched.state(s.id) == "succeeded" for s in steps)
    assert moved > 0  # (its reason moved on to another reserved step, with no record)
