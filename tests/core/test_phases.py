"""The pure core's part of steps that submit steps, wait for them and go on in stages
(fleet.core.phases), driven through the real Scheduler with fake exits."""

from __future__ import annotations

from coretools import node, suite

from fleet.core import states as S
from fleet.core.childsteps import expand
from fleet.core.scheduler import (Blocked, Cancel, Finished, Kill, NodeJoined, Scheduler, Start, StepExited, Submitted,
                                  submission)


def children_of(parent: str, *given: str, deps=None) -> Submitted:
    steps, problems = expand(parent, [{"id": g, "command": "x", **({"deps": deps[g]} if deps and g in deps else {})}
                                      for g in given], "test")
    assert not problems
    return Submitted(tuple(steps), {s.id: s.deps for s in steps}, parent=parent)


def starts(out) -> list[str]:
    return [d.step for d in out if isinstance(d, Start)]


def test_fifty_parents_of_one_core_on_two_cores_each_waiting_for_four_children_all_finish_children_first():
    sched = Scheduler()
    sched.handle(NodeJoined(node("n", 2)), 0.0)
    out = sched.handle(submission(suite(*({"id": f"p{i}"} for i in range(50))).steps), 0.0)
    running = starts(out)
    assert running == ["p0", "p1"]
    order: list[str] = []
    t = 1.0
    phase: dict[str, int] = {}
    while running:
        sid = running.pop(0)
        order.append(sid)
        start_out = []
        if "/" not in sid and phase.get(sid, 0) == 0:  # a parent's first phase: submit, then wait
            phase[sid] = 1
            start_out += sched.handle(children_of(sid, "a", "b", "c", "d"), t)
            start_out += sched.handle(StepExited(sid, 1, S.WAIT), t)
        else:
            start_out += sched.handle(StepExited(sid, 1, S.SUCCEEDED), t)
        running += starts(start_out)
        t += 1
    assert sched.finished()
    assert all(sched.state(f"p{i}") == S.SUCCEEDED for i in range(50))
    assert sched.counts() == {S.SUCCEEDED: 250}
    # p0 and p1 wait: their children run before p2 starts, and they go on before p3.
    assert max(i for i, s in enumerate(order) if s.startswith(("p0/", "p1/"))) < order.index("p2")
    assert max(i for i, s in enumerate(order) if s in ("p0", "p1")) < order.index("p3")


def test_a_resumed_parent_gets_its_phase_and_its_childrens_outcomes():
    sched = Scheduler()
    sched.handle(NodeJoined(node("n", 1)), 0.0)
    sched.handle(submission(suite({"id": "p"}).steps), 0.0)
    sched.handle(children_of("p", "a", "b", deps={"b": ["a"]}), 1.0)
    assert sched.handle(StepExited("p", 1, S.WAIT), 1.0)[0].step == "p/a"
    assert sched.state("p") == S.SUSPENDED
    assert sched.family("p") == (None, 1, "", 2, 2)
    out = sched.handle(StepExited("p/a", 1, S.FAILED, "boom"), 2.0)
    assert any(isinstance(d, Blocked) and d.step == "p/b" for d in out)
    start = next(d for d in out if isinstance(d, Start))
    assert start.step == "p" and start.attempt == 1
    assert start.resume.phase == 1 and dict(start.resume.children) == {"p/a": S.FAILED, "p/b": S.BLOCKED}


def test_next_queues_the_step_at_its_stage_restart_from_scratch_and_broken_ends_it_without_retries():
    sched = Scheduler()
    sched.handle(NodeJoined(node("n", 1)), 0.0)
    sched.handle(submission(suite({"id": "s", "retries": 3}, {"id": "after", "deps": ["s"]}).steps), 0.0)
    out = sched.handle(StepExited("s", 1, S.NEXT, stage="relax"), 1.0)
    assert (out[0].step, out[0].attempt, out[0].resume.stage, out[0].resume.phase) == ("s", 1, "relax", 1)
    out = sched.handle(StepExited("s", 1, S.FAILED), 2.0)
    retry = next(d for d in out if isinstance(d, Start))
    assert (retry.attempt, retry.resume.stage) == (2, "relax")  # a retry runs the stage again
    out = sched.handle(StepExited("s", 2, S.RESTART), 3.0)
    assert (out[0].resume.phase, out[0].resume.stage, out[0].resume.restarts) == (0, "", 1)
    out = sched.handle(StepExited("s", 2, S.BROKEN, "no convergence"), 4.0)
    assert Finished("s", 2, S.BROKEN, "no convergence") in out
    assert Blocked("after", "s") in out
    assert sched.state("s") == S.BROKEN and sched.finished()


