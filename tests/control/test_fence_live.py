"""A node cut off from its coordinator, for real: its step stops there before its retry
starts elsewhere (fleet.core.fencing, fleet.wire.fencing).

The cut is a TCP relay between one agent and the coordinator that goes silent both ways
(the connections stay open, nothing gets through), as a network partition looks to
both: the agent runs on, hears nothing and stops its steps on its own; the coordinator
hears nothing and declares the node lost. The step ignores SIGTERM (a trap, an MPI
launcher, a checkpoint on SIGTERM) and writes a timestamped tick every 20 ms: the
evidence is the ticks themselves, not the fleet's own records."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import psutil

from fleetharness import assert_nothing_left, env, fleet, records, wait_for, write_suite
from rawpeer import agent_keys, conn_of

from fleet.wire import events as E

HB = ["--heartbeat", "0.5", "--heartbeat-timeout", "2"]  # the smallest the fleet's tests use

TICKER = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # stopped only by the SIGKILL after its grace
attempt = os.environ["FLEET_ATTEMPT"]
end = time.time() + (90 if attempt == "1" else 0.5)
while time.time() < end:
    with open(sys.argv[1], "a") as f:
        f.write(f"{attempt} {time.time():.6f}\\n")
    time.sleep(0.02)
"""


class Relay:
    """127.0.0.1:port -> target, both ways, until `cut` is set: then every byte that
    comes either way is read and dropped (real sockets, kept open)."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.cut = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        peer: dict[socket.socket, socket.socket] = {}
        while not self._stop.is_set():
            ready, _, _ = select.select([self.listener, *peer], [], [], 0.05)
            for s in ready:
                if s is self.listener:
                    a = self.listener.accept()[0]
                    b = socket.create_connection(self.target)
                    peer[a], peer[b] = b, a
                    continue
                if s not in peer:
                    continue
                data = s.recv(1 << 16)
                if not data:
                    other = peer.pop(s)
                    peer.pop(other, None)
                    s.close()
                    other.close()
                elif not self.cut.is_set():
                    peer[s].sendall(data)
        for s in peer:
            s.close()
        self.listener.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def ticks(path: Path) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {1: [], 2: []}
    for line in path.read_text().splitlines() if path.exists() else ():
        attempt, t = line.split()
        out[int(attempt)].append(float(t))
    return out


def test_a_cut_off_nodes_step_stops_before_its_retry_starts_on_another_node(tmp_path):
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", *HB, cwd=tmp_path, check=True, timeout=60)
    relay = agent = runner = None
    trace = tmp_path / "ticks"
    try:
        host, port = conn_of(run_dir).agents.removeprefix("tcp://").rsplit(":", 1)
        relay = Relay((host, int(port)))
        # A second node, node0 (first in the scheduler's order), whose agent reaches the
        # coordinator only through the relay: started as the launcher starts its agents.
        log = open(tmp_path / "node0.log", "wb")
        agent = subprocess.Popen(
            [sys.executable, "-m", "fleet.node.agent", "--connect", f"tcp://127.0.0.1:{relay.port}", "--node", "node0",
             "--cores", "0", "--memory", str(1 << 30), "--gpus=", "--preload", ""],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, cwd=tmp_path,
            env={**env(), "FLEET_CURVE": " ".join(agent_keys(run_dir)), "FLEET_HEARTBEAT": "0.5,2.0"})
        wait_for(lambda: any(e.node == "node0" for e in records(run_dir) if isinstance(e, E.NodeJoined)), 30,
                 "node0 to join")
        (tmp_path / "ticker.py").write_text(TICKER)
        suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "cut-off"
[[steps]]
id = "v"
retries = 1
command = {json.dumps([sys.executable, str(tmp_path / "ticker.py"), str(trace)])}
""")
        runner = subprocess.Popen([sys.executable, "-m", "fleet", "run", str(suite), "--run-dir", str(run_dir)],
                                  cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, start_new_session=True)
        wait_for(lambda: ticks(trace)[1], 30, "attempt 1 to tick")
        started = [e for e in records(run_dir) if isinstance(e, E.Started) and e.step == "v"]
        assert [e.node for e in started] == ["node0"], started
        relay.cut.set()  # node0 is cut off: from now on nothing gets through, either way
        out, err = runner.communicate(timeout=120)
        assert runner.returncode == 0, out + err
        got = ticks(trace)
        assert got[2], got
        assert got[1][-1] < got[2][0], (f"attempt 1 still ticked {got[1][-1] - got[2][0]:.3f} s after attempt 2 "
                                        f"started")
        assert got[1][-1] - got[1][0] < 60, "attempt 1 was never stopped"
        retry = [e for e in records(run_dir) if isinstance(e, E.Started) and e.step == "v" and e.attempt == 2]
        assert [e.node for e in retry] == ["node1"], retry
        lost = [e for e in records(run_dir) if isinstance(e, E.Exit) and e.step == "v" and e.attempt == 1]
        assert [e.outcome for e in lost] == ["lost"], lost
        # The cut-off agent stopped on its own and is gone, with all it started.
        wait_for(lambda: agent.poll() is not None, 30, "node0's agent to stop on its own")
        said = (tmp_path / "node0.log").read_text()  # (where it listened: a firewall or a wrong address)
        assert f"stopping: no word from the coordinator at tcp://127.0.0.1:{relay.port} for" in said, said
    finally:
        for p in (runner, agent):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=30)
        if relay is not None:
            relay.close()
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(trace) in " ".join(p.info["cmdline"] or [])]
