"""A drain of the agent socket is bounded by the messages it hands on, not by the ZeroMQ
messages that carry them (fleet.control.transport): an agent batches its reports, and
a drain of a thousand batches held the loop, and the launches it had decided, for
seconds. Real ZeroMQ sockets under CURVE."""

from __future__ import annotations

import contextlib
import time

import zmq

from fleet.control import transport as T
from fleet.wire import messages as P
from fleet.wire import security

BATCHES, PER_BATCH = 40, 100


@contextlib.contextmanager
def transport_and_agent():
    """A coordinator's Transport and an agent's DEALER connected to it under CURVE."""
    tr = T.Transport()
    ctx = zmq.Context()
    agent = ctx.socket(zmq.DEALER)
    try:
        agent.setsockopt(zmq.IDENTITY, b"node1")
        agent.setsockopt(zmq.LINGER, 0)
        k = tr.keys
        security.connect_as(agent, k.server_public, k.agent_public, k.agent_secret)
        agent.connect(tr.agent_endpoint)
        yield tr, agent
    finally:
        agent.close(0)
        ctx.term()
        tr.close()


def test_a_drain_hands_on_about_drain_batch_messages_however_many_each_batch_carries_then_the_rest():
    with transport_and_agent() as (tr, agent):
        frame = P.encode(P.Started("s/1", 1, 7, 7, 1.0))
        for _ in range(BATCHES):
            agent.send_multipart([frame] * PER_BATCH)
        got: list = []
        handler = lambda ident, msg: got.append((ident, msg))  # noqa: E731
        deadline = time.monotonic() + 60
        while not got and time.monotonic() < deadline:  # the first batch arrives (CURVE handshake first)
            tr.agent_sock.poll(100)
            tr.drain(tr.agent_sock, handler, None)
        assert got, "nothing arrived"
        total = BATCHES * PER_BATCH
        drains = [len(got)]
        while len(got) < total and time.monotonic() < deadline:
            before = len(got)
            tr.agent_sock.poll(100)
            tr.drain(tr.agent_sock, handler, None)
            drains.append(len(got) - before)
        assert len(got) == total and all(m == P.Started("s/1", 1, 7, 7, 1.0) and i == b"node1" for i, m in got)
        # Each drain stops once it has handed on DRAIN_BATCH (the last batch taken whole).
        assert max(drains) <= T.DRAIN_BATCH + PER_BATCH - 1, drains
        assert len([d for d in drains if d]) >= total // (T.DRAIN_BATCH + PER_BATCH), drains


def test_a_drain_also_stops_at_its_deadline_when_each_message_is_costly_then_takes_the_rest():
    # A node's goodbye ends every step it ran: a handler that takes 20 ms a message stands
    # for it. With a deadline 0.1 s away each drain stops after the message that passes
    # it, well before DRAIN_BATCH; nothing is lost and the order is kept.
    with transport_and_agent() as (tr, agent):
        total = 30
        for i in range(total):
            agent.send(P.encode(P.Started(f"s/{i}", 1, 7, 7, 1.0)))
        got: list = []

        def costly(ident, msg):
            got.append(msg.step)
            time.sleep(0.02)

        deadline = time.monotonic() + 60
        drains, spans = [], []
        while len(got) < total and time.monotonic() < deadline:
            tr.agent_sock.poll(100)
            before, t0 = len(got), time.monotonic()
            tr.drain(tr.agent_sock, costly, None, until=t0 + 0.1)
            if len(got) > before:
                drains.append(len(got) - before)
                spans.append(time.monotonic() - t0)
        assert got == [f"s/{i}" for i in range(total)]
        assert len(drains) >= 3 and max(drains) < total, drains  # several drains, none took them all
        # Each stopped at the first message after its deadline (a slow machine may take longer for one).
        assert max(drains) <= 0.1 / 0.02 + 2, (drains, spans)
