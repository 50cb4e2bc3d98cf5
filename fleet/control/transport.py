"""The coordinator's two ROUTER sockets (agents, clients), both under CURVE.

Draining is bounded per call so one busy socket cannot starve the other. An agent
may send several messages as one ZeroMQ message of several frames, one message per
frame (fleet.wire.framing, "Batches"); what the coordinator sends an agent in one loop
turn goes the same way, in order, when the loop calls flush(). What
cannot be used (wrong frame count, undecodable, a handler that raised) is dropped
and counted by kind; the first of each kind is logged, the rest only counted, so
garbage neither floods the log nor grows memory.
"""

from __future__ import annotations

import logging
import socket
import time
from typing import Callable

import zmq

from fleet.wire import framesize
from fleet.wire import messages as P
from fleet.wire import security

# One log for the coordinator, whichever of its parts speaks.
log = logging.getLogger("fleet.control.coordinator")

AGENT_BACKLOG = 8192  # connections waiting to be accepted (the kernel caps it at net.core.somaxconn)
DRAIN_BATCH = 1000  # messages taken from one socket per drain
# ...and no longer than this (s) a drain of the agents' socket: one message may be a
# node's goodbye, which ends every step it ran (64 at once), and at a job's end a
# thousand of them held the loop, and a status answer, for 1.3-1.4 s.
DRAIN_S = 0.2
ANSWERS_LINGER_MS = 500  # at close, for answers still queued to clients
_EVENTS, _POLLIN, _NOBLOCK = int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.NOBLOCK)  # (plain ints: no enum arithmetic)


