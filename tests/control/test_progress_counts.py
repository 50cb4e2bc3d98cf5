"""The counts by state a waiting client is shown (each Progress answer, as `fleet run`
follows a suite through fleet.Fleet.wait) are kept up to date as steps change state
rather than recounted per answer: they must never drift from the run's records. Real
fleet, real processes."""

from __future__ import annotations

from pathlib import Path

from fleetharness import assert_nothing_left, fleet as cli, records

from fleet.core import states as S
from fleet.wire import events as E

FINAL = S.FINAL


def suite(flag: Path) -> list[dict]:
    """Successes, a failure retried once, its dependents blocked, a plain failure; the
    flaky step succeeds once `flag` exists."""
    return [*({"id": f"ok/{i}", "command": "true"} for i in range(1, 5)),
            {"id": "flaky", "command": f"test -e {flag}", "retries": 1},
            {"id": "after", "command": "true", "deps": ["flaky"]},
            {"id": "after2", "command": "true", "deps": ["after"]},
            {"id": "bad", "command": "exit 3"}]


def follow(f, sub) -> list:
    """Every progress answer the client got until the submission finished."""
    updates: list = []
    f.wait(sub, timeout=120, on_progress=updates.append)
    return updates


def check_answers(updates: list, steps: int) -> None:
    """Each answer's counts add up to the submission's steps, and as many are in a final
    state as the rows listed as ended so far say (rows and counts come from one turn)."""
    ended: dict = {}
    for u in updates:
        for step, outcome, *_ in u.finished:
            if outcome != "retry":
                ended[step] = outcome
        assert sum(u.counts.values()) == steps, u.counts
        assert sum(n for k, n in u.counts.items() if k in FINAL) == len(ended), (u.counts, ended)


def states_from_records(run: Path, submission: int) -> dict[str, int]:
    """The submission's steps by state, recounted from events.jsonl: each step's last
    outcome record. A step the submission found already done in this fleet is skipped
    by its row but keeps its state (the success it had)."""
    state: dict[str, str] = {}
    mine: set = set()
    for r in records(run):
        if isinstance(r, E.StepDeclared) and r.submission == submission:
            mine.add(r.step)
        elif isinstance(r, E.Exit):
            state[r.step] = r.outcome
        elif isinstance(r, E.Retry):
            state[r.step] = S.READY
        elif isinstance(r, E.Blocked):
            state[r.step] = S.BLOCKED
        elif isinstance(r, E.Skipped) and state.get(r.step) != S.SUCCEEDED:
            state[r.step] = S.SKIPPED
    counts: dict[str, int] = {}
    for step in mine:
        counts[state[step]] = counts.get(state[step], 0) + 1
    return counts


def test_every_progress_answer_adds_up_and_the_final_counts_equal_the_records_also_after_a_rerun(tmp_path):
    import fleet as F
    run, flag = tmp_path / "run", tmp_path / "flag"
    cli("up", "--local", "--nodes", "2", "--run-dir", str(run), cwd=tmp_path, check=True)
    try:
        f = F.connect(run)
        first = f.submit(suite(flag), name="mix")
        updates = follow(f, first)
        check_answers(updates, first.steps)
        want = {S.SUCCEEDED: 4, S.FAILED: 2, S.BLOCKED: 2}
        assert updates[-1].counts == want == states_from_records(run, first.id), updates[-1].counts
        assert any(row[1] == "retry" for u in updates for row in u.finished)  # flaky's retry was listed

        flag.touch()  # the rerun: the successes are skipped, the rest runs again
        again = f.submit(suite(flag), name="mix")
        updates = follow(f, again)
        check_answers(updates, again.steps)
        assert updates[-1].outcomes == {**{f"ok/{i}": S.SKIPPED for i in range(1, 5)}, "flaky": S.SUCCEEDED,
                                        "after": S.SUCCEEDED, "after2": S.SUCCEEDED, "bad": S.FAILED}
        assert updates[-1].counts == {S.SUCCEEDED: 7, S.FAILED: 1} == states_from_records(run, again.id)
        # The first submission keeps its own ends: a later one's rerun of its steps is not counted in it.
        assert f.progress(first).counts == want
        assert f.down() is True
    finally:
        cli("down", "--run-dir", str(run), cwd=tmp_path)
    assert_nothing_left(run)


def test_a_failed_child_submitted_again_by_its_parent_keeps_the_answers_adding_up_to_the_steps(tmp_path):
    import fleet as F
    run, flag = tmp_path / "run", tmp_path / "flag"
    flag.touch()
    cli("up", "--local", "--nodes", "1", "--run-dir", str(run), cwd=tmp_path, check=True)
    try:
        f = F.connect(run)
        sub = f.submit([{"id": "p", "call": "children_steps:resubmits_failed", "args": {"flag": str(flag)}}])
        updates = follow(f, sub)
        # p alone, then p and its two children: never the child submitted again twice
        assert all(sum(u.counts.values()) in (1, 3) for u in updates), [u.counts for u in updates]
        assert updates[-1].counts == {S.SUCCEEDED: 3} == states_from_records(run, sub.id), updates[-1].counts
        assert dict(updates[-1].outcomes) == {"p": S.SUCCEEDED, "p/case0": S.SUCCEEDED, "p/case1": S.SUCCEEDED}
        assert f.down() is True
    finally:
        cli("down", "--run-dir", str(run), cwd=tmp_path)
    assert_nothing_left(run)


