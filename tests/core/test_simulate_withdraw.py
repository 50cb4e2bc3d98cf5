"""`fleet simulate` answers the steps it takes back from a node (Withdraw,
fleet.core.windowback) as a live fleet's node does: the node gets a turn's Kills in one
message and answers them (Dropped) in one, which the coordinator hands the scheduler as
one Exits (fleet.control.turns), one pass for them all. Answered one by one, the first
one's pass could give the cores it freed to a later-ranked step while the others were
still queued (the simulated schedule was not the live one)."""

from __future__ import annotations

from fleet.core import states as S
from fleet.core.graph import build_graph
from fleet.core.ranks import ordered
from fleet.core.scheduler import Exits, NodeJoined, Scheduler, Start, StepExited, submission
from fleet.core.simulate import pretend_nodes, simulate
from fleet.core.window import Begin, Queue, Unqueued, Withdraw

from coretools import suite  # noqa: E402

DROPPED = "withdrawn before it started"
ORDER = "critical-then-smallest"  # "e" (3 s) comes before "b" and "c" (2 s)

# Two nodes of 3 cores. At 0: d and f fill node1 (b queued behind f, e behind d), a and g
# fill node2 (c queued behind g). At 1 "a" ends: its 2 cores free, and all three queued
# steps are taken back, b and e from node1, c from node2. node1 answers b and e together:
# e, ranked first, takes a's 2 cores, and b waits for f on node1 again; node2 then answers
# c, queued again behind g (1.5). Answered one by one, b alone took one of a's cores,
# c the other, and e waited behind d until 5.
STEPS = (dict(id="a", estimate=1, cores=2, priority=2), dict(id="b", estimate=2, cores=1, priority=4),
         dict(id="c", estimate=2, cores=1), dict(id="d", estimate=5, cores=2, priority=2),
         dict(id="e", estimate=3, cores=2), dict(id="f", estimate=4, cores=1),
         dict(id="g", estimate=1.5, cores=1))


def run(keep_log: bool = False):
    steps = suite(*(dict(t) for t in STEPS)).steps
    return simulate(steps, build_graph(steps)[0], pretend_nodes(2, 3, 6 << 30), keep_log=keep_log, window=None,
                    order=ORDER)


def starts(r) -> dict:
    return {sid: (s.nodes[0], s.start_s) for sid, s in sorted(r.steps.items())}


def test_simulate_answers_the_steps_taken_back_from_one_node_in_one_pass():
    r = run(keep_log=True)
    assert starts(r) == {"a": ("node2", 0.0), "d": ("node1", 0.0), "f": ("node1", 0.0), "g": ("node2", 0.0),
                         "e": ("node2", 1.0),  # a's 2 cores: e comes first (was behind d until 5)
                         "c": ("node2", 1.5),  # queued behind g again
                         "b": ("node1", 4.0)}  # queued behind f again (had one of a's cores)
    assert r.makespan_s == 6.0  # (8 s when answered one by one)
    at_one = [d for now, d in r.log if now == 1.0 and not isinstance(d, Withdraw)]
    # node1's answer (b and e) is one pass, then node2's (c).
    assert [(type(d).__name__, d.step) for d in at_one if isinstance(d, (Unqueued, Start, Queue))] == [
        ("Unqueued", "b"), ("Unqueued", "e"), ("Start", "e"), ("Queue", "b"), ("Unqueued", "c"), ("Queue", "c")]


def test_simulate_decides_as_the_scheduler_fed_each_nodes_answer_as_one_exits():
    """The live core's events at 1 s: a's exit, then node1's answer, then node2's, each
    one Exits (the order the Kills were sent in), give the decisions simulate logs."""
    live = ordered(Scheduler(window=None), ORDER)
    for n in pretend_nodes(2, 3, 6 << 30):
        live.handle(NodeJoined(n), 0.0)
    live.handle(submission(suite(*(dict(t) for t in STEPS)).steps), 0.0)
    decided = live.handle(StepExited("a", 1, S.SUCCEEDED), 1.0)
    withdrawn = [d for d in decided if isinstance(d, Withdraw)]
    assert [d.step for d in withdrawn] == ["b", "c", "e"]
    node_of = {d.step: live.view(d.step).placement[0].node for d in withdrawn}
    for node in ("node1", "node2"):
        decided += live.handle(Exits(tuple(StepExited(d.step, d.attempt, S.CANCELLED, DROPPED)
                                           for d in withdrawn if node_of[d.step] == node)), 1.0)
    simulated = [d for now, d in run(keep_log=True).log if now == 1.0]
    wanted = (Start, Begin, Queue, Unqueued, Withdraw)
    assert [d for d in simulated if isinstance(d, wanted)] == [d for d in decided if isinstance(d, wanted)]
