"""A drain of the agent socket is bounded by the messages it hands on, not by the ZeroMQ
messages that carry them (fleet.control.transport): an agent batches its reports, and
a drain of a thousand batches held the loop, and the launches it had decided, for
seconds. Real ZeroMQ sockets under CURVE."""

from __future__ import annotations

import time

import zmq

from fleet.control import transport as T
from fleet.wire import messages as P
from fleet.wire import security

BATCHES, PER_BATCH = 40, 100


def test_a_drain_hands_on_about_drain_batch_messages_however_many_each_batch_carries_then_the_rest():
    tr = T.Transport()
    ctx = zmq.Context()
    agent = ctx.socket(zmq.DEALER)
    try:
        agent.setsockopt(zmq.IDENTITY, b"node1")
        agent.setsockopt(zmq.LINGER, 0)
        k = tr.keys
        security.connect_as(agent, k.server_public, k.agent_public, k.agent_secret)
        agent.connect(tr.agent_endpoint)
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
    finally:
        agent.close(0)
        ctx.term()
        tr.close()