# -- in one process: the real Submissions and Scheduler, every path that changes a state ----------

def _recount(subs, sid: int) -> dict[str, int]:
    """The submission's steps by the scheduler's state now (unknown: waiting), as the
    answers were made before counts were kept."""
    counts: dict[str, int] = {}
    for step in subs.subs[sid].steps:
        try:
            st = subs.sched.state(step)
        except KeyError:
            st = S.WAITING
        counts[st] = counts.get(st, 0) + 1
    return counts


def test_kept_counts_equal_a_recount_through_queues_retries_failures_cancels_and_changed_running_steps(tmp_path):
    from fleet.control.submissions import Submissions, check
    from fleet.core.resources import NodeSpec
    from fleet.core.scheduler import (Begin, Cancel, Finished, Kill, NodeJoined, Retry, Scheduler, Start,
                                      StepExited)
    from fleet.wire import messages as P
    from fleet.wire.events import EventLog

    run, node = tmp_path / "run", NodeSpec("n0", (0, 1, 2), (), 1 << 30)
    sched = Scheduler(window=None)  # steps queued on a node ahead of time too
    subs = Submissions(run, sched, {}, EventLog(run / "events.jsonl"))
    live: dict = {}

    def act(decisions) -> None:
        for d in decisions:
            if isinstance(d, (Start, Begin)):
                live[d.step] = d.attempt
            elif isinstance(d, Finished):
                live.pop(d.step, None)
                again = any(isinstance(r, Retry) and r.step == d.step for r in decisions)
                subs.ended(d.step, d.outcome, d.attempt, d.reason, final=not again)
            elif isinstance(d, Kill):
                act(sched.handle(StepExited(d.step, d.attempt, S.CANCELLED), 1.0))

    def submit(text: str) -> int:
        path = tmp_path / f"s{len(subs.subs)}.toml"
        path.write_text(f'[suite]\nname = "k"\nrun_dir = "{run}"\n' + text)
        msg = P.Submit(str(path))
        acc = subs.register(check(msg, [node], run), msg)
        act(sched.handle(subs.enter(acc, msg, 0.0), 0.0))
        return acc.sub.id

    chain = '[[steps]]\nid = "c/{i}"\narray = "1-12"\ncommand = "%s"\nretries = 1\n' \
            '[[steps]]\nid = "d"\ncommand = "true"\ndeps = ["c/1", "c/2"]\n' \
            '[[steps]]\nid = "e"\ncommand = "true"\ndeps = ["d"]\n'
    act(sched.handle(NodeJoined(node), 0.0))
    first = submit(chain % "true")
    outcomes = [S.SUCCEEDED, S.FAILED, S.SUCCEEDED, S.TERMINATED]
    for i in range(6):  # some run out, some fail and are retried
        step = next(iter(live))
        act(sched.handle(StepExited(step, live[step], outcomes[i % 4]), 1.0 + i))
        assert subs.subs[first].counts_now() == _recount(subs, first)
    second = submit(chain % "echo changed")  # running ones change after they end; ended ones run again
    act(sched.handle(Cancel(("e",), "test"), 2.0))
    while live:
        step = next(iter(live))
        act(sched.handle(StepExited(step, live[step], S.SUCCEEDED if len(step) % 2 else S.FAILED), 3.0))
        assert subs.subs[second].counts_now() == _recount(subs, second)
        assert sum(subs.subs[first].counts_now().values()) == len(subs.subs[first].steps)
    assert sched.finished() and subs.subs[second].counts_now() == _recount(subs, second)
    assert set(subs.subs[second].counts_now()) >= {S.SUCCEEDED, S.FAILED, S.CANCELLED}, subs.subs[second].counts


def test_a_child_added_again_is_counted_once_and_waited_for_again_only_if_it_had_ended():
    from fleet.control.submissions import Submission
    sub = Submission(1, "s", ["p"], 1)
    state = {"p": S.RUNNING}
    sub.add(["p/a", "p/b"], state.get)  # new children: counted waiting, to end here
    assert (sub.steps, sub.remaining, sub.counts[S.WAITING]) == (["p", "p/a", "p/b"], 3, 3)
    state["p/a"], state["p/b"] = S.FAILED, S.RUNNING  # (as Submissions.ended and moved count them)
    sub.remaining -= 1
    sub.counts[S.WAITING] -= 2
    sub.counts[S.FAILED] += 1
    sub.counts[S.RUNNING] += 1
    sub.add(["p/a", "p/b"], state.get)  # its parent, retried, submits both again
    assert sub.steps == ["p", "p/a", "p/b"] and sub.again == {"p/a"}
    assert sub.remaining == 3  # p/a ends again here; p/b had not ended: still waited for once
    assert (sub.counts[S.FAILED], sub.counts[S.RUNNING], sub.counts[S.WAITING]) == (0, 0, 3)  # until declared
    state["p/c"] = S.SUCCEEDED
    sub.done_before(["p/c", "p/c"], state.get)  # kept from before: listed once, ended
    assert sub.steps[-1] == "p/c" and sub.steps.count("p/c") == 1 and sub.remaining == 3
    assert sub.finished == [["p/c", S.SKIPPED, 0, "already succeeded"]] and sub.counts[S.SUCCEEDED] == 1
