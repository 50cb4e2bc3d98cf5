"""The agent as a relay: a real Agent between a ZeroMQ ROUTER standing in for the
coordinator and a pair of pipes standing in for its zygote.

What the test reads from the request pipe is exactly what a zygote would read, and
what it writes to the reply pipe is exactly what a zygote would write.
"""

from __future__ import annotations

import os
import struct
import time
from argparse import Namespace

import msgpack
import pytest
import zmq

from fleet.node.agent import Agent
from fleet.wire import framing
from fleet.wire import messages as P

TIMEOUT = 10.0


class Relay:
    """An Agent, the coordinator's end of its socket, and the zygote's ends of its pipes."""

    def __init__(self):
        self.ctx = zmq.Context()
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.req_r, req_w = os.pipe()
        rep_r, self.rep_w = os.pipe()
        os.set_blocking(self.req_r, False)
        args = Namespace(node="node7", connect=f"tcp://127.0.0.1:{port}", curve="",
                         heartbeat=1.0, join_timeout=TIMEOUT, fence=TIMEOUT)
        hello = P.Hello(pid=os.getpid(), threads=1, preload=(), import_s=0.0)
        self.agent = Agent(args, None, req_w, rep_r, hello)
        self.agent.join([0, 1], [], 1 << 30)
        self.ident, join = self.from_agent()
        said = P.decode(join)
        assert said == P.Join(node="node7", host=said.host, cores=[0, 1], gpus=[], memory=1 << 30, pid=os.getpid(),
                              zygote_pid=os.getpid(), preload=[], memlimit="none", sent=said.sent)
        assert abs(said.sent - time.time()) < 60  # its clock, for the coordinator's (fleet.control.nodeclock)

    def to_agent(self, payload: bytes) -> None:
        """Send as the coordinator does, and let the agent handle what arrived."""
        self.router.send_multipart([self.ident, payload])
        assert self.agent.sock.poll(int(TIMEOUT * 1000)), "the agent never received it"
        self.agent._drain_coordinator()

    def from_agent(self) -> tuple[bytes, bytes]:
        ident, *payloads = self.batch_from_agent()
        assert len(payloads) == 1, payloads
        return ident, payloads[0]

    def batch_from_agent(self) -> list[bytes]:
        """The agent's next ZeroMQ message: its identity, then one message a frame."""
        assert self.router.poll(int(TIMEOUT * 1000)), "nothing from the agent"
        return self.router.recv_multipart()

    def zygote_frame(self) -> bytes | None:
        """The payload of the next frame on the request pipe, None if there is none."""
        try:
            header = os.read(self.req_r, 4)
        except BlockingIOError:
            return None
        (length,) = struct.unpack(">I", header)
        return os.read(self.req_r, length)

    def close(self) -> None:
        self.agent.sock.close(0)
        self.agent.ctx.term()
        self.router.close(0)
        self.ctx.term()
        for fd in (self.req_r, self.agent.req_w, self.agent.rep_r, self.rep_w):
            os.close(fd)


@pytest.fixture
def relay():
    r = Relay()
    yield r
    r.close()


def coordinators_launch(**kw) -> P.Launch:
    """A Launch as the coordinator builds it: lists, not tuples."""
    fields = dict(step="a/1", attempt=2, kind="call", call="steps:record", args={"x": [1, 2], "y": {"z": None}},
                  command=None, cores=[0, 1], gpus=[], memory=1 << 20, workdir="/w", log="/w/log",
                  run_dir="/r", inputs=["/r/in"], outputs=[], placement=[["node7", [0, 1], [], 1 << 20]],
                  decided_at=time.time(), env={"FLEET_STEP": "a/1"}, gpu_vars=["CUDA_VISIBLE_DEVICES"])
    return P.Launch(**{**fields, **kw})


def test_a_launch_reaches_the_zygote_as_the_very_bytes_the_coordinator_sent(relay):
    sent = P.encode(coordinators_launch())
    relay.to_agent(sent)
    received = relay.zygote_frame()
    assert received == sent
    assert framing.decode(received) == P.decode(sent)
    assert relay.zygote_frame() is None  # one frame, nothing else


def test_a_kill_reaches_the_zygote_as_the_very_bytes_the_coordinator_sent(relay):
    sent = P.encode(P.Kill("a/1", 2, 15))
    relay.to_agent(sent)
    assert relay.zygote_frame() == sent


def test_the_zygotes_started_and_exited_reach_the_coordinator_as_the_very_bytes_the_zygote_sent(relay):
    started = P.encode(P.Started("a/1", 2, pid=4242, pgid=4242, at=time.time()))
    exited = P.encode(P.Exited(
        step="a/1", attempt=2, pid=4242, outcome="failed", returncode=3, signal=None, decided_at=1.0,
        first_at=2.0, work_start=3.0, work_end=4.0, ended_at=5.0, utime=0.5, stime=0.25, maxrss_kb=1000,
        affinity=(0, 1), placement_ok=True, error="exit status 3"))
    os.write(relay.rep_w, framing.frame_payload(started))
    relay.agent._from_zygote(os.read(relay.agent.rep_r, 1 << 16))
    assert relay.from_agent() == (relay.ident, started)
    assert relay.agent.pgids == {("a/1", 2): 4242}  # what it needs to stop the step itself
    os.write(relay.rep_w, framing.frame_payload(exited))
    relay.agent._from_zygote(os.read(relay.agent.rep_r, 1 << 16))
    assert relay.from_agent() == (relay.ident, exited)
    assert relay.agent.pgids == {}


