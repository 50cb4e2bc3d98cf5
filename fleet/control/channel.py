"""A request/reply channel from a client (`fleet run`, status, down, the Python API) to
one coordinator, and why an answer cannot come when that can be told before a timeout:

- The CURVE handshake failed: the connection file's keys are not this coordinator's (a
  stale copy of another fleet's file, or another fleet now at its address). A socket
  monitor hears it within milliseconds; before 2026-12-06 the request waited out its
  10 s and said only that the coordinator did not answer.
- The coordinator, of this host, is stopped (SIGSTOP, Ctrl-Z): it answers nothing until
  continued. Said within a fraction of a second (CoordinatorStopped) instead of after
  the request's 10 s.
"""

from __future__ import annotations

import socket
import threading
import time

import zmq
from zmq.utils.monitor import recv_monitor_message

from fleet.control import identity
from fleet.control.reach import unreachable
from fleet.wire import connection
from fleet.wire import messages as P
from fleet.wire import security


class FleetError(RuntimeError):
    pass


class NoAnswer(FleetError):
    """The coordinator did not answer in time (not: it answered with an error)."""


class CoordinatorStopped(NoAnswer):
    """The coordinator (of this host) is stopped, so it cannot answer; it may be continued
    (a wait that tolerates silence goes on waiting: hence a NoAnswer)."""


# An answer comes from the coordinator this client authenticated (CURVE), so it is not
# held to the 1 MiB bound of what the coordinator takes in: a status answer of a
# coordinator from before fleet.control.nodestatus listed every node, ~130 bytes each
# (10,000 nodes: ~1.3 MB); now it is bounded and the node table comes in pages.
ANSWER_LIMIT = 256 << 20

SLICE_S = 0.2  # how often a wait looks at the coordinator's state and its tunnel
# The handshake events a monitor hears (no others: each is one message on an inproc pipe).
_REFUSED = zmq.EVENT_HANDSHAKE_FAILED_AUTH
_FAILED = zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
_EVENTS = _REFUSED | _FAILED | zmq.EVENT_HANDSHAKE_SUCCEEDED
# A wrong server key fails each handshake without detail, as a peer gone mid-handshake
# does once: only failures in a row, none succeeding, say the key is wrong.
FAILED_IN_A_ROW = 3


# How long a coordinator must be seen stopped, look after look, before it is said to be:
# a process that strace, perf or a debugger attaches to stops for moments as it is traced.
STOPPED_FOR_S = 1.0


