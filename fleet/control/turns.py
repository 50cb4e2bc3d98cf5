"""A loop turn's exits go to the scheduler together: one scheduling pass for all of
them, not one per exit (fleet.core.decisions.Exits).

While the coordinator drains its agents' messages it does not act on what they
report: their events wait in the inbox (in the order they came) and the loop hands
them over after the batch. There, consecutive StepExited events become one Exits
event: the scheduler applies each exit as it would alone and then places what they
freed in one pass. The decisions are the same function of the same events as ever
(the core stays pure and deterministic); only the batch is the loop turn's.
"""

from __future__ import annotations

from collections import deque

from fleet.core.decisions import Exits, StepExited

# Exits in one event at most (a pass over more gains nothing; the turn's budget still
# bounds how much of the decisions is acted on before the sockets are looked at again).
MOST = 4096


def take(inbox: deque) -> tuple:
    """The inbox's next (event, time): consecutive exits at its head as one Exits,
    timed at the last of them (a lone exit stays a StepExited)."""
    event, now = inbox.popleft()
    if type(event) is not StepExited or not inbox or type(inbox[0][0]) is not StepExited:
        return event, now
    exits = [event]
    while inbox and type(inbox[0][0]) is StepExited and len(exits) < MOST:
        ev, now = inbox.popleft()
        exits.append(ev)
    return Exits(tuple(exits)), now
