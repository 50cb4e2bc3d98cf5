"""Reservations planned ahead (fleet.core.lookahead, `--reserve-ahead`), through the
real Scheduler handlers: a wide step whose last dependency runs has its cores drained
while that one runs, and starts the moment it is ready."""

from __future__ import annotations

from fleet.core.lookahead import Lookahead, ahead
from fleet.core.scheduler import Cancel, NodeJoined, NodeLost, Scheduler, Start, StepExited, submission

from coretools import node, suite  # noqa: E402


def started(decisions) -> list[str]:
    return [d.step for d in decisions if isinstance(d, Start)]


def fleet_of(n_ahead: int, *tables, nodes=1, cores=8):
    """A scheduler (reservations after 600 s, `n_ahead` planned ahead) on `nodes` nodes."""
    sched = ahead(Scheduler(600.0), n_ahead)
    for i in range(nodes):
        sched.handle(NodeJoined(node(f"n{i + 1}", cores)), 0.0)
    return sched, sched.handle(submission(suite(*tables).steps), 0.0)


def narrow(i, est=10.0, **kw):
    return {"id": f"s{i}", "estimate": est, **kw}


def exit_(sched, step, now, outcome="succeeded"):
    return sched.handle(StepExited(step, 1, outcome), now)


# "a" (one core, 20 s) and seven narrow steps fill the 8-core node at t=0; "wide" needs
# all 8 cores after "a". More narrow steps of 10 s keep coming.
BASE = ({"id": "a", "estimate": 20}, {"id": "wide", "cores": 8, "estimate": 5, "deps": ["a"]},
        *(narrow(i) for i in range(7)))


def more(sched, now, first, n=8, est=10.0):
    return sched.handle(submission(suite(*(narrow(i, est) for i in range(first, first + n))).steps), now)


def test_a_wide_step_whose_dependency_runs_starts_at_its_end_while_narrow_steps_keep_arriving():
    for n_ahead, wide_at in ((0, None), (1, 20.0)):
        sched, out = fleet_of(n_ahead, *BASE)
        assert started(out) == ["a"] + [f"s{i}" for i in range(7)]
        more(sched, 5.0, 7)
        for i in range(7):  # each core freed at t=10 goes to a narrow step that ends by t=20
            assert len(started(exit_(sched, f"s{i}", 10.0))) == 1
        more(sched, 15.0, 15, n=16)
        out = exit_(sched, "a", 20.0)
        for i in range(7, 14):
            out += exit_(sched, f"s{i}", 20.0)
        if wide_at is None:  # ordinary reservations: not old enough for one, the narrow steps take the cores
            assert "wide" not in started(out) and sched.state("wide") == "ready"
        else:
            assert started(out)[-1] == "wide" and sched.view("wide").started_at == wide_at
            assert len(started(out)) == 1  # nothing took the cores "wide" was waiting for


def test_backfill_borrows_the_held_cores_only_with_a_step_that_ends_by_the_expected_ready_time():
    sched, _ = fleet_of(1, *BASE)
    more(sched, 5.0, 7, n=2, est=30.0)  # s7, s8: 30 s, would end past t=20
    # s9: 8 s (its memory declared: another class of demand, not queued behind s7)
    sched.handle(submission(suite(narrow(9, 8.0, memory="512MiB")).steps), 6.0)
    # At t=10 the plan is made and s0's core held; s9 (ends at 18) borrows it.
    assert started(exit_(sched, "s0", 10.0)) == ["s9"]
    # s1's core is held: the 30-s steps would still run at t=20.
    assert started(exit_(sched, "s1", 10.0)) == []
    assert sched.state("s7") == "ready"


def test_a_dependency_running_past_its_estimate_drops_the_plan_and_the_held_cores_go_to_others():
    sched, _ = fleet_of(1, *BASE)
    more(sched, 5.0, 7, n=4, est=100.0)
    for i in range(7):
        exit_(sched, f"s{i}", 10.0)  # held for "wide" (expected ready at 20): nothing starts
    assert sched.running_count() == 1
    # "a" is still running at t=21: its estimate was wrong; the holds are given back.
    out = sched.handle(submission(suite(narrow(20, 1.0)).steps), 21.0)
    assert len(started(out)) == 5 and sched.state("wide") == "waiting"
    assert isinstance(sched._res, Lookahead) and "wide" in sched._res.spoilt and not sched._res.plans
    # Not planned ahead again: once ready it is an ordinary step.
    exit_(sched, "s20", 22.0)
    assert not sched._res.plans
    out = exit_(sched, "a", 40.0)
    assert sched.state("wide") == "ready" and "wide" not in started(out)


def test_cancelling_the_step_planned_for_gives_its_held_cores_back():
    sched, _ = fleet_of(1, *BASE)
    more(sched, 5.0, 7, n=7, est=100.0)
    for i in range(7):
        exit_(sched, f"s{i}", 10.0)
    assert sched.running_count() == 1
    out = sched.handle(Cancel(("wide",)), 11.0)
    assert len(started(out)) == 7


def test_losing_a_node_drops_the_plan():
    sched, _ = fleet_of(1, *BASE, {"id": "other", "cores": 8, "estimate": 50}, nodes=2)
    more(sched, 5.0, 7, n=14, est=100.0)
    for i in range(7):
        exit_(sched, f"s{i}", 10.0)
    assert sched._res.plans
    sched.handle(NodeLost("n2"), 12.0)
    assert not sched._res.plans


def test_a_dependency_with_no_estimate_makes_no_plan():
    sched, _ = fleet_of(1, {"id": "a"}, *BASE[1:])
    more(sched, 5.0, 7, est=5.0)
    assert len(started(exit_(sched, "s0", 10.0))) == 1  # its core is not held
    assert not sched._res.plans


def test_the_same_events_give_the_same_decisions_with_plans_ahead():
    def run():
        tables = [{"id": f"p{j}", "estimate": 3.0 + j} for j in range(6)]
        tables += [{"id": f"w{j}", "cores": 6, "estimate": 4.0, "deps": [f"p{j}", f"p{(j + 1) % 6}"]}
                   for j in range(6)]
        tables += [narrow(i, 1.0 + i % 7) for i in range(60)]
        sched, out = fleet_of(2, *tables, nodes=2)
        log, now = list(out), 0.0
        while not sched.finished():
            now += 1.0
            for v in sched.running():
                if v.started_at + v.spec.estimate <= now:
                    log += exit_(sched, v.id, now)
        return log, sched._res
    first, res = run()
    assert first == run()[0]
    assert isinstance(res, Lookahead)


def test_no_plan_is_made_while_a_ready_wide_step_waits_and_a_deferred_step_is_never_planned():
    # "ready8" (8 cores) is ready and blocked behind the narrow steps: it goes first.
    sched, _ = fleet_of(1, *BASE, {"id": "ready8", "cores": 8, "estimate": 5})
    more(sched, 5.0, 7)
    assert len(started(exit_(sched, "s0", 10.0))) == 1 and not sched._res.plans
    from fleet.core.ranks import ordered
    deferring = ahead(ordered(Scheduler(600.0), "defer-widest"), 1)
    assert deferring._res._deferred is deferring.ranks.deferral.steps
