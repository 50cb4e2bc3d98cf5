"""The agents table: who joined, who is alive, whose heartbeats stopped.

Agents join in whatever order the network delivers; the scheduler is told of the
nodes in one fixed (natural) order once all have joined, so that the same
allocation gives the same decisions.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Iterator

from fleet.core.names import natural_key
from fleet.core.resources import NodeSpec
from fleet.wire import events
from fleet.wire import messages as P
from fleet.wire.events import EventLog
from fleet.control import nodeclock, nodememory, wallsteps
from fleet.control.transport import Transport

log = logging.getLogger("fleet.control.coordinator")

STALL_S = 0.1  # a loop turn longer than this is a stall: not counted as the agents' silence


@dataclass
class Agent:
    node: str
    identity: bytes
    host: str
    pid: int
    last_seen: float  # time.monotonic()
    alive: bool = True
    deaf_seen: float = 0.0  # Liveness.deaf at last_seen
    memlimit: str = ""  # how its steps are held to their memory (fleet.control.nodememory)
    memory: int = 0  # bytes it offers
    memory_used: int = -1  # bytes in use on it, as its last heartbeat said (-1: not said)
    memory_noted: int = -1  # the high last recorded (-1: none yet)
    restarts: int = 0  # its zygotes restarted (fleet.control.rezygote)
    no_cores: str = ""  # why it offers no core for steps (fleet.control.nocores), "" if it offers some
    # Its wall clock against the coordinator's (fleet.control.nodeclock): seconds ahead
    # (negative: behind) where that is surely off, else 0.0; the last recorded, to within; the kept
    # sample's round trip and its time.monotonic().
    clock_ahead: float = 0.0
    clock_said: float = 0.0
    clock_said_within: float = 0.0
    clock_rtt: float = nodeclock.NO_SAMPLE
    clock_at: float = 0.0


# Heartbeats each way per second that one coordinator takes at most. Each costs it tens
# of microseconds (CURVE, ZeroMQ, the agents table): at one a second from each of
# 10,000 nodes, heartbeats alone took about 44 % of a core (benchmarks/README.md).
BEATS_PER_S = 500
TIMEOUT_BEATS = 3  # a node beating less often than asked is lost after this many periods at least


def scaled(heartbeat_s: float, timeout_s: float, nodes: int) -> tuple[float, float]:
    """The heartbeat period and the silence after which a node is lost, for `nodes`:
    as asked, unless so many nodes would beat more than BEATS_PER_S times a second;
    then every node beats less often (the allocation's size over BEATS_PER_S seconds)
    and silence is judged over at least TIMEOUT_BEATS of those periods."""
    period = max(heartbeat_s, nodes / BEATS_PER_S)
    if period == heartbeat_s:
        return heartbeat_s, timeout_s
    log.info("%d nodes: heartbeats every %.1f s, lost after %.1f s of silence (asked: %g s, %g s)", nodes,
             period, max(timeout_s, TIMEOUT_BEATS * period), heartbeat_s, timeout_s)
    return period, max(timeout_s, TIMEOUT_BEATS * period)


# Step reports (Started, Exited) an agent sends in one ZeroMQ message when they come
# close together. Each message, whatever it carries, costs the coordinator a receive,
# CURVE and a wake-up of its I/O thread: at 1,000 busy nodes, with each report its own
# message, that was most of what a full pool costs it more a step (benchmarks/README.md,
# "A full pool's extra coordinator CPU per step"). So an agent sends a report at once
# if it sent none for report_hold_s, and otherwise holds it (and what follows) until
# report_hold_s after its last send: at most 1/report_hold_s messages of reports a
# second from each node, with no wait at all for a node that reports seldom. The hold
# grows with the allocation, so that all nodes together send at most
# REPORT_MESSAGES_PER_S; a small fleet does not wait: a hold under REPORT_HOLD_MIN_S
# (fewer than 10 nodes) is none, since the agent's poll counts whole milliseconds and
# such a hold only made a 2-node fleet's no-op steps slower (benchmarks/README.md). A
# node window (fleet.core.window) keeps a node's steps starting meanwhile; what the
# hold delays is the coordinator hearing of an end: a dependent step's start, a retry,
# `fleet status`.
REPORT_MESSAGES_PER_S = 5000
REPORT_HOLD_MIN_S = 0.002
REPORT_HOLD_MAX_S = 0.5


def report_hold(nodes: int, asked: float | None = None) -> float:
    """How long an agent of a fleet of `nodes` holds step reports after a send (seconds;
    `asked`: as `fleet up --report-hold` said, else scaled with the allocation)."""
    if asked is not None:
        return max(0.0, asked)
    hold = min(REPORT_HOLD_MAX_S, nodes / REPORT_MESSAGES_PER_S)
    return hold if hold >= REPORT_HOLD_MIN_S else 0.0


REPORT_FRESH_S = 10.0  # an exit report read longer ago than this says nothing of now


class Liveness:
    """The agents of this fleet, by node name and by socket identity."""

    def __init__(self, transport: Transport, log_: EventLog, expected: int, heartbeat_s: float, timeout_s: float,
                 report_hold_s: float = 0.0):
        self.transport = transport
        self.report_hold_s = report_hold_s  # told to each agent as it joins (report_hold)
        self.events = log_
        self.expected = expected
        self.heartbeat_s = heartbeat_s
        self.timeout_s = timeout_s
        self.agents: dict[str, Agent] = {}
        self.by_identity: dict[bytes, str] = {}
        self._joining: list[NodeSpec] = []
        # The coordinator's own stalls: an agent is not lost for silence while the loop
        # was not listening (its heartbeats waited in the socket).
        self.deaf = 0.0  # seconds of loop turns longer than STALL_S (and polls that late), summed
        self.max_lag = 0.0  # the longest turn (or a poll's lateness)
        self.slow_turns = 0  # turns longer than STALL_S (and polls that returned that late)
        self.last_stall = 0.0  # the longest stall since stalled_for() was last asked
        self.beat_sent = time.monotonic()  # when the last heartbeat went to every live agent (jobend.frozen)
        self._turn_began = self._listen_began = time.monotonic()
        self._wait_s: float | None = None  # how long the loop's poll was to wait (None: not polling)
        # (read at, the step's end on its node) of the last exit report read: how far
        # behind its nodes the coordinator reads (reports wait in its socket while it is).
        self.last_report = (0.0, 0.0)
        self.wall = wallsteps.WallClock(heartbeat_s)  # this host's clock steps, for status's ages

    def polling(self, wait_ms: int) -> int:
        """The loop polls its sockets for at most wait_ms (returned, for the poll)."""
        self._wait_s = wait_ms / 1000
        return wait_ms

    def listening_ended(self) -> float:
        """The loop's poll returned: a turn begins (its time.monotonic(), returned). A
        poll that returned later than asked did not listen meanwhile either: the process
        did not run (stopped by SIGSTOP or a suspended job, starved of the CPU), a stall
        like a long turn (the poll's wait itself counted as listening)."""
        self._turn_began = time.monotonic()
        if self._wait_s is not None:
            self._stalled(self._turn_began - self._listen_began - self._wait_s)
            self._wait_s = None
        return self._turn_began

    def listening(self) -> None:
        """The loop polls again: the turn that began at listening_ended() is over."""
        self._listen_began = time.monotonic()
        self._stalled(self._listen_began - self._turn_began)

    def _stalled(self, took: float) -> None:
        self.max_lag = max(self.max_lag, took)
        if took > STALL_S:
            self.slow_turns += 1
            self.deaf += took
            self.last_stall = max(self.last_stall, took)

    def stalled_for(self) -> float:
        """The longest stretch the loop did not listen since this was last asked: its
        stalls (fleet.control.jobend.frozen), this turn's so far too."""
        took, self.last_stall = self.last_stall, 0.0
        return max(took, time.monotonic() - self._turn_began)

    def loop_figures(self, **more) -> dict:
        """The loop's lag, and how late it reads its nodes' reports (`report_age_s`: the
        last exit report read within REPORT_FRESH_S, from the step's end on its node to
        its reading; None: none read lately), for status answers."""
        read, ended = self.last_report
        age = round(max(0.0, read - ended), 3) if ended > 0 and time.time() - read <= REPORT_FRESH_S else None
        return dict(max_lag_s=round(self.max_lag, 3), turns_over_100ms=self.slow_turns,
                    stalled_s=round(self.deaf, 3), report_age_s=age, **more)

    def join(self, ident: bytes, msg: P.Join, now: float, ready: bool) -> list[NodeSpec]:
        """Welcome (or reject) an agent; the nodes the scheduler is to be told of now:
        this one once the fleet is up, every node in natural order when the last joins."""
        if msg.node in self.agents and self.agents[msg.node].alive:
            self.transport.reply(self.transport.agent_sock, ident, P.Reject(f"node {msg.node!r} already has an agent"))
            return []
        self.agents[msg.node] = Agent(msg.node, ident, msg.host, msg.pid, time.monotonic(), deaf_seen=self.deaf,
                                      memlimit=msg.memlimit, memory=int(msg.memory))
        nodeclock.joined(self.agents[msg.node], msg, now)
        self.by_identity[ident] = msg.node
        self._order = None  # in_order() sorts again
        spec = NodeSpec(msg.node, tuple(msg.cores), tuple(msg.gpus), int(msg.memory))
        self.events.write(events.NodeJoined(t=now, node=msg.node, host=msg.host, cores=list(msg.cores),
                                            gpus=list(msg.gpus), memory=msg.memory, pid=msg.pid,
                                            zygote_pid=msg.zygote_pid, memlimit=msg.memlimit,
                                            held_back=list(msg.held_back) or None))
        self.transport.reply(self.transport.agent_sock, ident, P.Welcome(msg.node, self.heartbeat_s, self.timeout_s,
                                                                       self.report_hold_s, sent=time.time()))
        if ready:
            return [spec]
        self._joining.append(spec)
        # Counting the live agents is a walk over all of them: only once enough have joined.
        if len(self._joining) < self.expected or self.alive_count() < self.expected:
            return []
        nodes = sorted(self._joining, key=lambda n: natural_key(n.name))
        self._joining.clear()
        return nodes

    def alive_count(self) -> int:
        return sum(a.alive for a in self.agents.values())

    def known(self, ident: bytes, msg) -> Agent | None:
        """The live agent that sent msg, its last_seen renewed; None (the message
        dropped) for an unknown or lost one."""
        node = self.by_identity.get(ident)
        agent = self.agents.get(node) if node else None
        if agent is None or not agent.alive:
            self.transport.warn(f"unknown:{type(msg).__name__}",
                                f"dropped {type(msg).__name__} from an unknown or lost agent")
            if agent is not None and not isinstance(msg, P.Ok):
                # A lost agent that wakes up (SIGCONT, a healed network) must stop at once:
                # its steps have been given to others.
                self.transport.reply(self.transport.agent_sock, ident, P.Shutdown(grace=0.0))
            return None
        agent.last_seen = now_m = time.monotonic()
        agent.deaf_seen = self.deaf
        if isinstance(msg, P.Heartbeat):
            nodememory.heard(agent, msg, self.events)
            if msg.echo:
                nodeclock.heard(agent, msg, time.time(), now_m, self.events)
        return agent

    def clock_ahead(self, node: str) -> float:
        """How far node's wall clock is ahead of ours where that is surely off, else 0.0
        (fleet.control.nodeclock)."""
        a = self.agents.get(node)
        return a.clock_ahead if a is not None else 0.0

    def send(self, node: str, msg) -> bool:
        """Send msg (or its encoded bytes) to the live agent on node; False if there is
        none or it cannot be reached."""
        a = self.agents.get(node)
        if a is None or not a.alive:
            return False
        return self.transport.send(a.identity, msg)

    def doubtful(self) -> bool:
        """Whether some live agent has been silent for half its timeout (counted as beat()
        counts). Only then must the caller read every waiting message before beat()
        judges: otherwise nobody can be judged lost this beat, and a read of up to ten
        thousand queued reports before the heartbeats (2-3 s of one turn at 1,000 agents,
        launches decided in the turn waiting behind it) buys nothing."""
        now_m = time.monotonic()
        this_turn = now_m - self._turn_began
        deaf = self.deaf + (this_turn if this_turn > STALL_S else 0.0)
        half = self.timeout_s / 2
        return any(a.alive and now_m - a.last_seen - (deaf - a.deaf_seen) > half for a in self.agents.values())

    def beat(self, now: float, judge: bool = True) -> Iterator[str]:
        """Heartbeat every live agent and yield, one at a time, each node whose agent
        missed heartbeats (marked lost, recorded, told to stop). The caller hands each
        to the scheduler before the next agent is looked at, as it happens. Silence is
        counted only while the loop listened (its stalls, this turn's too, are not the
        agents'), and not at all unless `judge` (the agents' messages were all read)."""
        now_m = time.monotonic()
        self.wall.look(now, now_m)
        this_turn = now_m - self._turn_began
        deaf = self.deaf + (this_turn if this_turn > STALL_S else 0.0)
        # The same bytes to every agent: their clock samples take the sends' spread as round
        # trip (fleet.control.nodeclock), a few ms at 10,000 agents.
        beat = P.encode(P.Heartbeat("coordinator", sent=time.time()))
        for a in list(self.agents.values()):
            if not a.alive:
                continue
            silent = now_m - a.last_seen - (deaf - a.deaf_seen)
            if judge and silent > self.timeout_s:
                a.alive = False
                log.error("agent on %s missed heartbeats for %.1f s: lost", a.node, silent)
                self.events.write(events.NodeLost(t=now, node=a.node, reason="missed heartbeats"))
                # Read first if it wakes up.
                self.transport.reply(self.transport.agent_sock, a.identity, P.Shutdown(grace=0.0))
                yield a.node
            else:
                self.send(a.node, beat)
        self.beat_sent = time.monotonic()

    def lose(self, node: str, now: float, reason: str) -> bool:
        """Mark a live agent lost (recorded, told to stop); False if it already was."""
        a = self.agents.get(node)
        if a is None or not a.alive:
            return False
        a.alive = False
        log.error("agent on %s: %s: lost", node, reason)
        self.events.write(events.NodeLost(t=now, node=node, reason=reason))
        self.transport.reply(self.transport.agent_sock, a.identity, P.Shutdown(grace=0.0))
        return True

    def left(self, agent: Agent, now: float, asked: bool, why: str = "the agent stopped on its own") -> bool:
        """An agent said goodbye: it is gone. Unless it was `asked` to go, its node is lost
        (recorded, and True: the caller tells the scheduler): an agent stops on its own when
        it heard nothing from the coordinator for 3/4 of the timeout (fleet.node.agent), or
        when signalled, and whatever is sent to its node from now on goes nowhere."""
        if asked:
            agent.alive = False
            return False
        return self.lose(agent.node, now, why)

    def any_alive(self) -> bool:
        return any(a.alive for a in self.agents.values())

    def in_order(self) -> list[Agent]:
        """Every agent ever joined, in natural order of node names (sorted again only
        when one joined: `fleet status` asks for it, 10,000 agents long, every time)."""
        order = getattr(self, "_order", None)
        if order is None:
            order = self._order = sorted(self.agents.values(), key=lambda a: natural_key(a.node))
        return list(order)
