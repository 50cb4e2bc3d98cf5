"""A request/reply channel from a client (`fleet run`, status, down, the Python API) to
one coordinator, and why an answer cannot come when that can be told before a timeout:

- The CURVE handshake failed: the connection file's keys are not this coordinator's (a
  stale copy of another fleet's file, or another fleet now at its address). A socket
  monitor hears it within milliseconds; before 2026-12-06 the request waited out its
  10 s and said only that the coordinator did not answer.
- The coordinator, of this host, is stopped (SIGSTOP, Ctrl-Z): it answers nothing until
  continued. Said within a fraction of a second (CoordinatorStopped) instead of after
  the request's 10 s.
- The coordinator, of this host, is gone (`fleet down`, killed; perhaps another fleet is
  up in its run directory since): said at once (CoordinatorGone). Before 2026-12-06 a
  client kept across a `fleet down` waited out 10 s a call (a submission 70 s) and
  blamed silence.

And why one client's answers cannot be taken for another question's: a question cut
short by any exception (Ctrl-C between send and receive, too) leaves the socket with
an answer owed, so the socket is replaced (`reset`); and a client is its process's
(ZeroMQ sockets do not survive fork: before 2026-12-06 a forked child's call spun for
ever, whatever its timeout), so another process's call is refused at once.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time
import weakref
from pathlib import Path

import zmq
from zmq.utils.monitor import recv_monitor_message

from fleet.control import gone, identity
from fleet.control.reach import unreachable
from fleet.wire import connection, framesize
from fleet.wire import messages as P
from fleet.wire import security


class FleetError(RuntimeError):
    pass


class NoAnswer(FleetError):
    """The coordinator did not answer in time (not: it answered with an error)."""


class CoordinatorGone(FleetError):
    """The coordinator (of this host) this client was connected to is gone: it answers
    nothing, ever; a new client (fleet.connect()) reaches the fleet up there now, if any."""


class CoordinatorStopped(NoAnswer):
    """The coordinator (of this host) is stopped, so it cannot answer; it may be continued
    (a wait that tolerates silence goes on waiting: hence a NoAnswer)."""


# An answer comes from the coordinator this client authenticated (CURVE), so it is not
# held to the 1 MiB bound of what the coordinator takes in: a status answer of a
# coordinator from before fleet.control.nodestatus listed every node, ~130 bytes each
# (10,000 nodes: ~1.3 MB); now it is bounded and the node table comes in pages.
ANSWER_LIMIT = 256 << 20

SLICE_S = 0.2  # how often a wait looks at the coordinator's state and its tunnel
LAST_LOOK_MS = 200  # for an answer sent just before the coordinator (or its tunnel) was found gone
# The handshake events a monitor hears (no others: each is one message on an inproc pipe).
_REFUSED = zmq.EVENT_HANDSHAKE_FAILED_AUTH
_FAILED = zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
_EVENTS = _REFUSED | _FAILED | zmq.EVENT_HANDSHAKE_SUCCEEDED
# A wrong server key fails each handshake without detail, as a peer gone mid-handshake
# does once: only failures in a row, none succeeding, say the key is wrong.
FAILED_IN_A_ROW = 3
# Each socket's monitor gets its own inproc name: pyzmq's default names it by the
# socket's fd, and libzmq frees a closed socket's name asynchronously, so a new socket on
# a dropped client's fd number failed to connect, "Address already in use".
_MONITORS = itertools.count()


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


def request(msg) -> bytes:
    """msg encoded to send; FleetError at once if it is over the 1 MiB of a message: the
    coordinator's socket would drop it unread, and its sender waited to be told it "did
    not answer" (before 2026-12-07)."""
    try:
        return framesize.checked(P.encode(msg), f"this {type(msg).__name__.lower()} request")
    except framesize.TooBig as e:
        raise FleetError(f"{e}: ask for less at once (a submission's `only` names steps: select fewer, "
                         f"or submit a suite file of just those steps)") from None


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
        self.pid = os.getpid()  # (the process whose sockets these are)
        self._connect()

    def reset(self) -> None:
        """A new socket: an answer still owed on the old one is never taken for the next."""
        self._close()
        self._connect()

    def _connect(self) -> None:
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.monitor, self.failed = None, 0
        held = [self.sock]  # (the sockets to close: the finaliser must not hold the client itself)
        # A client dropped without close() (a notebook cell run again: `f = fleet.connect()`)
        # closes its sockets, its monitor's too; one left at exit is closed then (LINGER 0: at once).
        self._final = weakref.finalize(self, _close_sockets, held, self.pid)
        try:
            if self.conn.server_key:
                security.connect_as(self.sock, self.conn.server_key, self.conn.client_public, self.conn.client_secret)
                self.monitor = self.sock.get_monitor_socket(
                    _EVENTS, addr=f"inproc://fleet-monitor-{self.pid}-{next(_MONITORS)}")
                held.append(self.monitor)
            self.sock.connect(self.endpoint)
        except (zmq.ZMQError, TypeError, ValueError) as e:  # (a hand-made file, or --via: not a traceback)
            self._close()
            raise FleetError(f"cannot connect to the coordinator at {self.endpoint!r}: {e}") from None
        self.poller = zmq.Poller()
        self.poller.register(self.sock, zmq.POLLIN)
        if self.monitor is not None:
            self.poller.register(self.monitor, zmq.POLLIN)

    def usable(self) -> None:
        """FleetError at once if this client cannot ask: it was closed, or it is used in
        another process than the one that made it (a forked child: ZeroMQ sockets do not
        survive fork, and before 2026-12-06 the child's call spun for ever)."""
        if os.getpid() != self.pid:
            raise FleetError(f"this client of the coordinator at {self.endpoint} was made in process {self.pid}, "
                             f"and cannot be used in process {os.getpid()} (a child forked from it): connect "
                             f"again in this process (fleet.connect())")
        if self.sock.closed:  # (close(), or a Fleet's down(): pyzmq's own error says only "not a socket")
            raise FleetError(f"this client's connection to the coordinator at {self.endpoint} is closed")

    def ask(self, msg, timeout: float = 10.0):
        """Send one request and return its reply; FleetError on silence or an error reply."""
        self.usable()  # (before the lock: a forked child's copy of it may be held for ever)
        frame = request(msg)
        with self.lock:
            self.usable()
            try:
                self.sock.send(frame)
                why = self._silence(timeout)
                raw = self.sock.recv() if why is None else b""
            except BaseException:
                # Cut short (Ctrl-C, a signal handler's exception): its answer is still owed on this
                # socket, and before 2026-12-06 was taken for the next question's, and so on for ever.
                self.reset()
                raise
            if why is not None:
                self.reset()  # (a late answer must not be taken for the answer to the next question)
                raise why
        try:
            reply = P.decode(raw, limit=ANSWER_LIMIT)
        except P.VersionMismatch as e:  # (before 2026-12-07 a traceback: a fleet up by an older install)
            raise FleetError(self._other_version(e.got)) from None
        if isinstance(reply, P.Error):
            raise FleetError(reply.reason)
        return reply

    def _other_version(self, got) -> str:
        """Why the answer of a coordinator of another protocol version is not read."""
        c = self.conn
        return (f"the fleet in {c.run_dir} (coordinator pid {c.pid} on {c.host}) speaks protocol version {got!r}, "
                f"this fleet install speaks {P.VERSION}: use the fleet install that started it (fleet down with it too)")

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
                return None if self.last_look() else FleetError(broken)
            stopped_at = (stopped_at or time.monotonic()) if self.here and stopped(self.conn.pid) else None
            if (stopped_at is not None and time.monotonic() - stopped_at >= STOPPED_FOR_S
                    and identity.coordinator(self.conn.pid, self.conn.run_dir)):
                pid = self.conn.pid
                return CoordinatorStopped(f"the coordinator at {self.endpoint} cannot answer: its process, pid {pid} "
                                          f"on this host, is stopped (SIGSTOP, or Ctrl-Z): continue it (kill -CONT "
                                          f"{pid}), or stop the fleet (fleet down --run-dir {self.conn.run_dir})")
            if gone_why := self.gone_why():
                return None if self.last_look() else CoordinatorGone(gone_why)
            if left <= 0:
                return NoAnswer(f"the coordinator at {self.endpoint} did not answer within {timeout:.0f} s"
                                f"{self._where()}")

    def last_look(self) -> bool:
        """An answer came after all: the coordinator answered, then ended (a Down's answer)
        or its tunnel closed, while this wait looked elsewhere after its last poll. What
        it sent before it ended is on this host by now; before 2026-12-07 it was left
        unread and the question failed, "down" (a `fleet down` said it got no answer)."""
        return bool(self.sock.poll(LAST_LOOK_MS))

    def gone_why(self) -> str:
        """Why the coordinator this client was connected to will never answer: it is of this
        host and gone (fleet.control.identity), as the run directory's events say it ended;
        and what is up there now. "" if it may yet answer (alive, or of another host)."""
        pid, run_dir = self.conn.pid, self.conn.run_dir
        if not self.here or not identity.gone(pid, run_dir, self.conn.started):
            return ""
        how = gone.why(run_dir, self.conn.host, pid)
        from fleet.control import jobfleets
        from fleet.control.client import live  # (it imports this module)
        try:
            # (inside a batch job, this job's: the ones fleet.connect() uses)
            now, theirs = ([c.pid for _, c in f] for f in jobfleets.split(live(Path(run_dir)), False))
        except FleetError:
            now, theirs = [], []
        then = (f"another fleet is up in {run_dir} now (coordinator pid {now[0]}): connect to it again "
                f"(fleet.connect())" if now else
                f"no fleet of this job is up in {run_dir} now, only another job's (coordinator pid {theirs[0]})"
                if theirs else
                f"no fleet is up in {run_dir} now (fleet up --run-dir {run_dir}, then fleet.connect())")
        return (f"the fleet this client was connected to (its coordinator at {self.endpoint}, pid {pid} on this "
                f"host) is down" + (f": {how}" if how else "") + f"; {then}")

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
        if os.getpid() == self.pid:  # (a forked child's are its parent's: left alone)
            self._final()
        self.monitor = None

    def close(self) -> None:
        with self.lock:
            self._close()


def _close_sockets(held: list, pid: int) -> None:
    """Close a client's socket and its monitor (the client's close(), or its finaliser:
    dropped, or left at exit), in the process that made them only."""
    if os.getpid() != pid:
        return
    sock, monitor = held[0], (held[1] if len(held) > 1 else None)
    if monitor is not None:
        if not sock.closed:
            try:
                sock.disable_monitor()
            except zmq.ZMQError:
                pass
        monitor.close(0)
    sock.close(0)