def test_a_wait_with_every_child_final_goes_on_at_once_and_a_plain_step_starts_with_no_resume():
    sched = Scheduler()
    sched.handle(NodeJoined(node("n", 1)), 0.0)
    out = sched.handle(submission(suite({"id": "p"}).steps), 0.0)
    assert out[0].resume is None
    out = sched.handle(StepExited("p", 1, S.WAIT), 1.0)
    assert out[0].step == "p" and out[0].resume.phase == 1


def test_nested_children_run_depth_first_and_their_parents_go_on_innermost_first():
    sched = Scheduler()
    sched.handle(NodeJoined(node("n", 1)), 0.0)
    sched.handle(submission(suite({"id": "p"}, {"id": "q"}).steps), 0.0)
    sched.handle(children_of("p", "c"), 1.0)
    assert starts(sched.handle(StepExited("p", 1, S.WAIT), 1.0)) == ["p/c"]
    sched.handle(children_of("p/c", "g"), 2.0)
    assert starts(sched.handle(StepExited("p/c", 1, S.WAIT), 2.0)) == ["p/c/g"]
    assert starts(sched.handle(StepExited("p/c/g", 1, S.SUCCEEDED), 3.0)) == ["p/c"]
    assert starts(sched.handle(StepExited("p/c", 1, S.SUCCEEDED), 4.0)) == ["p"]
    assert starts(sched.handle(StepExited("p", 1, S.SUCCEEDED), 5.0)) == ["q"]


def test_a_suspended_parent_is_cancelled_with_its_children_and_a_child_problem_names_the_step_and_field():
    from fleet.core.scheduler import Cancel
    sched = Scheduler()
    sched.handle(NodeJoined(node("n", 1)), 0.0)
    sched.handle(submission(suite({"id": "p"}).steps), 0.0)
    sched.handle(children_of("p", "c"), 1.0)
    sched.handle(StepExited("p", 1, S.WAIT), 1.0)
    out = sched.handle(Cancel(("p",)), 2.0)
    assert Finished("p", 1, S.CANCELLED, "cancelled", ran=False) in out
    assert any(getattr(d, "step", None) == "p/c" and type(d).__name__ == "Kill" for d in out)  # its running child
    _, problems = expand("p", [{"id": "x", "command": "y", "cores": 0}, {"id": "z"}], "ctx.submit")
    assert {(p.step, p.field) for p in problems} == {("p/x", "cores"), ("p/z", "call")}


def test_a_parent_that_succeeds_before_its_children_end_is_final_after_them_and_then_its_dependents_start():
    sched = Scheduler()
    sched.handle(NodeJoined(node("n", 1)), 0.0)
    sched.handle(submission(suite({"id": "p"}, {"id": "after", "deps": ["p"]}).steps), 0.0)
    sched.handle(children_of("p", "a", "b"), 1.0)
    out = sched.handle(StepExited("p", 1, S.SUCCEEDED), 1.0)
    assert sched.state("p") == S.SUSPENDED and not [d for d in out if isinstance(d, Finished)]
    assert starts(out) == ["p/a"]
    out = sched.handle(StepExited("p/a", 1, S.FAILED, "boom"), 2.0)  # (it did not look: succeeded still)
    assert starts(out) == ["p/b"] and sched.state("p") == S.SUSPENDED
    out = sched.handle(StepExited("p/b", 1, S.SUCCEEDED), 3.0)
    assert [(d.step, d.outcome) for d in out if isinstance(d, Finished)] == [("p/b", S.SUCCEEDED), ("p", S.SUCCEEDED)]
    assert starts(out) == ["after"] and sched.state("p") == S.SUCCEEDED
    sched.handle(StepExited("after", 1, S.SUCCEEDED), 4.0)
    assert sched.finished() and sched.counts() == {S.SUCCEEDED: 3, S.FAILED: 1}


