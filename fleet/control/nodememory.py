"""Each node's memory in use, from its agent's heartbeats: shown by `fleet status`, and
recorded (a `node_memory` event) once, then each time it passes the last recorded by a
sixteenth of the node's memory, so that the report can say (to within that) how much a
node really used beside what its steps held, at a handful of records per node whatever
the run's length."""

from __future__ import annotations

import time

from fleet.wire import events
from fleet.wire import messages as P

STEP = 16  # a new high is recorded once it passes the last by memory / STEP


def heard(agent, msg: P.Heartbeat, log: events.EventLog) -> None:
    """Take the memory in use a heartbeat carries (fleet.control.liveness.Agent ``agent``)."""
    if msg.memory_used < 0:
        return
    agent.memory_used = msg.memory_used
    if agent.memory_noted < 0 or msg.memory_used > agent.memory_noted + max(agent.memory, 1) // STEP:
        agent.memory_noted = msg.memory_used
        log.write(events.NodeMemory(t=time.time(), node=agent.node, used=msg.memory_used))
