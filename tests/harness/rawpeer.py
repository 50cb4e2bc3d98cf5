"""Raw ZeroMQ peers of a running fleet, for the security, fuzz and status tests.

A test that says "a peer without keys gets nothing" proves something only if the same
peer, given the right keys, does get an answer: every helper here is used both ways.
Traffic goes only to the fleet's own endpoints (127.0.0.1 for a local fleet).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import msgpack
import zmq

from fleet.wire import connection
from fleet.wire import messages as P
from fleet.wire import security
from fleet.control.client import Client

from fleetharness import events, fleet


def conn_of(run_dir: Path) -> connection.Connection:
    return connection.read(connection.path_in(run_dir))


def agent_keys(run_dir: Path) -> tuple[str, str, str]:
    """(server public, agent public, agent secret), as the coordinator gave them to its
    agents in FLEET_CURVE. The agent removes the variable from os.environ, but the
    kernel keeps the environment it was started with in /proc/PID/environ (readable by
    its owner only): that is where a test, running as the same user, finds them."""
    for e in events(run_dir):
        if e["kind"] == "node_joined":
            with open(f"/proc/{e['pid']}/environ", "rb") as f:
                for var in f.read().split(b"\0"):
                    if var.startswith(security.AGENT_ENV.encode() + b"="):
                        server, public, secret = var.split(b"=", 1)[1].decode().split()
                        return server, public, secret
    raise AssertionError(f"no agent of the fleet in {run_dir} has {security.AGENT_ENV} in its environment")


_ctx: zmq.Context | None = None


def ctx() -> zmq.Context:
    global _ctx
    if _ctx is None:
        _ctx = zmq.Context()
    return _ctx


def dealer(endpoint: str, keys: tuple[str, str, str] | None = None, *, identity: bytes | None = None,
           hwm: int = 1000) -> zmq.Socket:
    """A DEALER connected to endpoint; keys = (server public, our public, our secret), or
    None for a peer with no CURVE at all."""
    assert endpoint.startswith("tcp://127.0.0.1:"), endpoint  # local traffic only
    s = ctx().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.SNDHWM, hwm)
    s.setsockopt(zmq.RCVHWM, hwm)
    if identity is not None:
        s.setsockopt(zmq.IDENTITY, identity)
    if keys is not None:
        security.connect_as(s, *keys)
    s.connect(endpoint)
    return s


def client_keys(conn: connection.Connection) -> tuple[str, str, str]:
    return conn.server_key, conn.client_public, conn.client_secret


def random_keys(server_public: str | None = None) -> tuple[str, str, str]:
    """A fresh key pair (and, unless given, a fresh server key too): keys nobody admits."""
    pub, sec = zmq.curve_keypair()
    server = server_public or zmq.curve_keypair()[0].decode()
    return server, pub.decode(), sec.decode()


def raw(body: dict) -> bytes:
    return msgpack.packb(body, use_bin_type=True)


def recv_within(sock: zmq.Socket, timeout: float) -> list[bytes]:
    """Every frame that arrives within timeout seconds (polling to a deadline)."""
    got = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return got
        if sock.poll(int(left * 1000) + 1):
            got.append(sock.recv())


def first_reply(sock: zmq.Socket, timeout: float):
    """The first reply within timeout, decoded, or None."""
    if sock.poll(int(timeout * 1000)):
        return P.decode(sock.recv())
    return None


def status(conn: connection.Connection, timeout: float = 10.0) -> dict:
    c = Client(conn)
    try:
        return c.ask(P.Status(), timeout=timeout).status
    finally:
        c.close()


def up(run_dir: Path, cwd: Path, nodes: int = 2) -> connection.Connection:
    fleet("up", "--run-dir", str(run_dir), "--nodes", str(nodes), cwd=cwd, check=True, timeout=90)
    return conn_of(run_dir)


def down(run_dir: Path, cwd: Path) -> None:
    fleet("down", "--run-dir", str(run_dir), cwd=cwd, timeout=60)


def exits(run_dir: Path) -> list[dict]:
    return [e for e in events(run_dir) if e["kind"] == "exit"]


def call_suite(path: Path, name: str, steps: int, seconds: float, run_dir: str | None = None,
               gate: Path | None = None) -> Path:
    """A suite of `steps` independent `fleet_steps:nap` call steps (`gate`: each waits for that file first)."""
    text = f'[suite]\nname = "{name}"\n' + (f'run_dir = "{run_dir}"\n' if run_dir else "")
    gated = f', gate = "{gate}"' if gate else ""
    text += (f'[[steps]]\nid = "nap/{{i}}"\narray = "1-{steps}"\ncall = "fleet_steps:nap"\n'
             f"args = {{ seconds = {seconds}{gated} }}\n")
    path.write_text(text)
    return path


def dump(obj) -> str:
    return json.dumps(obj, indent=1, sort_keys=True, default=str)


def assert_gone(run_dir: Path, exclude: set[int] = frozenset(), timeout: float = 15.0) -> None:
    """fleetharness.assert_nothing_left, for runs where a test's pretend agent recorded
    a pid of its own (excluded here: it names no process of the fleet)."""
    from fleetharness import fleet_pids, living
    pids = fleet_pids(run_dir) - set(exclude) - {0}
    assert pids, "the run recorded no pids: the test would prove nothing"
    deadline = time.monotonic() + timeout
    while True:
        left = living(pids)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not left, "processes outlived the fleet:\n" + "\n".join(left)


def living_pids(pids) -> list[int]:
    """Those of pids still running (zombies not counted: they have exited)."""
    import psutil
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out