def test_a_launch_with_an_unknown_field_is_dropped_by_the_agent_and_never_reaches_the_zygote(relay, capfd):
    body = {"v": P.VERSION, "type": "launch", **coordinators_launch().__dict__}  # as a map (sent by shape)
    relay.to_agent(msgpack.packb({**body, "colour": "red"}))
    assert relay.zygote_frame() is None
    assert "dropped a malformed message: launch: unknown fields ['colour']" in capfd.readouterr().err
    relay.to_agent(msgpack.packb({**body, "cores": "0,1"}))  # the same type checks as the zygote's
    assert relay.zygote_frame() is None
    assert "field 'cores' is not a tuple" in capfd.readouterr().err
    good = P.encode(coordinators_launch())
    relay.to_agent(good)
    assert relay.zygote_frame() == good


def test_a_report_with_an_unknown_field_from_the_zygote_is_dropped_and_not_relayed(relay, capfd):
    body = {"v": P.VERSION, "type": "started", **P.Started("a/1", 2, pid=1, pgid=1, at=0.0).__dict__}
    os.write(relay.rep_w, framing.frame_payload(msgpack.packb({**body, "node": "node7"})))
    relay.agent._from_zygote(os.read(relay.agent.rep_r, 1 << 16))
    assert not relay.router.poll(200)
    assert "dropped a malformed message from the zygote: started: unknown fields ['node']" in capfd.readouterr().err


def test_what_the_zygote_reports_in_one_turn_reaches_the_coordinator_as_one_message_of_one_frame_each(relay):
    exited = P.encode(P.Exited(
        step="a/1", attempt=2, pid=4242, outcome="succeeded", returncode=0, signal=None, decided_at=1.0,
        first_at=2.0, work_start=3.0, work_end=4.0, ended_at=5.0, utime=0.5, stime=0.25, maxrss_kb=1000,
        affinity=(0, 1), placement_ok=True, error=None))
    started = P.encode(P.Started("b/1", 1, pid=4243, pgid=4243, at=time.time()))
    dropped = P.encode(P.Dropped("c/1", 1, "cancelled before it started"))
    os.write(relay.rep_w, b"".join(framing.frame_payload(p) for p in (exited, started, dropped)))
    relay.agent._from_zygote(os.read(relay.agent.rep_r, 1 << 16))
    assert relay.batch_from_agent() == [relay.ident, exited, started, dropped]


def test_the_coordinators_batch_reaches_the_zygote_in_order_as_the_very_bytes_sent(relay):
    first = P.encode(coordinators_launch(step="a/1"))
    second = P.encode(coordinators_launch(step="b/1", after="a/1"))
    kill = P.encode(P.Kill("b/1", 2, cancel=True))
    relay.router.send_multipart([relay.ident, first, second, kill])
    assert relay.agent.sock.poll(int(TIMEOUT * 1000))
    relay.agent._drain_coordinator()
    assert [relay.zygote_frame() for _ in range(4)] == [first, second, kill, None]


def test_a_launch_the_zygote_can_no_longer_read_leaves_the_agent_running_to_judge_the_zygotes_death(relay):
    # (Before 2026-12-06 the write's EPIPE stopped the agent, "the zygote is gone", when it
    # came in the loop turn before the pipe's end of file: the node left the fleet rather
    # than getting a new zygote: fleet.node.zygotewatch.)
    os.close(relay.req_r)
    relay.req_r = os.open(os.devnull, os.O_RDONLY)  # (closed by the fixture)
    relay.to_agent(P.encode(coordinators_launch()))
    assert relay.agent.stopping is None
    assert relay.agent.watch.ended({})  # this turn's look at the zygote: a new one, or why not
    assert ("a/1", 2) in relay.agent.graces  # it ends with the zygote's steps (fleet.node.rezygote.end_steps)


def test_the_agent_wakes_at_its_fence_not_at_its_next_heartbeat(relay):
    # The coordinator runs a silent node's steps elsewhere once the node must have stopped
    # them (fleet.wire.fencing): the agent's own stop may not wait for its next beat.
    relay.to_agent(P.encode(P.Welcome("node7", 60.0, 80.0, 0.0)))  # a beat a minute; its fence: 10 s
    now = time.monotonic()
    assert relay.agent._wait(now, now + 60.0) <= relay.agent.last_heard + TIMEOUT - now


def test_a_welcome_is_answered_at_once_by_a_heartbeat_that_echoes_the_coordinators_clock_stamp(relay):
    relay.to_agent(P.encode(P.Welcome("node7", 1.0, TIMEOUT, sent=1234.5)))
    _, beat = relay.from_agent()
    said = P.decode(beat)
    # what the coordinator needs to tell this node's clock from its own (fleet.control.nodeclock)
    assert isinstance(said, P.Heartbeat) and said.echo == 1234.5 and 0.0 <= said.held < TIMEOUT
    assert abs(said.sent - time.time()) < 60
