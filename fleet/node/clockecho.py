"""The agent's half of the coordinator's clock measure (fleet.control.nodeclock): it
keeps the last wall-clock stamp the coordinator sent (a Welcome's, a beat's) and when it
read it, and its heartbeats echo that stamp with how long it was held and its own
time.time() when sent. The agent itself reads no offset and corrects nothing: the
figures that mix two clocks are made on the coordinator."""

from __future__ import annotations

import time

from fleet.node import memwatch
from fleet.wire import messages as P


class Echo:
    """The last coordinator stamp read, for the next heartbeat."""

    __slots__ = ("stamp", "read_at")

    def __init__(self):
        self.stamp = 0.0  # the coordinator's time.time() when it sent it (0.0: none yet)
        self.read_at = 0.0  # our time.monotonic() when we read it

    def read(self, stamp: float, read_at: float) -> None:
        """A Welcome or a beat with the coordinator's `stamp`, read at `read_at`
        (time.monotonic())."""
        if stamp:
            self.stamp, self.read_at = stamp, read_at

    def beat(self, node: str, memory_used: int) -> P.Heartbeat:
        """The heartbeat to send now."""
        if not self.stamp:
            return P.Heartbeat(node, memory_used=memory_used, sent=time.time())
        held = time.monotonic() - self.read_at
        return P.Heartbeat(node, memory_used=memory_used, sent=time.time(), echo=self.stamp, held=held)


def welcomed(agent, msg: P.Welcome) -> None:
    """The coordinator welcomed `agent` (fleet.node.agent.Agent): its periods from now
    on, and a heartbeat at once, so that the coordinator has its clock before the first
    report of a step of this node."""
    agent.heartbeat_s = msg.heartbeat_s
    agent.hold_s = msg.report_hold_s
    agent.timeout_s = agent.fence_s
    agent.clock.read(msg.sent, agent.last_heard)
    agent.send(agent.clock.beat(agent.node, memwatch.node_used(getattr(agent.args, "memory", 0))))
