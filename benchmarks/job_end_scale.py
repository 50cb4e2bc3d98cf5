"""A batch job ended under a big fleet: what the coordinator pays when every agent at once
relays its running steps as interrupted, drops its queued ones and says goodbye naming
SIGTERM (fleet.node.jobend, fleet.control.jobend), measured with simulated agents.

    python benchmarks/job_end_scale.py --agents 1000 --steps 100000 --out F

A real coordinator (benchmarks/_simagents.py's host; its launcher starts nothing) and
load generators speaking the real protocol over real ZeroMQ with CURVE, each agent of 64
cores with a node window (FLEET_SIM_WINDOW=cores, a real fleet's default). The suite's
steps take an hour: once every core runs one (and the windows are full), SIGUSR1 to the
load generators plays the batch system's SIGTERM (SimAgents.job_end). Measured from that
moment: when the coordinator recorded the drain, when the submission was answered done
(`fleet run` would exit 3), its CPU in between (per step interrupted and per node lost),
`fleet status`'s answer times meanwhile; and from events.jsonl that every running step
ended interrupted exactly once, none lost, retried, blocked or unrunnable, the rest
`not_started`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import psutil  # noqa: E402

from control_scale import Processes, StatusProbe, loop_cpu_s, ms, start_fleet, wait_up, write_suite  # noqa: E402
from _simagents import cpu_s, peak_rss_mib  # noqa: E402
from fleet.control.client import Client  # noqa: E402
from fleet.wire import messages as P  # noqa: E402

HOUR = 3600.0


def run(work: Path, agents: int, steps: int, timeout: float) -> dict:
    os.environ.setdefault("FLEET_SIM_WINDOW", "cores")  # read by the coordinator and the load generators
    work.mkdir(parents=True, exist_ok=True)
    rd = work / "run"
    rd.mkdir(mode=0o700)
    deadline = time.monotonic() + timeout
    procs = Processes(work)
    res: dict = {"agents": agents, "cores_per_agent": 64, "steps": steps, "window": os.environ["FLEET_SIM_WINDOW"]}
    try:
        start_fleet(procs, rd, agents, HOUR, 1.0, timeout, agent_timeout=60.0)
        conn = wait_up(rd, procs, deadline - time.monotonic())
        coord = psutil.Process(conn.pid)
        suite = write_suite(work / "suite.toml", rd, steps)
        c = Client(conn)
        reply = c.ask(P.Submit(str(suite)), timeout=max(1.0, deadline - time.monotonic()))
        assert reply.ok, reply.problems
        full = min(steps, agents * 64)
        while time.monotonic() < deadline:  # every core busy (and the windows filled)
            counts = c.ask(P.Progress(reply.submission, since=1 << 40), timeout=60).counts
            if counts.get("running", 0) >= full:
                break
            time.sleep(0.5)
        res["counts_at_end"] = counts
        time.sleep(2.0)  # the last launches' windows settle
        probe = StatusProbe(conn)
        probe.start()
        time.sleep(0.5)
        cpu0, loop0, t_end = cpu_s(coord), loop_cpu_s(coord), time.time()
        for p in procs.procs[1:]:
            os.kill(p.pid, signal.SIGUSR1)
        done = False
        while not done and time.monotonic() < deadline:
            done = c.ask(P.Progress(reply.submission, since=1 << 40), timeout=60).done
            if not done:
                time.sleep(0.1)
        t_done, cpu1, loop1 = time.time(), cpu_s(coord), loop_cpu_s(coord)
        probe.stop.set()
        probe.join(timeout=30)
        res.update(done=done, coordinator_cpu_s=round(cpu1 - cpu0, 3), coordinator_loop_cpu_s=round(loop1 - loop0, 3),
                   end_to_done_s=round(t_done - t_end, 3), status_during=ms(probe.between(t_end, t_done)),
                   status_probe_error=probe.error, coordinator_peak_rss_mib=peak_rss_mib(conn.pid))
        c.ask(P.Down(), timeout=60)
        c.close()
        res["left_running_killed"] = procs.wait(timeout=120)
    finally:
        procs.kill()
    res["events"] = _check(rd, t_end, steps)
    n = res["events"]["interrupted"]
    res["coordinator_cpu_us_per_interrupted_step"] = round(1e6 * res["coordinator_cpu_s"] / max(1, n), 1)
    res["coordinator_cpu_ms_per_node"] = round(1e3 * res["coordinator_cpu_s"] / agents, 3)
    return res


def _check(rd: Path, t_end: float, steps: int) -> dict:
    """What events.jsonl says of the job's end (each line parsed once)."""
    out = {"interrupted": 0, "exits_other": 0, "lost": 0, "unrunnable": 0, "retry": 0, "blocked": 0,
           "nodes_lost": 0, "not_started": None, "drained_reason": None}
    exited: set = set()
    twice = 0
    with open(rd / "events.jsonl") as f:
        for line in f:
            e = json.loads(line)
            k = e["kind"]
            if k == "exit":
                if e["step"] in exited:
                    twice += 1
                exited.add(e["step"])
                if e["outcome"] == "interrupted":
                    out["interrupted"] += 1
                else:
                    out["exits_other"] += 1
                    out["lost"] += e["outcome"] == "lost"
            elif k in ("unrunnable", "retry", "blocked"):
                out[k] += 1
            elif k == "node_lost":
                out["nodes_lost"] += 1
            elif k == "drained":
                out["drained_reason"], out["drained_after_s"] = e["reason"], round(e["t"] - t_end, 3)
            elif k == "not_started":
                out["not_started"], out["not_started_after_s"] = e["steps"], round(e["t"] - t_end, 3)
    out["exited_twice"] = twice
    out["all_accounted"] = out["interrupted"] + (out["not_started"] or 0) == steps
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=100000)
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--work", required=True, help="directory to run in (must not exist)")
    ap.add_argument("--out", required=True, help="the results (JSON)")
    args = ap.parse_args(argv)
    res = run(Path(args.work), args.agents, args.steps, args.timeout)
    res["command"] = f"python benchmarks/job_end_scale.py --agents {args.agents} --steps {args.steps}"
    res["when"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))
    return 0 if res["done"] and res["events"]["all_accounted"] else 1


if __name__ == "__main__":
    sys.exit(main())
