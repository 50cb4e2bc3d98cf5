"""A node that hears nothing from its coordinator while the coordinator still hears it (a
one-way network cut, for real: a TCP relay that drops what the coordinator sends): its
agent stops its steps on its own after 3/4 of the heartbeat timeout, and everything it
sends still arrives. The exits it relays say the stop was its own ("its agent stopped
it: no word from the coordinator ..."), not the step's nor its neighbours'. While other
nodes live such a step ends as before (`terminated`, retried within its `retries`);
when its node was the fleet's last, the fleet drains first (fleet.control.jobend.last_gone):
the step is interrupted (no attempt, nothing final), nothing becomes `unrunnable` for
want of nodes, and `fleet run` exits 5. Before 2026-12-07 the reason was "killed by
SIGTERM; running beside it on node0: nothing", and a last node's step was an attempt,
its dependents `unrunnable` ("the allocation has no nodes"), exit 1."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import threading

import pytest
from fleetharness import assert_nothing_left, env, fleet, records, wait_for, write_suite
from rawpeer import agent_keys, conn_of

from fleet.wire import events as E

HB = ["--heartbeat", "0.5", "--heartbeat-timeout", "2"]


class OneWayRelay:
    """127.0.0.1:port -> target, both ways, until `cut` is set: then what the target (the
    coordinator) sends is read and dropped; what the agent sends still goes through."""

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
        towards_agent: set[socket.socket] = set()  # the coordinator's side of each pair
        while not self._stop.is_set():
            ready, _, _ = select.select([self.listener, *peer], [], [], 0.05)
            for s in ready:
                if s is self.listener:
                    a = self.listener.accept()[0]
                    b = socket.create_connection(self.target)
                    peer[a], peer[b] = b, a
                    towards_agent.add(b)
                    continue
                if s not in peer:
                    continue
                data = s.recv(1 << 16)
                if not data:
                    other = peer.pop(s)
                    peer.pop(other, None)
                    s.close()
                    other.close()
                elif not (self.cut.is_set() and s in towards_agent):
                    peer[s].sendall(data)
        for s in peer:
            s.close()
        self.listener.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@pytest.mark.parametrize("last", [True, False], ids=["its-last-node", "others-live"])
def test_a_node_that_stops_for_its_coordinators_silence_loses_its_steps_not_fails_them(tmp_path, last):
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", *HB, cwd=tmp_path, check=True, timeout=60)
    relay = agent = runner = None
    try:
        host, port = conn_of(run_dir).agents.removeprefix("tcp://").rsplit(":", 1)
        relay = OneWayRelay((host, int(port)))
        # node0 (first in the scheduler's order) reaches the coordinator only through the relay.
        log = open(tmp_path / "node0.log", "wb")
        agent = subprocess.Popen(
            [sys.executable, "-m", "fleet.node.agent", "--connect", f"tcp://127.0.0.1:{relay.port}", "--node", "node0",
             "--cores", "0", "--memory", str(1 << 30), "--gpus=", "--preload", ""],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, cwd=tmp_path,
            env={**env(), "FLEET_CURVE": " ".join(agent_keys(run_dir)), "FLEET_HEARTBEAT": "0.5,2.0"})
        wait_for(lambda: any(e.node == "node0" for e in records(run_dir) if isinstance(e, E.NodeJoined)), 30,
                 "node0 to join")
        if last:  # node1's agent dies first: node0 is the fleet's last node
            os.kill(next(e.pid for e in records(run_dir) if isinstance(e, E.NodeJoined) and e.node == "node1"),
                    signal.SIGKILL)
            wait_for(lambda: any(e.node == "node1" for e in records(run_dir) if isinstance(e, E.NodeLost)), 30,
                     "node1 to be lost")
        suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "one-way"
[[steps]]
id = "v"
retries = 2
command = "[ $FLEET_ATTEMPT = 1 ] && exec sleep 60; exit 0"
[[steps]]
id = "w/{i}"
array = "1-3"
deps = ["v"]
command = "true"
""")
        runner = subprocess.Popen([sys.executable, "-m", "fleet", "run", str(suite), "--run-dir", str(run_dir)],
                                  cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, start_new_session=True)
        wait_for(lambda: any(e.step == "v" for e in records(run_dir) if isinstance(e, E.Started)), 30, "v to start")
        assert [e.node for e in records(run_dir) if isinstance(e, E.Started)] == ["node0"]
        relay.cut.set()  # from now on node0 hears nothing; the coordinator still hears node0
        out, err = runner.communicate(timeout=120)
        wait_for(lambda: agent.poll() is not None, 30, "node0's agent to stop on its own")
    finally:
        for p in (runner, agent):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=30)
        if relay is not None:
            relay.close()
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert "stopping: no word from the coordinator" in (tmp_path / "node0.log").read_text()
    recs = records(run_dir)
    exits = [e for e in recs if isinstance(e, E.Exit)]
    first = [e for e in exits if e.step == "v" and e.attempt == 1]
    assert len(first) == 1 and "its agent stopped it: no word from the coordinator" in first[0].reason, exits
    assert "running beside it" not in first[0].reason, first
    assert not [r for r in recs if isinstance(r, E.Unrunnable)], recs
    if last:
        assert not [e for e in exits if e.outcome != "interrupted"], exits
        assert runner.returncode == 5, out + err
        assert first[0].outcome == "interrupted", first
        [drained] = [r for r in recs if isinstance(r, E.Drained)]
        assert drained.reason.startswith("the fleet lost its nodes: every agent has stopped, the last (on node0)")
        assert "the fleet lost its nodes" in err.strip().splitlines()[-1], err
        assert not list((run_dir / "steps" / "v" / ".fleet").glob("final.json*"))
    else:  # as before: an attempt, retried (on the node that lives, at the latest), and done
        assert runner.returncode == 0, out + err
        assert first[0].outcome == "terminated", first
        assert [r for r in recs if isinstance(r, E.Drained)] == []
        assert [(e.step, e.node) for e in exits if e.outcome == "succeeded" and e.step == "v"] == [("v", "node1")]
    assert_nothing_left(run_dir)