class Transport:
    """Bound sockets, the keys that guard them, and the dropped-input counts."""

    def __init__(self, bind_host: str = "127.0.0.1", advertise: str = ""):
        self.ctx = zmq.Context()
        self.keys = security.Keys.generate()
        self.auth = security.start_authenticator(self.ctx, self.keys)
        self.agent_sock = self.ctx.socket(zmq.ROUTER)
        self.client_sock = self.ctx.socket(zmq.ROUTER)
        security.serve(self.agent_sock, self.keys, "agents")
        security.serve(self.client_sock, self.keys, "clients")
        for s in (self.agent_sock, self.client_sock):
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.MAXMSGSIZE, P.MAX_FRAME)
            s.setsockopt(zmq.ROUTER_MANDATORY, 1)
        # Every agent of an allocation connects at once: a listen queue of ZeroMQ's default
        # 100 overflows and the kernel makes the rest retry after 1, 3, 7 ... s.
        self.agent_sock.setsockopt(zmq.BACKLOG, AGENT_BACKLOG)
        aport = self.agent_sock.bind_to_random_port(f"tcp://{bind_host}")
        cport = self.client_sock.bind_to_random_port(f"tcp://{bind_host}")
        # The host name the address comes from, if it does (what is said of a loopback one:
        # fleet.control.loopback).
        self.named = "" if advertise or bind_host not in ("0.0.0.0", "*") else socket.gethostname()
        self.address = addr = advertise or (socket.gethostbyname(self.named) if self.named else bind_host)
        self.agent_endpoint = f"tcp://{addr}:{aport}"
        self.client_endpoint = f"tcp://{addr}:{cport}"
        self.dropped: dict[str, int] = {}
        self._warned: set[str] = set()
        self._out: dict[bytes, list[bytes]] = {}  # identity -> frames for it this turn, in order
        # identity -> a frame to add to what goes to it (fleet.control.nodemarkers: done markers)
        self.ride: Callable[[bytes], bytes | None] | None = None

    def drain(self, sock, handler: Callable, refused: Callable[[P.ProtocolError], None] | None = None,
              until: float | None = None) -> bool:
        """Hand about DRAIN_BATCH waiting messages of `sock` to handler(identity, msg), or
        those that come before `until` (time.monotonic()) if that is sooner; True if none
        was left waiting. `refused` hears of a peer that speaks another protocol version.
        Counted in messages, not in ZeroMQ messages: an agent's batch may hold many, and a
        drain of a thousand batches held the loop (and the launches it had decided) for
        seconds."""
        taken = 0
        while taken < DRAIN_BATCH and (until is None or not taken or time.monotonic() < until):
            # Asked, not tried, after the first: a receive that finds nothing raises
            # zmq.Again, which took pyzmq about twice a whole message's receive, once
            # per loop turn (benchmarks/README.md, "The loop's turn on a small fleet").
            if taken and not sock.getsockopt(_EVENTS) & _POLLIN:
                return True
            try:
                frames = sock.recv_multipart(_NOBLOCK)
            except zmq.Again:
                return True
            taken += max(1, len(frames) - 1)
            # A client asks one thing at a time; an agent may batch (one message a frame).
            if len(frames) != 2 and (sock is self.client_sock or len(frames) < 2):
                self.warn("frames", f"dropped a message of {len(frames)} frames")
                continue
            ident = frames[0]
            for frame in frames[1:]:
                self._one(sock, ident, frame, handler, refused)
        return False

    def _one(self, sock, ident: bytes, frame: bytes, handler: Callable, refused) -> None:
        try:
            msg = P.decode(frame)
        except P.ProtocolError as e:
            self.warn(f"bad:{type(e).__name__}", f"dropped a malformed message: {e}")
            if isinstance(e, P.VersionMismatch):
                self.reply(sock, ident, P.Error(str(e)))
                if refused is not None:
                    refused(e)
            elif sock is self.client_sock:
                # Unknown fields are rejected: a client told why does not wait for nothing.
                self.reply(sock, ident, P.Error(f"malformed message: {e}"))
            return
        try:
            handler(ident, msg)
        except Exception as e:
            self._failed(sock, ident, msg, e)

    def _failed(self, sock, ident: bytes, msg, e: Exception) -> None:
        # A bug (or a well-keyed peer's ill-typed fields) must not stop the fleet, nor
        # flood the log, nor leave a client waiting for nothing.
        key = f"error:{type(msg).__name__}"
        self.dropped[key] = self.dropped.get(key, 0) + 1
        if key not in self._warned:
            self._warned.add(key)
            log.exception("handling %s failed (further failures of this kind are counted, not logged)",
                          type(msg).__name__)
        if sock is self.client_sock:
            self.reply(sock, ident, P.Error(f"internal error handling {type(msg).__name__}: {e}"))

    def error(self, what: str) -> None:
        """Count (and log the first of) an exception the loop caught while `what`: call
        from an except block."""
        key = f"error:{what}"
        self.dropped[key] = self.dropped.get(key, 0) + 1
        if key not in self._warned:
            self._warned.add(key)
            log.exception("%s failed (further failures of this kind are counted, not logged)", what)

    def warn(self, key: str, text: str) -> None:
        """Log the first of each kind of dropped input, and count them all: garbage
        must neither flood the log nor grow memory (keys are a small fixed set)."""
        self.dropped[key] = self.dropped.get(key, 0) + 1
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s (further ones of this kind are counted, not logged)", text)

    def reply(self, sock, ident: bytes, msg) -> None:
        """Send msg to the peer `ident` of `sock`; a peer that is gone or full is not waited for."""
        try:
            sock.send_multipart([ident, P.encode(msg)], zmq.NOBLOCK)
        except (zmq.Again, zmq.ZMQError):
            pass

    def send(self, identity: bytes, msg) -> bool:
        """Send msg to an agent; False if it could not be queued. A Launch waits for the
        end of the loop turn (flush), and so does whatever follows it to the same agent
        meanwhile (in order): a turn's launches to one agent go as one message. A message
        over MAX_FRAME is not sent: framesize.TooBig (the caller fails its step)."""
        pending = self._out.get(identity)
        frame = msg if type(msg) is bytes else P.encode(msg)  # (bytes: encoded once for many, a heartbeat)
        if len(frame) > P.MAX_FRAME:  # the agent's socket would drop it, and the agent's connection with it
            raise framesize.over(f"the {type(msg).__name__} for {identity.decode(errors='replace')}", len(frame))
        if pending is not None or type(msg) is P.Launch:
            self._out.setdefault(identity, []).append(frame)
            return True
        try:
            self.agent_sock.send_multipart([identity, frame], zmq.NOBLOCK)
            return True
        except (zmq.Again, zmq.ZMQError):
            return False

    def flush(self, unreachable: Callable[[str, float], None]) -> None:
        """Send each agent what this turn has for it, as one message of one frame per
        message, in order; unreachable(node, now) for each agent it could not be given to
        (its identity is its node's name)."""
        out, self._out = self._out, {}
        ride = self.ride
        for identity, frames in out.items():
            if ride is not None:
                extra = ride(identity)
                if extra is not None:
                    frames.append(extra)
            try:
                self.agent_sock.send_multipart([identity, *frames], zmq.NOBLOCK)
            except (zmq.Again, zmq.ZMQError):
                unreachable(identity.decode(errors="replace"), time.time())

    def close(self) -> None:
        self.agent_sock.close(0)
        # Answers already given (a Down's, the last status) still leave; a client that is
        # gone or stuck is not waited for longer than this.
        self.client_sock.close(ANSWERS_LINGER_MS)
        self.auth.stop()
        self.ctx.term()
