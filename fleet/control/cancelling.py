"""`fleet cancel` in the coordinator: which steps a Cancel names, the scheduler event
that cancels them, and the Kill that stops one running (or takes a queued one back from
its node: a Withdraw, fleet.core.windowback).

A Cancel names steps by id, or every step not yet started (`waiting`), or every step
not yet ended (`all`). An unknown id cancels nothing: the answer names it (the client
exits 2). A step that already ended (or that another fleet runs) is named in the answer
and left alone. The scheduler (fleet.core.scheduler, the Cancel event) ends a step not
yet started at once and asks for a running one to be killed: its agent's zygote stops
it (SIGTERM, SIGKILL after the step's grace) and reports it cancelled, which ends it.
"""

from __future__ import annotations

from typing import Callable

from fleet.core import states as S
from fleet.core.deadline import DRAIN_KILL
from fleet.core.scheduler import Cancel, Kill, Scheduler, Withdraw
from fleet.wire import messages as P

REASON = "cancelled (fleet cancel)"
STOPS = (Kill, Withdraw)  # the decisions kill() sends to an agent
NOT_STARTED = (S.WAITING, S.READY, S.QUEUED)  # queued: handed to its node, not started (fleet.core.window)
HELD = NOT_STARTED + (S.SUSPENDED,)  # not running now: a parent waiting for its children too


class Cancelling:
    """Cancels for one coordinator: `send(node, msg)` reaches an agent (False if it
    cannot), `feed(event, now)` hands the scheduler an event and acts on its decisions,
    `unreachable(node, now)` is what a failed send means."""

    def __init__(self, sched: Scheduler, send: Callable[[str, object], bool], feed: Callable[[object, float], None],
                 unreachable: Callable[[str, float], None]):
        self.sched = sched
        self.send = send
        self.feed = feed
        self.unreachable = unreachable

    def asked(self, msg: P.Cancel, now: float) -> P.CancelReply:
        """Cancel what `msg` names; the answer says what that was."""
        answer = choose(self.sched, msg)
        if not msg.check and not answer.unknown and (answer.running or answer.waiting):
            self.feed(Cancel(tuple(answer.running + answer.waiting), REASON), now)
        return answer

    def kill(self, d: Kill | Withdraw, now: float) -> None:
        """Tell the agent of the step's first node to stop the attempt (its zygote holds
        the step's process group and grace), or, a Withdraw, to drop its queued launch
        if it has not started it (fleet.core.windowback)."""
        try:
            view = self.sched.view(d.step)
        except KeyError:
            return
        withdraw = type(d) is Withdraw
        if view.state not in ((S.QUEUED,) if withdraw else (S.RUNNING, S.QUEUED)) or view.attempt != d.attempt \
                or not view.placement:
            return
        node = view.placement[0].node
        grace = {} if withdraw or d.grace is None else {"grace": d.grace}  # (the drain's cut: fleet.core.deadline)
        why = "drain" if not withdraw and d.reason.startswith(DRAIN_KILL) else ""  # (for the exit's reason)
        if not self.send(node, P.Kill(d.step, d.attempt, cancel=not withdraw, withdraw=withdraw, why=why, **grace)):
            self.unreachable(node, now)


def choose(sched: Scheduler, msg: P.Cancel) -> P.CancelReply:
    """The steps `msg` names, by what they are doing now, and the ids no step has."""
    named = list(dict.fromkeys(str(s) for s in msg.steps))
    states: dict[str, str] = {}
    unknown = []
    for sid in named:
        try:
            states[sid] = sched.state(sid)
        except KeyError:
            unknown.append(sid)
    if msg.waiting or msg.all:
        wanted = NOT_STARTED + ((S.RUNNING, S.SUSPENDED) if msg.all else ())
        states.update((v.id, v.state) for v in sched.views() if v.state in wanted and v.id not in states)
    parents = [s for s, st in states.items() if st == S.SUSPENDED]
    if parents:  # a waiting parent's unfinished children end with it: the answer counts them
        for sid in sched.with_children(parents):
            if sid not in states:
                states[sid] = sched.state(sid)
    return P.CancelReply(running=[s for s, st in states.items() if st == S.RUNNING],
                         waiting=[s for s, st in states.items() if st in HELD],
                         ended=[s for s, st in states.items() if st not in HELD and st != S.RUNNING],
                         unknown=unknown)


def longest_grace(sched: Scheduler) -> float:
    """The longest grace among the running steps: how long stopping them may take."""
    return max((v.spec.grace for v in sched.running()), default=0.0)
