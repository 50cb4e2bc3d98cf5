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