def stopped(pid: int) -> bool:
    """The process is stopped by a signal (SIGSTOP, SIGTSTP: state T), so it cannot answer
    until continued. Not a tracing stop (state t: strace, a debugger), which goes on by
    itself: before 2026-12-06 that counted, and a `fleet run` whose coordinator was traced
    by `strace -c` failed, "stopped"."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, IndexError):
        return False


class Client:
    """A request/reply channel to one coordinator. Answers come in the order asked, on
    one socket: a question and its answer hold `lock` (threads may share a client)."""

    def __init__(self, conn: connection.Connection, endpoint: str | None = None):
        self.conn = conn
        self.endpoint = endpoint or conn.client
        self.ctx = zmq.Context.instance()
        self.lock = threading.RLock()
        self.broken, self.via_hint = None, ""  # (fleet status: its --ssh tunnel's closed, what to check of --via)
        self.here = conn.host == socket.gethostname() and conn.pid > 0
        self._connect()

    def reset(self) -> None:
        """A new socket: an answer still owed on the old one is never taken for the next."""
        self._close()
        self._connect()

    def _connect(self) -> None:
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.monitor, self.failed = None, 0
        try:
            if self.conn.server_key:
                security.connect_as(self.sock, self.conn.server_key, self.conn.client_public, self.conn.client_secret)
                self.monitor = self.sock.get_monitor_socket(_EVENTS)
            self.sock.connect(self.endpoint)
        except (zmq.ZMQError, TypeError, ValueError) as e:  # (a hand-made file, or --via: not a traceback)
            self._close()
            raise FleetError(f"cannot connect to the coordinator at {self.endpoint!r}: {e}") from None
        self.poller = zmq.Poller()
        self.poller.register(self.sock, zmq.POLLIN)
        if self.monitor is not None:
            self.poller.register(self.monitor, zmq.POLLIN)

    def ask(self, msg, timeout: float = 10.0):
        """Send one request and return its reply; FleetError on silence or an error reply."""
        with self.lock:
            if self.sock.closed:  # (close(), or a Fleet's down(): pyzmq's own error says only "not a socket")
                raise FleetError(f"this client's connection to the coordinator at {self.endpoint} is closed")
            self.sock.send(P.encode(msg))
            why = self._silence(timeout)
            if why is not None:
                self.reset()  # (a late answer must not be taken for the answer to the next question)
                raise why
            reply = P.decode(self.sock.recv(), limit=ANSWER_LIMIT)
        if isinstance(reply, P.Error):
            raise FleetError(reply.reason)
        return reply

    def _silence(self, timeout: float) -> FleetError | None:
        """None once an answer came within `timeout`, else why none did: the keys were
        refused, the tunnel closed (`broken`), the coordinator is stopped, or time ran out."""
        deadline = time.monotonic() + timeout
        stopped_at = None  # since when the coordinator has been seen stopped, look after look
        while True:
            left = deadline - time.monotonic()
            ready = dict(self.poller.poll(int(max(0.0, min(SLICE_S, left)) * 1000)))
            if self.sock in ready:
                return None
            if self.monitor in ready and (refused := self._handshake()):
                return FleetError(refused)
            broken = self.broken() if self.broken else ""
            if broken:
                return FleetError(broken)
            stopped_at = (stopped_at or time.monotonic()) if self.here and stopped(self.conn.pid) else None
            if (stopped_at is not None and time.monotonic() - stopped_at >= STOPPED_FOR_S
                    and identity.coordinator(self.conn.pid, self.conn.run_dir)):
                pid = self.conn.pid
                return CoordinatorStopped(f"the coordinator at {self.endpoint} cannot answer: its process, pid {pid} "
                                          f"on this host, is stopped (SIGSTOP, or Ctrl-Z): continue it (kill -CONT "
                                          f"{pid}), or stop the fleet (fleet down --run-dir {self.conn.run_dir})")
            if left <= 0:
                return NoAnswer(f"the coordinator at {self.endpoint} did not answer within {timeout:.0f} s"
                                f"{self._where()}")

    def _handshake(self) -> str:
        """What the monitor heard: why the coordinator refuses this client, or ""."""
        why = ""
        while self.monitor.poll(0):
            event = recv_monitor_message(self.monitor)["event"]
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.failed = 0
            elif event & _REFUSED:
                why = (f"the coordinator at {self.endpoint} refused this client's keys: the connection file is not "
                       f"this fleet's (a stale copy of another fleet's?)")
            elif event & _FAILED:
                self.failed += 1
                if self.failed >= FAILED_IN_A_ROW and not why:
                    why = (f"the coordinator at {self.endpoint} is not the one this connection file's keys are for "
                           f"(every handshake failed): the file is not this fleet's (a stale copy of another "
                           f"fleet's?), or another fleet or program now listens at that address")
        return why

    def _where(self) -> str:
        """Where the coordinator runs, if not here and asked at its own address: the likely why."""
        if self.endpoint != self.conn.client:
            return self.via_hint
        return "" if self.conn.host in ("", socket.gethostname()) else unreachable(self.conn)

    def _close(self) -> None:
        if self.monitor is not None:
            if not self.sock.closed:
                try:
                    self.sock.disable_monitor()
                except zmq.ZMQError:
                    pass
            self.monitor.close(0)
            self.monitor = None
        self.sock.close(0)

    def close(self) -> None:
        with self.lock:
            self._close()
