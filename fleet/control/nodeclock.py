"""How far each node's wall clock is from the coordinator's, estimated by the coordinator
from its agent's heartbeats, as NTP does.

A step's startup is its node's work_start less the coordinator's decided_at, and how
late the coordinator reads a step's end is its own read time less the node's ended_at:
each mixed two hosts' clocks. A node whose clock was an hour ahead made every startup
of it an hour (and the report's chain an hour longer); one an hour behind made `fleet
status` cry BEHIND by an hour. So the coordinator measures each node's clock against
its own, gives that node's launches their decision time on the node's clock
(fleet.control.launching: startup is then measured on one clock, as it already was for a
launch queued on its node, whose decision the node stamps when it starts it:
fleet.node.queued), and takes the difference off the node's end stamps for the lag.

The measure is NTP's: the coordinator's beat (and its Welcome) carry its time.time()
when sent, t0; the agent echoes the last it read in its own heartbeat (one at once on
its Welcome, fleet.node.clockecho), with how long it held it (its monotonic clock) and
its time.time() when it sent the heartbeat, t2; the coordinator reads that at t3. The
round trip is (t3 - t0) - held, and the node's clock is ahead of the coordinator's by
t2 - (t0 + held + t3) / 2, to within half the round trip whatever the two legs'
delays. The sample with the shortest round trip is kept, the kept one's round trip aged
by AGING a second (NTP's dispersion), so that a later sample takes over after a clock
step on either side within a few beats. Until the first (a launch to a node that
joined in the same turn), its Join's one-way stamp stands in where it is off by more
than JOIN_S.

An offset is used only when it is larger than the round trip and than TOLERANCE_S:
then the node's clock is surely off, and by about that much; a node within that (one
host's pretend nodes, clocks kept by NTP or PTP) keeps its figures exactly as measured.
The offset used is recorded (a `node_clock` record) when it is first used and whenever
it moves by more than its tolerance and the recorded one's: a handful of records a node.

Cost: per heartbeat, a few subtractions and a comparison (`heard`); per step, the
node's offset looked up and added to the launch's decision time, and subtracted from
the end stamp of its exit report.
"""

from __future__ import annotations

from fleet.wire import events
from fleet.wire import messages as P

# Under this the figures are left as measured: clocks kept by NTP agree to about a
# millisecond, and a startup is milliseconds.
TOLERANCE_S = 0.001
# How fast a kept sample's round trip ages (seconds a second): NTP's bound on a clock's
# drift is 500 ppm; this lets a sample of a 1 ms longer round trip take over in 10 s.
AGING = 1e-4
NO_SAMPLE = float("inf")
# A Join's stamp less its reading is the node's offset less the join's delay, unknown (a
# busy coordinator reads 10,000 joins late): taken only where it is off by more than this.
JOIN_S = 1.0


def joined(agent, msg: P.Join, now: float) -> None:
    """Until its first heartbeat's sample: the offset its Join's stamp tells, if surely
    off (`now`: the coordinator's time.time() as it reads it)."""
    ahead = msg.sent - now
    if msg.sent and abs(ahead) > JOIN_S:
        agent.clock_ahead = ahead  # (not recorded: its first sample is, at once)


def heard(agent, msg: P.Heartbeat, now: float, now_m: float, log: events.EventLog) -> None:
    """Take the clock sample an agent's heartbeat carries (`agent`: its
    fleet.control.liveness.Agent; `now`, `now_m`: the coordinator's time.time() and
    time.monotonic() as it reads it)."""
    rtt = now - msg.echo - msg.held
    # (negative: the coordinator's clock stepped back meanwhile; no sample)
    if rtt < 0.0 or rtt >= agent.clock_rtt + (now_m - agent.clock_at) * AGING:
        return
    agent.clock_rtt, agent.clock_at = rtt, now_m
    ahead = msg.sent - (msg.echo + msg.held + now) / 2
    within = max(TOLERANCE_S, rtt)
    agent.clock_ahead = used = ahead if abs(ahead) > within else 0.0
    # (else a closer estimate, within the two's tolerances: not worth a record)
    if abs(used - agent.clock_said) > within + agent.clock_said_within:
        agent.clock_said, agent.clock_said_within = used, within
        log.write(events.NodeClock(t=now, node=agent.node, ahead_s=round(ahead, 6), within_s=round(rtt / 2, 6),
                                   used=used != 0.0))