def test_a_step_cancelled_as_its_attempt_goes_on_to_its_next_stage_ends_cancelled_with_its_own_record():
    # (its exit record said "next": with no record of the cancel, the report showed it ready)
    sched = Scheduler()
    sched.handle(NodeJoined(node("n", 1)), 0.0)
    sched.handle(submission(suite({"id": "s"}, {"id": "after", "deps": ["s"]}).steps), 0.0)
    out = sched.handle(Cancel(("s",), "by the user"), 1.0)
    assert [d.step for d in out if isinstance(d, Kill)] == ["s"]
    out = sched.handle(StepExited("s", 1, S.NEXT, "next stage 'two'", "two"), 1.5)  # it went on as the kill came
    [fin] = [d for d in out if isinstance(d, Finished)]
    assert (fin.step, fin.outcome, fin.ran) == ("s", S.CANCELLED, False) and "next stage 'two'" in fin.reason
    assert sched.state("s") == S.CANCELLED and sched.state("after") == S.BLOCKED and not starts(out)


def test_a_childs_deps_may_name_the_steps_of_an_array_of_siblings_by_their_ids():
    steps, problems = expand("p", [{"id": "c/{i}", "array": "1-3", "command": "x"},
                                   {"id": "d/{i}", "array": "1-3", "command": "x", "deps": ["c/{i}"]},
                                   {"id": "sum", "command": "x", "deps": ["c/1", "c/3", "d/2", "first"]}], "t")
    assert not problems
    deps = {s.id: s.deps for s in steps}
    assert deps["p/d/2"] == ("p/c/2",) and deps["p/sum"] == ("p/c/1", "p/c/3", "p/d/2", "first")
    _, problems = expand("p", [{"id": "sum", "command": "x", "deps": ["c/1"]}], "t", siblings={"c/1"})
    assert not problems and _[0].deps == ("p/c/1",)  # one submitted before


def test_a_child_cannot_depend_on_its_parent_its_ancestors_or_what_waits_for_them_and_may_on_the_rest():
    sched = Scheduler()
    sched.handle(NodeJoined(node("n", 4)), 0.0)
    sched.handle(submission(suite({"id": "p"}, {"id": "after", "deps": ["p"]}, {"id": "last", "deps": ["after"]},
                                  {"id": "q"}, {"id": "free"}).steps), 0.0)
    sched.handle(children_of("q", "x", deps={"x": ["after"]}), 1.0)
    sched.handle(StepExited("q", 1, S.WAIT), 1.0)  # q waits for q/x, which waits for after, which waits for p
    sched.handle(StepExited("free", 1, S.SUCCEEDED), 1.0)
    assert sched.ends_after("p", ["p", "after", "last", "q", "free", "q/x"]) == {
        "p": "p", "after": "p", "last": "p", "q": "p", "q/x": "p"}
    sched.handle(children_of("p", "c"), 2.0)
    sched.handle(StepExited("p", 1, S.WAIT), 2.0)
    assert sched.ends_after("p/c", ["p", "last", "free"]) == {"p": "p", "last": "p"}  # p: an ancestor of p/c
    assert sched.ends_after("q/x", ["p", "free"]) == {}  # (q/x's own wait on p is not a family's)


def test_children_entered_together_share_when_they_were_entered_and_a_later_submission_comes_after_them():
    # (fleet.core.childdeps: a child may depend on its uncle entered with its branch or before it)
    sched = Scheduler()
    sched.handle(NodeJoined(node("n", 4)), 0.0)
    sched.handle(submission(suite({"id": "p"}, {"id": "q"}).steps), 0.0)
    sched.handle(children_of("p", "a", "b"), 1.0)
    sched.handle(StepExited("p", 1, S.NEXT, stage="more"), 1.0)
    sched.handle(children_of("q", "k"), 2.0)  # another parent's submission between p's two
    sched.handle(StepExited("q", 1, S.WAIT), 2.0)
    sched.handle(children_of("p", "c", "a"), 3.0)  # p/a again: entered first with p/b
    sched.handle(StepExited("p", 1, S.WAIT), 3.0)
    a, b, c = (sched.entered_at(f"p/{g}") for g in "abc")
    assert a == b < sched.entered_at("q/k") < c, (a, b, c)
    assert sched.entered_at("p") is None and sched.entered_at("nosuch") is None


