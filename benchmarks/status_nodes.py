"""`fleet status` at 1,000 and 10,000 nodes: the answer's size, and the time to build and
to answer it, for the default answer and for the whole node table (`--nodes`).

    python benchmarks/status_nodes.py                      # 1,000 and 10,000 nodes
    python benchmarks/status_nodes.py --nodes 1000 --reps 5 --out /tmp/s.json

Two parts per size:

1. in process: a Scheduler that N nodes of 64 cores joined, N agents (the coordinator's
   table of them), and fleet.control.status.answer called REPS times: the coordinator's
   own cost, and the encoded StatusReply's bytes.
2. over the real protocol: a real coordinator (benchmarks/_simagents.py, no agents
   started) that N simulated agents joined over ZeroMQ with CURVE; REPS Status requests
   through fleet.control.client.Client, each timed from send to decoded answer, then the
   whole table as `fleet status --nodes` asks for it (fleet.control.api.Fleet.status with
   nodes=True: one default answer, then pages).

Run from a tree whose code is measured: the tree this file is in comes first on
PYTHONPATH (the "before" figures: this file copied into a checkout of the earlier
commit, where the default answer lists every node and --nodes does not exist).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
for p in (str(HERE.parent), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

from control_scale import Processes, start_fleet, wait_up  # noqa: E402
from fleet.control import status as S  # noqa: E402
from fleet.control.api import Fleet  # noqa: E402
from fleet.control.client import Client  # noqa: E402
from fleet.control.liveness import Agent  # noqa: E402
from fleet.core.decisions import NodeJoined  # noqa: E402
from fleet.core.resources import NodeSpec  # noqa: E402
from fleet.core.scheduler import Scheduler  # noqa: E402
from fleet.wire import messages as P  # noqa: E402


def _ms(xs: list[float]) -> dict:
    xs = sorted(xs)
    return dict(p50_ms=round(1000 * statistics.median(xs), 2), max_ms=round(1000 * xs[-1], 2))


def in_process(n: int, reps: int) -> dict:
    """The coordinator's own cost of a status answer with n nodes."""
    sched = Scheduler()
    agents = []
    for i in range(1, n + 1):
        name = f"node{i}"
        sched.handle(NodeJoined(NodeSpec(name, tuple(range(64)), (), 256 << 30)), 0.0)
        agents.append(Agent(name, name.encode(), "host", 1, time.monotonic(), memory=256 << 30, memory_used=8 << 30))
    times, st = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        st = S.answer(sched, agents, up_since=time.time(), run_dir=Path("/tmp"), failures=[], dropped={},
                      submissions=[])
        times.append(time.perf_counter() - t0)
    enc = []
    for _ in range(reps):
        t0 = time.perf_counter()
        frame = P.encode(P.StatusReply(st))
        enc.append(time.perf_counter() - t0)
    return dict(build=_ms(times), encode=_ms(enc), bytes=len(frame), rows=len(st["nodes"]))


def _all_joined(f: Fleet, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = f.status(timeout=60)
        alive = st["nodes_summary"]["alive"] if "nodes_summary" in st else sum(x["alive"] for x in st["nodes"])
        if alive == n:
            return
        time.sleep(0.5)
    raise RuntimeError(f"{n} agents did not all join within {timeout:.0f} s")


def over_wire(n: int, reps: int, work: Path) -> dict:
    """Status requests to a real coordinator that n simulated agents joined."""
    procs = Processes(work)
    run = work / "run"
    run.mkdir()
    try:
        start_fleet(procs, run, n, duration=0.0, heartbeat=1.0, deadline=600, agent_timeout=120)
        conn = wait_up(run, procs, 300)
        f = Fleet(run, conn)
        _all_joined(f, n, 300)
        c = Client(conn)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            reply = c.ask(P.Status(), timeout=60)
            times.append(time.perf_counter() - t0)
        out = dict(default=dict(_ms(times), bytes=len(P.encode(reply)), rows=len(reply.status["nodes"])))
        full = []
        for _ in range(max(1, reps // 4)):
            t0 = time.perf_counter()
            try:
                st = f.status(timeout=60, nodes=True)
            except TypeError:  # a tree of before --nodes: the default answer is the whole table
                st = f.status(timeout=60)
            full.append(time.perf_counter() - t0)
        out["nodes"] = dict(_ms(full), rows=len(st["nodes"]))
        c.close()
        f.close()
        return out
    finally:
        procs.kill()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "status_nodes.json")
    a = ap.parse_args(argv)
    res = {}
    for n in a.nodes:
        with tempfile.TemporaryDirectory(prefix="fleet-status-nodes-") as tmp:
            res[str(n)] = dict(in_process=in_process(n, a.reps), wire=over_wire(n, a.reps, Path(tmp)))
        print(n, json.dumps(res[str(n)]), flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
