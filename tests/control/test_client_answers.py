"""What a client takes from the coordinator: an answer is not held to the 1 MiB bound of
what the coordinator takes in (a status answer lists every node: at 10,000 nodes it is
~1.3 MB; found by benchmarks/control_scale.py with 10,000 simulated agents). Real
ZeroMQ sockets with CURVE and the ZAP handler the coordinator uses, on one side the
coordinator's socket set up as fleet.control.transport sets it, on the other the real
Client."""

from __future__ import annotations

import threading

import zmq

from fleet.control.client import Client
from fleet.wire import connection, security
from fleet.wire import messages as P


def test_a_status_answer_over_a_mebibyte_reaches_the_client_whole():
    keys = security.Keys.generate()
    ctx = zmq.Context()
    auth = security.start_authenticator(ctx, keys)
    server = ctx.socket(zmq.ROUTER)
    server.setsockopt(zmq.LINGER, 0)
    server.setsockopt(zmq.MAXMSGSIZE, P.MAX_FRAME)  # as the coordinator's: inbound only
    security.serve(server, keys, "clients")
    port = server.bind_to_random_port("tcp://127.0.0.1")
    nodes = [{"node": f"node{i:05d}", "cores": 64, "free_cores": 0, "memory_used": 123456789, "memory_held": 987654321,
              "state": "joined"} for i in range(16_000)]  # shorter than a real answer's nodes: more of them
    answer = P.encode(P.StatusReply({"nodes": nodes}))
    assert len(answer) > P.MAX_FRAME

    def serve_one() -> None:
        if server.poll(20_000):
            who, request = server.recv_multipart()
            assert isinstance(P.decode(request), P.Status)
            server.send_multipart([who, answer])

    t = threading.Thread(target=serve_one, daemon=True)
    t.start()
    conn = connection.Connection(client=f"tcp://127.0.0.1:{port}", agents="", pid=0, host="", started=0.0,
                                 run_dir="", server_key=keys.server_public, client_public=keys.client_public,
                                 client_secret=keys.client_secret)
    client = Client(conn)
    try:
        reply = client.ask(P.Status(), timeout=20)
    finally:
        client.close()
        t.join(timeout=20)
        server.close(0)
        auth.stop()
        ctx.term()
    assert isinstance(reply, P.StatusReply)
    assert len(reply.status["nodes"]) == 16_000 and reply.status["nodes"][-1]["node"] == "node15999"


# A stand-in for a coordinator answering a Down: the real coordinator's sockets
# (fleet.control.transport), one request, and the answer only once `go` exists; then it ends.
ANSWERS_THEN_ENDS = """
import json, os, sys, time
from fleet.control.transport import Transport
from fleet.wire import messages as P
out, go = sys.argv[1], sys.argv[2]
tr = Transport()
k = tr.keys
with open(out + ".tmp", "w") as f:
    json.dump({"client": tr.client_endpoint, "server_key": k.server_public,
               "client_public": k.client_public, "client_secret": k.client_secret}, f)
os.rename(out + ".tmp", out)
assert tr.client_sock.poll(60_000)
who, request = tr.client_sock.recv_multipart()
assert isinstance(P.decode(request), P.Down)
deadline = time.monotonic() + 60
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.01)
tr.reply(tr.client_sock, who, P.Stopping(3.0))
tr.close()
"""


def test_an_answer_sent_just_before_the_coordinator_ended_is_read_not_taken_for_it_gone(tmp_path):
    # The coordinator answers a Down and ends while the client's wait is between two polls
    # (here: in its tunnel check, which lets the stand-in answer and end, then returns).
    # Before 2026-12-07 the wait then found the process gone and raised CoordinatorGone with
    # the answer unread (a CI run's control-plane benchmark failed so).
    import json
    import os
    import signal
    import socket
    import subprocess
    import sys

    from fleetharness import wait_for

    out, go = tmp_path / "endpoint.json", tmp_path / "go"
    proc = subprocess.Popen([sys.executable, "-c", ANSWERS_THEN_ENDS, str(out), str(go)], start_new_session=True)
    try:
        wait_for(out.exists, timeout=30, what="the stand-in coordinator's endpoint")
        e = json.loads(out.read_text())
        conn = connection.Connection(client=e["client"], agents="", pid=proc.pid, host=socket.gethostname(),
                                     started=0.0, run_dir=str(tmp_path), server_key=e["server_key"],
                                     client_public=e["client_public"],
                                     client_secret=e["client_secret"])
        looked = []

        def tunnel_check() -> str:  # called after a poll that found nothing
            if not looked:
                go.touch()
                proc.wait(timeout=30)  # answered and ended: reaped, so its pid is no process now
            looked.append(1)
            return ""

        client = Client(conn)
        client.broken = tunnel_check
        try:
            reply = client.ask(P.Down(), timeout=20)
        finally:
            client.close()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert looked, "the wait never looked past its poll: the race was not set up"
    assert isinstance(reply, P.Stopping) and reply.grace == 3.0
