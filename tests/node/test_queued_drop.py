"""The zygote's held launches (fleet.node.queued) when one in the middle of a chain is
dropped (taken back, cancelled): what waited for it waits for its predecessor, and its
launch says so; a launch of the dropped step that comes again, queued behind its own
former follower, never makes a cycle (the waitwindow audit: a zygote at 100% CPU in
Queued.due for ever, the fleet hung)."""

from __future__ import annotations

from fleet.node.queued import Queued
from fleet.wire import messages as P


def launch(step: str, after: str) -> P.Launch:
    return P.Launch(step=step, attempt=1, kind="call", call="m:f", args={}, command=None, cores=(0,),
                    gpus=(), memory=0, workdir="/w", log="/w/log", run_dir="/r", after=after)


def reap(q: Queued, running: set[str], step: str) -> list[str]:
    """What the zygote starts as `step` is reaped (fleet.node.zygote: _exited, launch), at
    most 10 (a cycle would start none and go on for ever)."""
    running.discard(step)
    started, due, turns = [], q.due(step), 0
    while due and turns < 10:
        turns += 1
        msg, payload = due.pop(0)
        if msg.after and (msg.after in running or q.holds(msg.after)):  # (Zygote.launch)
            q.hold(msg, payload)
        else:
            running.add(msg.step)
            started.append(msg.step)
        if msg.step not in running:  # not started: what waits for it is due now
            due += q.due(msg.step)
    assert not due, f"a cycle: still due after {turns} turns: {[(m.step, m.after) for m, _ in due]}"
    return started


def test_a_step_dropped_from_the_middle_of_a_chain_and_queued_again_behind_its_follower_runs_once_in_turn():
    q, running = Queued(), {"x"}
    q.hold(launch("a", "x"), None)
    q.hold(launch("b", "a"), None)
    assert q.drop("a", 1)  # taken back from the middle: b now waits for x
    q.hold(launch("a", "b"), None)  # queued again, behind b
    assert len(q) == 2 and q.holds("a") and q.holds("b")
    assert reap(q, running, "x") == ["b"]
    assert reap(q, running, "b") == ["a"]
    assert reap(q, running, "a") == [] and len(q) == 0


def test_the_followers_of_a_dropped_launch_name_what_it_waited_for():
    q = Queued()
    for step, after in (("a", "x"), ("b", "a"), ("c", "a")):
        q.hold(launch(step, after), None)
    assert q.drop("a", 1)
    due = q.due("x")
    assert [(m.step, m.after) for m, _ in due] == [("b", ""), ("c", "")]  # due: they wait for nothing now
    assert all(payload is None for _, payload in due)  # (the bytes received named "a": not forwarded)

