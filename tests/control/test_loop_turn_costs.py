"""What each loop turn of the coordinator costs besides its messages (issue 12,
benchmark b): on a small fleet a turn carries about one step, so what a turn does
whatever it carries is paid per step. Once every agent has joined, the loop no longer
asks the launcher whether an agent process died before joining (a wait4 per agent
process, every turn); a drain stops when ZeroMQ says nothing more waits instead of at
a receive that raises zmq.Again. Real processes, real ZeroMQ under CURVE; counts of
calls, not times, so load does not move them."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq

from fleetharness import assert_nothing_left, fleet, write_suite

from fleet.control import transport as T
from fleet.wire import messages as P
from fleet.wire import security

STEPS = 40
TIMEOUT = 60.0


def _tracer_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("TracerPid:"):
                return int(line.split()[1])
    return 0


def _counts(path: Path) -> dict[str, int]:
    """strace -c's table: calls by system call."""
    out = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
            out[parts[-1]] = int(parts[3])
    return out


@pytest.mark.skipif(shutil.which("strace") is None or not sys.platform.startswith("linux"), reason="needs strace")
def test_a_coordinator_that_is_up_waits_for_no_agent_process_in_its_loop_turns(tmp_path):
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", f'[suite]\nname = "t"\nrun_dir = "{run_dir}"\n\n'
                        f'[[steps]]\nid = "s/{{i}}"\narray = "1-{STEPS}"\ncall = "os:getpid"\n')
    fleet("up", "--local", "--run-dir", str(run_dir), "--nodes", "2", cwd=tmp_path, check=True, timeout=120)
    out = tmp_path / "strace.txt"
    tracer = None
    try:
        pid = json.loads((run_dir / "fleet.json").read_text())["pid"]
        # The loop's thread only (no -f): ZeroMQ's threads make none of these calls.
        tracer = subprocess.Popen(["strace", "-c", "-p", str(pid), "-o", str(out)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + TIMEOUT
        while _tracer_of(pid) != tracer.pid:
            if tracer.poll() is not None:
                pytest.skip("strace cannot attach here (ptrace not permitted)")
            assert time.monotonic() < deadline, "strace never attached"
            time.sleep(0.01)
        r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        if tracer is not None:
            tracer.send_signal(signal.SIGINT)  # strace writes its table and detaches
            try:
                tracer.wait(timeout=TIMEOUT)
            finally:
                if tracer.poll() is None:
                    os.killpg(tracer.pid, signal.SIGKILL)
                    tracer.wait()
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    calls = _counts(out)
    assert calls.get("poll", 0) >= STEPS, calls  # the loop turned while it was traced
    # Before: a wait4 per agent process every turn (two here, ~1 turn a step: ~80 or more).
    assert calls.get("wait4", 0) == 0, calls
    assert_nothing_left(run_dir)


def test_a_drain_after_a_ready_poll_ends_without_a_receive_that_raises_zmq_again():
    tr = T.Transport()
    ctx = zmq.Context()
    agent = ctx.socket(zmq.DEALER)
    raised: list = []

    def tracer(frame, event, arg):
        if frame.f_code is not T.Transport.drain.__code__:
            return None

        def local(frame, event, arg):
            if event == "exception":
                raised.append(arg[0])
            return local
        return local

    try:
        agent.setsockopt(zmq.IDENTITY, b"node1")
        agent.setsockopt(zmq.LINGER, 0)
        k = tr.keys
        security.connect_as(agent, k.server_public, k.agent_public, k.agent_secret)
        agent.connect(tr.agent_endpoint)
        got: list = []
        handler = lambda ident, msg: got.append(msg)  # noqa: E731
        frame = P.encode(P.Started("s/1", 1, 7, 7, 1.0))
        deadline = time.monotonic() + TIMEOUT
        drains = 0
        for n in range(1, 21):  # one message, two in one ZeroMQ message, one: as agents send them
            agent.send_multipart([frame] * (n % 2 + 1))
            want = sum(m % 2 + 1 for m in range(1, n + 1))
            while len(got) < want:
                assert time.monotonic() < deadline, f"{len(got)} of {want} messages arrived"
                if not tr.agent_sock.poll(100):
                    continue
                sys.settrace(tracer)
                try:
                    tr.drain(tr.agent_sock, handler, None)
                finally:
                    sys.settrace(None)
                drains += 1
        assert drains >= 20 and all(m == P.Started("s/1", 1, 7, 7, 1.0) for m in got)
        assert not [e for e in raised if issubclass(e, zmq.Again)], raised
    finally:
        agent.close(0)
        ctx.term()
        tr.close()
