"""A request/reply channel from a client (`fleet run`, status, down, the Python API) to
one coordinator."""

from __future__ import annotations

import socket
import threading
import time

import zmq

from fleet.control.reach import unreachable
from fleet.wire import connection
from fleet.wire import messages as P
from fleet.wire import security


class FleetError(RuntimeError):
    pass


class NoAnswer(FleetError):
    """The coordinator did not answer in time (not: it answered with an error)."""


# An answer comes from the coordinator this client authenticated (CURVE), so it is not
# held to the 1 MiB bound of what the coordinator takes in: a status answer of a
# coordinator from before fleet.control.nodestatus listed every node, ~130 bytes each
# (10,000 nodes: ~1.3 MB); now it is bounded and the node table comes in pages.
ANSWER_LIMIT = 256 << 20


class Client:
    """A request/reply channel to one coordinator. Answers come in the order asked, on
    one socket: a question and its answer hold `lock` (threads may share a client)."""

    def __init__(self, conn: connection.Connection, endpoint: str | None = None):
        self.conn = conn
        self.endpoint = endpoint or conn.client
        self.ctx = zmq.Context.instance()
        self.lock = threading.RLock()
        self.broken, self.via_hint = None, ""  # (fleet status: its --ssh tunnel's closed, what to check of --via)
        self._connect()

    def reset(self) -> None:
        """A new socket: an answer still owed on the old one is never taken for the next."""
        self.sock.close(0)
        self._connect()

    def _connect(self) -> None:
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        try:
            if self.conn.server_key:
                security.connect_as(self.sock, self.conn.server_key, self.conn.client_public, self.conn.client_secret)
            self.sock.connect(self.endpoint)
        except (zmq.ZMQError, TypeError, ValueError) as e:  # (a hand-made file, or --via: not a traceback)
            self.sock.close(0)
            raise FleetError(f"cannot connect to the coordinator at {self.endpoint!r}: {e}") from None

    def ask(self, msg, timeout: float = 10.0):
        """Send one request and return its reply; FleetError on silence or an error reply."""
        with self.lock:
            if self.sock.closed:  # (close(), or a Fleet's down(): pyzmq's own error says only "not a socket")
                raise FleetError(f"this client's connection to the coordinator at {self.endpoint} is closed")
            self.sock.send(P.encode(msg))
            if not self._answered(timeout):
                self.reset()  # (a late answer must not be taken for the answer to the next question)
                broken = self.broken() if self.broken else ""
                if broken:
                    raise FleetError(broken)
                raise NoAnswer(f"the coordinator at {self.endpoint} did not answer within {timeout:.0f} s"
                               f"{self._where()}")
            reply = P.decode(self.sock.recv(), limit=ANSWER_LIMIT)
        if isinstance(reply, P.Error):
            raise FleetError(reply.reason)
        return reply

    def _answered(self, timeout: float) -> bool:
        """An answer came within `timeout` (or, with `broken` set, before it said why none can)."""
        if self.broken is None:
            return bool(self.sock.poll(int(timeout * 1000)))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.sock.poll(int(min(0.2, max(0.0, deadline - time.monotonic())) * 1000)):
                return True
            if self.broken():
                return False
        return False

    def _where(self) -> str:
        """Where the coordinator runs, if not here and asked at its own address: the likely why."""
        if self.endpoint != self.conn.client:
            return self.via_hint
        return "" if self.conn.host in ("", socket.gethostname()) else unreachable(self.conn)

    def close(self) -> None:
        with self.lock:
            self.sock.close(0)


def stopped(pid: int) -> bool:
    """The process is stopped (SIGSTOP, SIGTSTP: state T), so it cannot answer."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except OSError:
        return False
