"""Talking to a running fleet from the command line: find it, start it, ask it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import zmq

from . import connection, protocol as P, security


class FleetError(RuntimeError):
    pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still answers kill(0); it is not alive.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


class Client:
    """A request/reply channel to one coordinator."""

    def __init__(self, conn: connection.Connection, endpoint: str | None = None):
        self.conn = conn
        self.endpoint = endpoint or conn.client
        self.ctx = zmq.Context.instance()
        self._connect()

    def _connect(self) -> None:
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if self.conn.server_key:
            security.connect_as(self.sock, self.conn.server_key, self.conn.client_public, self.conn.client_secret)
        self.sock.connect(self.endpoint)

    def ask(self, msg, timeout: float = 10.0):
        """Send one request and return its reply; FleetError on silence or an error reply."""
        self.sock.send(P.encode(msg))
        if not self.sock.poll(int(timeout * 1000)):
            # A late answer must not be taken for the answer to the next question.
            self.sock.close(0)
            self._connect()
            raise FleetError(f"the coordinator at {self.endpoint} did not answer within {timeout:.0f} s")
        reply = P.decode(self.sock.recv())
        if isinstance(reply, P.Error):
            raise FleetError(reply.reason)
        return reply

    def close(self) -> None:
        self.sock.close(0)


def find(run_dir: Path) -> connection.Connection | None:
    """The live fleet in run_dir, or None (a stale connection file is removed)."""
    path = connection.path_in(run_dir)
    if not path.exists():
        return None
    conn = connection.read(path)
    if conn.host == socket.gethostname() and not _alive(conn.pid):
        connection.remove(run_dir)
        return None
    return conn


def up(run_dir: Path, nodes: int = 1, machine: str = "local", preload: tuple[str, ...] = (),
       timeout: float = 120.0, extra: list[str] | None = None) -> connection.Connection:
    """Start a coordinator (which starts the agents) in the background; return when
    every agent has joined and the connection file is written."""
    run_dir = Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    if find(run_dir) is not None:
        raise FleetError(f"a fleet is already up in {run_dir} (fleet down --run-dir {run_dir})")
    logf = open(run_dir / "coordinator.log", "ab")
    argv = [sys.executable, "-m", "fleet.coordinator", "--run-dir", str(run_dir), "--nodes", str(nodes),
            "--machine", machine, "--preload", ",".join(preload), *(extra or [])]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True)
    logf.close()
    deadline = time.monotonic() + timeout
    path = connection.path_in(run_dir)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise FleetError(f"the coordinator exited with status {proc.returncode} before the fleet was up; "
                             f"see {run_dir / 'coordinator.log'}:\n" + _tail(run_dir / "coordinator.log"))
        if path.exists():
            try:
                return connection.read(path)
            except (connection.ConnectionError_, ValueError):
                pass  # being written
        time.sleep(0.02)
    down(run_dir, pid=proc.pid)
    raise FleetError(f"the fleet did not come up within {timeout:.0f} s; see {run_dir / 'coordinator.log'}")


def down(run_dir: Path, pid: int | None = None, timeout: float = 20.0) -> bool:
    """Stop the fleet in run_dir: ask, then insist. True if one was running."""
    run_dir = Path(run_dir).resolve()
    conn = find(run_dir)
    if conn is not None:
        pid = conn.pid
        c = Client(conn)
        try:
            c.ask(P.Down(), timeout=5.0)
        except FleetError:
            pass
        finally:
            c.close()
    if pid is None:
        return False
    deadline = time.monotonic() + timeout
    sent_term = False
    while _alive(pid):
        if time.monotonic() > deadline - timeout / 2 and not sent_term:
            _kill(pid, signal.SIGTERM)
            sent_term = True
        if time.monotonic() > deadline:
            _kill(pid, signal.SIGKILL)
            break
        time.sleep(0.02)
    return True


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