def test_a_step_that_restarts_past_twenty_times_in_a_run_fails_not_retried_and_blocks_its_dependents():
    sched = Scheduler()
    sched.handle(NodeJoined(node("n", 1)), 0.0)
    sched.handle(submission(suite({"id": "s", "retries": 3}, {"id": "after", "deps": ["s"]}).steps), 0.0)
    for n in range(1, 21):  # twenty restarts: each runs again, from scratch
        out = sched.handle(StepExited("s", 1, S.RESTART), float(n))
        assert [(d.step, d.attempt, d.resume.restarts) for d in out if isinstance(d, Start)] == [("s", 1, n)]
    out = sched.handle(StepExited("s", 1, S.RESTART), 21.0)
    ends = [d for d in out if isinstance(d, Finished)]
    assert [(d.step, d.attempt, d.outcome, d.overrules) for d in ends] == [("s", 1, S.FAILED, True)]
    assert "restart again after 20 restarts in this run" in ends[0].reason and "loop" in ends[0].reason
    assert not starts(out)  # not retried, whatever its retries
    assert [d.step for d in out if isinstance(d, Blocked)] == ["after"]
    assert sched.state("s") == S.FAILED and sched.finished()


def _phase(sched, parent: str, child_ends: str, t: float) -> list:
    """One phase of a parent that submits child c and waits for it, which then ends so;
    the decisions of the child's end (the parent's Start among them)."""
    assert sched.resubmit_loop(parent, [f"{parent}/c"]) is None
    sched.handle(children_of(parent, "c"), t)
    out = sched.handle(StepExited(parent, 1, S.WAIT), t)
    assert starts(out) == [f"{parent}/c"]
    return sched.handle(StepExited(f"{parent}/c", 1, child_ends), t + 0.5)


def test_a_parent_that_submits_a_failed_child_again_past_twenty_times_in_a_run_is_a_loop_and_fails_not_retried():
    sched = Scheduler()
    sched.handle(NodeJoined(node("n", 1)), 0.0)
    sched.handle(submission(suite({"id": "p", "retries": 3}, {"id": "after", "deps": ["p"]},
                                  {"id": "q"}).steps), 0.0)
    for n in range(21):  # the child's first run, then twenty more: each submitted again after it failed
        assert starts(_phase(sched, "p", S.FAILED, float(n))) == ["p"]
    why = sched.resubmit_loop("p", ["p/x", "p/c"])
    assert why is not None and "child p/c again" in why and "without success 21 times in a row in this run" in why
    assert "a loop" in why and "at most 20 times in a row" in why and "not retried" in why
    assert sched.resubmit_loop("p", ["p/x"]) is None  # (only a submission that holds it)
    # What fleet.control.children feeds then: the parent's attempt fails, final; the child stays as it ended.
    out = sched.handle(StepExited("p", 1, S.FAILED, why, final=True), 30.0)
    assert [(d.step, d.attempt, d.outcome, d.reason) for d in out if isinstance(d, Finished)] == \
        [("p", 1, S.FAILED, why)]
    assert [d.step for d in out if isinstance(d, Blocked)] == ["after"]
    assert starts(out) == ["q"]  # not retried, whatever its retries
    assert sched.state("p") == S.FAILED and sched.state("p/c") == S.FAILED
    # Run anew (a new generation: the next `fleet run` on a live fleet), it counts from 0 again.
    sched.handle(StepExited("q", 1, S.SUCCEEDED), 31.0)
    out = sched.handle(submission(suite({"id": "p", "retries": 3}, {"id": "after", "deps": ["p"]}).steps), 32.0)
    assert starts(out) == ["p"]
    assert starts(_phase(sched, "p", S.FAILED, 33.0)) == ["p"]


def test_a_parent_that_submits_a_child_that_succeeded_again_each_phase_is_no_loop():
    sched = Scheduler()
    sched.handle(NodeJoined(node("n", 1)), 0.0)
    sched.handle(submission(suite({"id": "p"}).steps), 0.0)
    for n in range(30):  # a convergence loop: its child succeeds, and runs again in the next phase
        assert starts(_phase(sched, "p", S.SUCCEEDED, float(n))) == ["p"]
    assert sched.family("p")[1] == 30


