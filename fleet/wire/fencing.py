"""The fence: when a node cut off from its coordinator has stopped its steps, and so
when the coordinator may run them elsewhere (fleet.core.fencing). Both sides read it
from here, so that they cannot disagree.

The agent stops its steps on its own once it has heard nothing from the coordinator
for FENCE_SHARE of the heartbeat timeout (it wakes at that moment, not at its next
heartbeat): SIGTERM to each step's process group, SIGKILL STOP_GRACE_S later at most.
So it has stopped them by (the last time it heard the coordinator) + fence + grace.

The coordinator cannot know when the agent last heard it, only that it sent nothing
to it after declaring it lost but Shutdown(grace=0), which stops the steps at once
where it arrives. So the agent heard it last at the loss at the latest, and its steps
are stopped by loss + fence + grace; a heartbeat more is the slack for delivery and
for the stop itself (the processes' ends, a loaded node). relaunch_after() is that.
"""

from __future__ import annotations

FENCE_SHARE = 0.75  # of the heartbeat timeout, without word from the coordinator
STOP_GRACE_S = 2.0  # an agent stopping on its own gives its steps at most this, then SIGKILL
# In the `error` of an exit its agent relays after stopping the step at its fence (the
# coordinator silent: fleet.node.jobend.unheard): the stop was the agent's, not the step's
# failure; the coordinator drains first if that agent was its last (fleet.control.jobend).
UNHEARD = "its agent stopped it: no word from the coordinator"


def fence_s(timeout_s: float) -> float:
    """Seconds without word from the coordinator after which an agent stops its steps."""
    return FENCE_SHARE * timeout_s


def relaunch_after(heartbeat_s: float, timeout_s: float) -> float:
    """Seconds from a node's loss (for silence, or unreachable) until its steps may run
    elsewhere: its agent's fence and grace, and a heartbeat of slack."""
    return fence_s(timeout_s) + STOP_GRACE_S + heartbeat_s
