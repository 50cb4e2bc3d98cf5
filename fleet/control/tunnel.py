"""An SSH tunnel to a coordinator, through the system's ssh client.

`fleet status --ssh login` runs `ssh -N -L PORT:HOST:PORT login` (and, when the
connection file is not on this machine, `ssh login cat RUN_DIR/fleet.json` first), so a
laptop or login node reaches a coordinator on a compute node without opening anything.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import time
from urllib.parse import urlparse

from fleet.node.child import set_pdeathsig  # (imported here, not in the forked child: no import after fork)
from fleet.wire import connection


class TunnelError(RuntimeError):
    pass


class NoFleetThere(TunnelError):
    """The far side has no connection file there: no fleet is up (any more)."""


_ABSENT = 5  # the remote script's exit status for a connection file that is not there


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ssh_base(login: str, options: list[str]) -> list[str]:
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes", "-o", "ConnectTimeout=10"]
    for opt in options:
        argv += shlex.split(opt)
    return argv + [login]


def fetch_connection(login: str, run_dir: str, options: list[str], timeout: float = 20.0) -> connection.Connection:
    """Read the connection file of the fleet in run_dir on the far side: the one `fleet up`
    started (fleet.json), else the newest a `fleet run` embedded there (fleet-*.json), as
    fleet.control.client.live picks one here (its 0600 mode is checked there);
    NoFleetThere if there is none."""
    d = shlex.quote(run_dir.rstrip("/") or "/")
    script = (f"d={d}; f=\"$d/{connection.NAME}\"; [ -e \"$f\" ] || f=$(ls -t \"$d\"/fleet-*.json 2>/dev/null | head -n 1); "
              f"[ -n \"$f\" ] && [ -e \"$f\" ] || exit {_ABSENT}; m=$(stat -c %a \"$f\") || exit 3; "
              f"case $m in 600|400) cat \"$f\";; *) echo \"$f has mode $m, not 600\" >&2; exit 4;; esac")
    path = f"{run_dir}/{connection.NAME}"
    try:
        p = subprocess.run(_ssh_base(login, options) + [script], capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise TunnelError(f"ssh {login} did not answer within {timeout:.0f} s") from None
    if p.returncode == _ABSENT:
        raise NoFleetThere(f"no fleet is up in {run_dir} on {login} (no {connection.NAME} nor fleet-*.json there)")
    if p.returncode != 0:
        raise TunnelError(f"cannot read {path} through ssh {login}: {p.stderr.strip() or f'exit {p.returncode}'}")
    try:
        return connection.from_dict(json.loads(p.stdout))
    except (ValueError, TypeError) as e:
        raise TunnelError(f"{login}:{run_dir}'s connection file is not a fleet connection file: {e}") from None


def _die_with(parent: int) -> None:
    """In the forked ssh before exec: SIGTERM when `parent` dies (PR_SET_PDEATHSIG); if it
    already died between the fork and here, now."""
    set_pdeathsig(signal.SIGTERM)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


class Tunnel:
    """`with Tunnel(login, endpoint) as local_endpoint:` forwards a local port."""

    def __init__(self, login: str, endpoint: str, options: list[str] | None = None, timeout: float = 20.0):
        self.login = login
        u = urlparse(endpoint)
        self.remote = (u.hostname, u.port)
        self.options = options or []
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None
        self._said = b""

    def __enter__(self) -> str:
        port = _free_port()
        host, rport = self.remote
        argv = _ssh_base(self.login, self.options)
        argv[1:1] = ["-N", "-L", f"127.0.0.1:{port}:{host}:{rport}"]
        parent = os.getpid()
        # Its own session (a Ctrl-C of the terminal is ours to handle), and it dies with this
        # process, even one killed by SIGKILL (before 2026-12-06 such an ssh stayed for good).
        # Spawned from the thread that lives as long as this process (the main one): the
        # death signal comes when the thread that forked it ends.
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, start_new_session=True,
                                     preexec_fn=lambda: _die_with(parent))
        os.set_blocking(self.proc.stderr.fileno(), False)  # (said(): what it says meanwhile)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.said()
                raise TunnelError(f"ssh {self.login} could not forward to {host}:{rport}: {err or f'exit {self.proc.returncode}'}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return f"tcp://127.0.0.1:{port}"
            except OSError:
                time.sleep(0.05)
        self.__exit__()
        raise TunnelError(f"ssh {self.login} did not open the tunnel within {self.timeout:.0f} s")

    def closed(self) -> str:
        """Why the tunnel is gone, if its ssh has exited (else ""): a request through it
        cannot be answered, whatever the fleet's state."""
        if self.proc is None or self.proc.poll() is None:
            return ""
        rc = self.proc.returncode
        how = f"was killed by signal {-rc}" if rc < 0 else f"exited with status {rc}"
        said = self.said()
        return (f"the ssh tunnel through {self.login} closed: ssh {how}" + (f"; ssh said: {said}" if said else "")
                + " (the fleet may well still be up; run the command again)")

    def said(self) -> str:
        """The last lines ssh wrote to its standard error so far: why a forward fails
        ("open failed: administratively prohibited", "connect_to ... failed")."""
        if self.proc is not None and self.proc.stderr is not None:
            try:
                self._said += self.proc.stderr.read() or b""
            except (OSError, ValueError):  # (nothing yet, or closed)
                pass
        lines = [x.strip() for x in self._said.decode(errors="replace").splitlines() if x.strip()]
        return "; ".join(lines[-3:])

    def unanswered(self, error: str, conn: connection.Connection) -> str:
        """`error` (a request through the tunnel went unanswered) with where it went and
        what ssh said: the local port alone tells nothing."""
        host, port = self.remote
        said = self.said()
        return (f"{error}: asked through ssh {self.login}, forwarded to {host}:{port}, where the coordinator of "
                f"{conn.run_dir} runs (on {conn.host}, pid {conn.pid})"
                + (f"; ssh said: {said}" if said else "; ssh said nothing") + " (is the fleet still up there?)")

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