def test_a_child_that_fails_now_and_then_in_a_long_convergence_loop_is_no_loop():
    # Twenty failures in all, but never more than four in a row: a success starts the count over.
    sched = Scheduler()
    sched.handle(NodeJoined(node("n", 1)), 0.0)
    sched.handle(submission(suite({"id": "p"}).steps), 0.0)
    for n in range(60):
        ends = S.FAILED if n % 3 else S.SUCCEEDED
        assert starts(_phase(sched, "p", ends, float(n))) == ["p"]


def test_a_running_child_submitted_again_with_a_sibling_dep_run_anew_runs_again_after_it_before_its_parent_resumes():
    # What fleet.control.children hands on for a retried parent that changed child a while
    # b ran on a's first output (before 2026-12-07 it kept b, and b's end stood).
    def kids(a_command: str) -> Submitted:
        steps, problems = expand("p", [{"id": "a", "command": a_command}, {"id": "b", "command": "b", "deps": ["a"]}],
                                 "test")
        assert not problems
        return Submitted(tuple(steps), {s.id: s.deps for s in steps}, parent="p")

    sched = Scheduler()
    sched.handle(NodeJoined(node("n", 2)), 0.0)
    assert starts(sched.handle(submission(suite({"id": "p", "retries": 1}).steps), 0.0)) == ["p"]
    assert starts(sched.handle(kids("v1"), 1.0)) == ["p/a"]  # (a core is free)
    assert starts(sched.handle(StepExited("p", 1, S.FAILED, "boom"), 1.0)) == ["p"]
    assert starts(sched.handle(StepExited("p/a", 1, S.SUCCEEDED), 2.0)) == ["p/b"]
    assert starts(sched.handle(kids("v2"), 3.0)) == []  # b is queued after its attempt; a waits for a core
    assert starts(sched.handle(StepExited("p", 2, S.WAIT), 3.0)) == ["p/a"]
    # b's attempt on a's first output ends: said, but its step is not final (a submission
    # counts its end once, the new generation's), and it waits for a's new one.
    out = sched.handle(StepExited("p/b", 1, S.SUCCEEDED), 4.0)
    assert [(d.step, d.outcome) for d in out if isinstance(d, Finished)] == [("p/b", S.SUCCEEDED)]
    assert starts(out) == [] and sched.state("p/b") == S.WAITING and sched.view("p/b").generation == 2
    assert starts(sched.handle(StepExited("p/a", 1, S.SUCCEEDED), 5.0)) == ["p/b"]
    out = sched.handle(StepExited("p/b", 1, S.SUCCEEDED), 6.0)
    [resume] = [d for d in out if isinstance(d, Start)]
    assert resume.step == "p" and dict(resume.resume.children) == {"p/a": S.SUCCEEDED, "p/b": S.SUCCEEDED}
    assert sched.view("p/a").spec.command == "v2"


def _resumed(out) -> dict:
    [start] = [d for d in out if isinstance(d, Start)]
    return dict(start.resume.children)


def test_a_parent_sees_only_the_children_of_its_run_since_phase_0_after_a_retry_a_restart_or_a_run_anew():
    # Until 2026-12-07 ctx.children listed every child the parent had ever submitted in
    # this fleet: a sweep that fails on a failed child failed on an earlier run's.
    sched = Scheduler()
    sched.handle(NodeJoined(node("n", 1)), 0.0)
    sched.handle(submission(suite({"id": "p", "retries": 2}).steps), 0.0)
    sched.handle(children_of("p", "a1"), 1.0)
    assert starts(sched.handle(StepExited("p", 1, S.FAILED, "boom"), 1.0)) == ["p/a1"]  # children run first
    assert starts(sched.handle(StepExited("p/a1", 1, S.FAILED), 2.0)) == ["p"]  # attempt 2, at phase 0
    sched.handle(children_of("p", "a2"), 3.0)
    sched.handle(StepExited("p", 2, S.WAIT), 3.0)
    assert _resumed(sched.handle(StepExited("p/a2", 1, S.SUCCEEDED), 4.0)) == {"p/a2": S.SUCCEEDED}
    # A retry of a later phase runs that phase again: with the children its run submitted.
    assert _resumed(sched.handle(StepExited("p", 2, S.FAILED), 5.0)) == {"p/a2": S.SUCCEEDED}
    # A restart starts a run: phase 0 sees none, phase 1 those submitted since.
    out = sched.handle(StepExited("p", 3, S.RESTART), 6.0)
    assert [d.resume.children for d in out if isinstance(d, Start)] == [()]
    sched.handle(children_of("p", "r1"), 7.0)
    sched.handle(StepExited("p", 3, S.WAIT), 7.0)
    assert _resumed(sched.handle(StepExited("p/r1", 1, S.SUCCEEDED), 8.0)) == {"p/r1": S.SUCCEEDED}
    sched.handle(StepExited("p", 3, S.FAILED, "bad children"), 9.0)
    # Submitted again (a live fleet's next `fleet run`): a run anew, from phase 0.
    assert starts(sched.handle(submission(suite({"id": "p"}).steps), 10.0)) == ["p"]
    sched.handle(children_of("p", "y"), 11.0)
    sched.handle(StepExited("p", 1, S.WAIT), 11.0)
    assert _resumed(sched.handle(StepExited("p/y", 1, S.SUCCEEDED), 12.0)) == {"p/y": S.SUCCEEDED}


def test_a_retried_parent_waits_for_its_earlier_runs_children_still_to_end_and_counts_them():
    sched = Scheduler()
    sched.handle(NodeJoined(node("n", 2)), 0.0)
    sched.handle(submission(suite({"id": "p", "retries": 1}).steps), 0.0)
    assert starts(sched.handle(children_of("p", "a", "b"), 1.0)) == ["p/a"]  # (a core is free)
    assert starts(sched.handle(StepExited("p", 1, S.FAILED, "boom"), 1.0)) == ["p/b"]
    assert starts(sched.handle(StepExited("p/b", 1, S.SUCCEEDED), 2.0)) == ["p"]  # attempt 2; a still runs
    sched.handle(children_of("p", "c", "d"), 3.0)
    assert starts(sched.handle(StepExited("p", 2, S.WAIT), 3.0)) == ["p/c"]
    assert sched.family("p") == (None, 1, "", 3, 3)  # a, of the first run, is waited for and counted
    assert sched.suspended(10) == [("p", 1, "", 3, 3)]
    assert starts(sched.handle(StepExited("p/c", 1, S.SUCCEEDED), 4.0)) == ["p/d"]
    assert starts(sched.handle(StepExited("p/a", 1, S.FAILED), 5.0)) == []
    assert sched.family("p") == (None, 1, "", 1, 3)  # (a ended: still one of those it waited for)
    assert _resumed(sched.handle(StepExited("p/d", 1, S.SUCCEEDED), 6.0)) == {"p/c": S.SUCCEEDED, "p/d": S.SUCCEEDED}


def test_children_a_parent_run_anew_names_again_and_the_fleet_keeps_are_in_its_new_runs_children():
    # What fleet.control.children hands on when a child is known and kept (done, or still
    # to run with the same definition): it is named, not entered again.
    sched = Scheduler()
    sched.handle(NodeJoined(node("n", 1)), 0.0)
    sched.handle(submission(suite({"id": "p"}).steps), 0.0)
    sched.handle(children_of("p", "a", "b"), 1.0)
    sched.handle(StepExited("p", 1, S.WAIT), 1.0)
    sched.handle(StepExited("p/a", 1, S.SUCCEEDED), 2.0)
    sched.handle(StepExited("p/b", 1, S.FAILED), 3.0)
    sched.handle(StepExited("p", 1, S.FAILED, "bad children"), 4.0)
    assert starts(sched.handle(submission(suite({"id": "p"}).steps), 5.0)) == ["p"]  # run anew
    b_again = children_of("p", "b")
    sched.handle(Submitted(b_again.steps, b_again.deps, parent="p", named=("p/b", "p/a")), 6.0)
    sched.handle(StepExited("p", 1, S.WAIT), 6.0)
    assert _resumed(sched.handle(StepExited("p/b", 1, S.SUCCEEDED), 7.0)) == {"p/b": S.SUCCEEDED, "p/a": S.SUCCEEDED}
    # Its next phase names a alone, kept: a submission with nothing new.
    sched.handle(Submitted((), {}, parent="p", named=("p/a",)), 8.0)
    assert _resumed(sched.handle(StepExited("p", 1, S.WAIT), 8.0)) == {"p/b": S.SUCCEEDED, "p/a": S.SUCCEEDED}
