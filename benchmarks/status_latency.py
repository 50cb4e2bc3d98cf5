"""`fleet status`: how long a status request takes with 1,000 steps in flight, and
whether 100 status requests per second slow a run down.

    python benchmarks/status_latency.py               # writes benchmarks/results/status_latency.json
                                                      # and the "Status" section of benchmarks/README.md
    python benchmarks/status_latency.py --quick       # smaller, for a smoke test (no README)

Three parts, in this order, in one run:

1. real fleet (`fleet up --nodes 2`, one core per pretend node): a suite of 1,000
   `fleet_bench_steps:sleep` steps (600 s each) is submitted. This machine runs 2 at a
   time, so "in flight" is 1,000 submitted and unfinished: 2 running, 998 ready. Then
   300 status requests one after the other through fleet.control.client.Client (CURVE, TCP on
   127.0.0.1, msgpack), each timed from send to decoded answer; and 5 runs of the real
   `fleet status --json` command, which add Python's start-up and imports.
2. in-process coordinator (fleet.control.coordinator.Coordinator, no agents started): two
   pretend agents (DEALER sockets holding the agent keys) join as nodes of 1,000 cores
   each; a keyed client submits a suite of 1,000 one-core steps through the client
   socket, and the coordinator handles it exactly as it would in a fleet (decode,
   _on_client, _submit, scheduler.handle, 1,000 Launch messages over ZeroMQ to the
   pretend agents, which never run them). So 1,000 steps are really RUNNING in the
   scheduler. Timed: status() called directly (the coordinator's own cost) and a full
   request/answer over the client socket (client send -> coordinator poll, decode,
   status(), encode, send -> client receive), driven in one thread, so there is no
   queueing behind other work in these figures.
3. load: on one `fleet up --nodes 2`, a suite of no-op steps (throughput-bound: the
   most sensitive to anything that delays the coordinator's loop), run REPS times
   without and REPS times with a 100 Hz status poller (a separate process asking
   Status 100 times a second through Client, as `fleet status --watch` would at
   --interval 0.01), alternating which comes first. The makespan of each run is read
   from events.jsonl (first `start` to last `exit` of that suite). Reported: the
   makespans, the median ratio with/without, each adjacent pair's ratio, the spread of
   the runs without a poller (the noise floor), and the poller's own latencies while
   the suite ran.

On this 2-core machine the poller, the `fleet run` client, the coordinator, two agents,
two zygotes and the steps all share the same 2 cores: part 3 includes the poller's own
CPU use, which a poller on a login node would not take from the fleet.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import zmq  # noqa: E402

from _nodebench import (Fleet, bench_env, fleet_cli, kill_group, machine, pct, run,  # noqa: E402
                        today, write_result)
from fleet.wire import security  # noqa: E402
from fleet.wire import messages as P
from fleet.control.client import Client  # noqa: E402
from fleet.wire.connection import read as read_connection, path_in  # noqa: E402

from readme_section import write_section  # noqa: E402 (benchmarks/ is sys.path[0])

README = HERE / "README.md"
SECTION = "## Status: latency and load"

# Kept here, not derived from the JSON file: what the repeated runs of part 3 said together.
HISTORY = """\
All four full runs of part 3 on 2026-11-30 (the machine shared with other work, load
average 3-5), same fleet code: median pair ratios 1.08 (4 of 6 pairs slower with the
poller), 0.91 (4 of 10, at load 5.6), 1.13 (9 of 10, sign test p = 0.02) and 1.08 (8 of
10, p = 0.11); 25 of the 36 pairs together were slower (p = 0.03). So here, with the
poller on the fleet's own 2 cores and a run of no-op steps whose pace is set by the
coordinator -> agent -> zygote round trip, a 100 Hz poller probably costs some 5-10% of
makespan: more than the coordinator's CPU for the answers (~0.2 ms each, 2-3% of a core
at 100 Hz) or the poller's own CPU (~3% of a core), so most of it is likely scheduling
delay on 2 oversubscribed cores. Steps that do real work would dilute it; a poller on
another machine would leave only the coordinator's share.
"""


def summary(xs_s: list[float]) -> dict:
    """Latencies in ms."""
    ms = [x * 1000 for x in xs_s]
    return {"n": len(ms), "p50_ms": round(pct(ms, 50), 3), "p95_ms": round(pct(ms, 95), 3),
            "p99_ms": round(pct(ms, 99), 3), "max_ms": round(max(ms), 3), "mean_ms": round(statistics.mean(ms), 3)}


def sleep_suite(path: Path, name: str, steps: int, seconds: float) -> Path:
    path.write_text(f'[suite]\nname = "{name}"\n[[steps]]\nid = "{name}/{{i}}"\narray = "1-{steps}"\n'
                    f'call = "fleet_bench_steps:sleep"\nargs = {{ seconds = {seconds} }}\n')
    return path


def noop_suite(path: Path, name: str, steps: int) -> Path:
    path.write_text(f'[suite]\nname = "{name}"\n[[steps]]\nid = "{name}/{{i}}"\narray = "1-{steps}"\n'
                    f'call = "fleet_bench_steps:noop"\n')
    return path


def events(run_dir: Path) -> list[dict]:
    out = []
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


# -- 1. a real fleet ---------------------------------------------------------------------------

def real_fleet(work: Path, steps: int, requests: int) -> dict:
    fl = Fleet(work / "run", nodes=2, preload=())
    fl.up()
    try:
        conn = read_connection(path_in(fl.run_dir))
        c = Client(conn)
        suite = sleep_suite(work / "inflight.toml", "inflight", steps, 600)
        reply = c.ask(P.Submit(str(suite)), timeout=120)
        assert reply.ok, reply.problems
        deadline = time.monotonic() + 60
        while True:
            st = c.ask(P.Status(), timeout=10).status
            if st["counts"].get("running", 0) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        lat = []
        for _ in range(requests):
            t0 = time.perf_counter()
            st = c.ask(P.Status(), timeout=10).status
            lat.append(time.perf_counter() - t0)
        size = len(P.encode(P.StatusReply(st)))
        c.close()
        cli = []
        for _ in range(5):
            t0 = time.perf_counter()
            r = run(fleet_cli("status", "--run-dir", str(fl.run_dir), "--json"), timeout=60, env=bench_env(),
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            cli.append(time.perf_counter() - t0)
            assert r.returncode == 0, r.stderr
        return {"what": f"real fleet, fleet up --nodes 2 (1 core each): {steps} steps submitted, as many running "
                        "as the machine allows",
                "submitted": steps, "counts_during": st["counts"], "running_total": st["running_total"],
                "answer_bytes": size, "client_ask": summary(lat), "fleet_status_json_command": summary(cli)}
    finally:
        left = fl.down()
        if left:
            print(f"warning: killed leftover pids {left}", file=sys.stderr)


# -- 2. an in-process coordinator with 1,000 running steps ------------------------------------------

class NullLauncher:
    """Starts nothing: the pretend agents are sockets of this process."""

    def start(self, endpoint, nodes, preload, env):
        pass

    def failed(self):
        return None

    def note_failure(self, reason):
        pass

    def stop(self):
        pass


def in_process(work: Path, steps: int, cores: int, calls: int) -> dict:
    from fleet.control.coordinator import Coordinator
    run_dir = work / "inproc"
    run_dir.mkdir()
    coord = Coordinator(run_dir, 2, NullLauncher(), timeout_s=3600.0)
    ctx = zmq.Context()
    socks = []
    try:
        k = coord.keys

        def pump(sock, handler, until, what, timeout=30.0):
            deadline = time.monotonic() + timeout
            while not until():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"timed out: {what}")
                if sock.poll(100):
                    coord._drain(sock, handler)

        agents = []
        for i in (1, 2):
            a = ctx.socket(zmq.DEALER)
            a.setsockopt(zmq.LINGER, 0)
            a.setsockopt(zmq.RCVHWM, 0)
            a.setsockopt(zmq.IDENTITY, f"pnode{i}".encode())
            security.connect_as(a, k.server_public, k.agent_public, k.agent_secret)
            a.connect(coord.agent_endpoint)
            a.send(P.encode(P.Join(node=f"pnode{i}", host="pretend", cores=list(range(cores)), gpus=[],
                                   memory=cores * 2**30, pid=os.getpid(), zygote_pid=0, preload=[])))
            agents.append(a)
            socks.append(a)
        pump(coord.agent_sock, coord._on_agent, lambda: coord.ready, "pretend agents to join")

        cl = ctx.socket(zmq.DEALER)
        cl.setsockopt(zmq.LINGER, 0)
        security.connect_as(cl, k.server_public, k.client_public, k.client_secret)
        cl.connect(coord.client_endpoint)
        socks.append(cl)

        both = zmq.Poller()
        both.register(coord.client_sock, zmq.POLLIN)
        both.register(cl, zmq.POLLIN)

        def ask(msg):
            """One request, the coordinator's side driven as its loop would: poll, drain."""
            cl.send(P.encode(msg))
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                ready = dict(both.poll(1000))
                if coord.client_sock in ready:
                    coord._drain(coord.client_sock, coord._on_client)
                if cl in ready:
                    return P.decode(cl.recv())
            raise RuntimeError("no answer within 60 s")

        idle = [coord.status() for _ in range(3)]
        t_idle = []
        for _ in range(calls):
            t0 = time.perf_counter()
            coord.status()
            t_idle.append(time.perf_counter() - t0)

        suite = sleep_suite(work / "inproc.toml", "inproc", steps, 600)
        t0 = time.perf_counter()
        reply = ask(P.Submit(str(suite)))
        submit_s = time.perf_counter() - t0
        assert reply.ok, reply.problems
        launches = 0
        deadline = time.monotonic() + 30
        while launches < steps and time.monotonic() < deadline:
            for a in agents:
                while a.poll(0):
                    if isinstance(P.decode(a.recv()), P.Launch):
                        launches += 1
            time.sleep(0.01)
        st = coord.status()
        assert st["counts"].get("running") == steps, st["counts"]

        direct = []
        for _ in range(calls):
            t0 = time.perf_counter()
            st = coord.status()
            direct.append(time.perf_counter() - t0)
        rt = []
        for _ in range(calls):
            t0 = time.perf_counter()
            reply = ask(P.Status())
            rt.append(time.perf_counter() - t0)
        assert reply.status["running_total"] == steps
        return {"what": f"in-process Coordinator, 2 pretend nodes of {cores} cores joined over the agent socket, "
                        f"{steps} one-core steps submitted over the client socket: all RUNNING",
                "launches_received_by_pretend_agents": launches, "submit_handling_s": round(submit_s, 3),
                "counts": st["counts"], "running_listed": len(st["running"]), "running_total": st["running_total"],
                "answer_bytes": len(P.encode(P.StatusReply(st))),
                "answer_bytes_idle": len(P.encode(P.StatusReply(idle[-1]))),
                "status_call_idle": summary(t_idle), "status_call": summary(direct),
                "request_round_trip": summary(rt)}
    finally:
        for s in socks:
            s.close(0)
        ctx.term()
        for a in coord.agents.values():
            a.alive = False  # pretend agents say no goodbye: do not wait for one
        coord._teardown()


# -- 3. load: makespan with and without a 100 Hz poller ------------------------------------------------

def poller_main(run_dir: str, hz: float, out: str) -> int:
    """The 100 Hz poller (run as a subprocess of this script)."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    c = Client(read_connection(path_in(Path(run_dir))))
    lat, t_start, cpu0 = [], time.monotonic(), time.process_time()
    i = 0
    while not stop:
        t0 = time.perf_counter()
        c.ask(P.Status(), timeout=10)
        lat.append(time.perf_counter() - t0)
        i += 1
        delay = t_start + i / hz - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    dur = time.monotonic() - t_start
    Path(out).write_text(json.dumps({"requests": len(lat), "seconds": dur, "latencies_s": lat,
                                     "cpu_s": time.process_time() - cpu0}))
    c.close()
    return 0


def load(work: Path, steps: int, reps: int, hz: float) -> dict:
    fl = Fleet(work / "load", nodes=2, preload=())
    fl.up()
    coordinator = fl.coordinator()
    runs = []
    try:
        for rep in range(reps):
            order = ("without", "with") if rep % 2 == 0 else ("with", "without")
            for mode in order:
                name = f"r{rep}{mode}"
                suite = noop_suite(work / f"{name}.toml", name, steps)
                poller, stats_file = None, work / f"{name}.poller.json"
                if mode == "with":
                    poller = subprocess.Popen([sys.executable, __file__, "--poll", str(fl.run_dir), "--hz", str(hz),
                                               "--poll-out", str(stats_file)], env=bench_env(),
                                              start_new_session=True)
                    time.sleep(1.0)  # running at its rate before the suite starts
                cpu0 = sum(coordinator.cpu_times()[:2])
                try:
                    r = run(fleet_cli("run", str(suite), "--run-dir", str(fl.run_dir)), timeout=600, env=bench_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                    cpu = sum(coordinator.cpu_times()[:2]) - cpu0
                finally:
                    if poller is not None:
                        poller.send_signal(signal.SIGTERM)
                        try:
                            poller.wait(timeout=30)
                        except subprocess.TimeoutExpired:
                            kill_group(poller.pid)
                            poller.wait()
                if r.returncode != 0:
                    raise RuntimeError(f"fleet run {name} failed: {r.stderr.decode(errors='replace')[-2000:]}")
                ev = [e for e in events(fl.run_dir) if str(e.get("step", "")).startswith(name + "/")]
                starts = [e["t"] for e in ev if e["kind"] == "start"]
                exits = [e["t"] for e in ev if e["kind"] == "exit"]
                ok = sum(1 for e in ev if e["kind"] == "exit" and e["outcome"] == "succeeded")
                entry = {"rep": rep, "mode": mode, "makespan_s": round(max(exits) - min(starts), 3),
                         "succeeded": ok, "coordinator_cpu_s": round(cpu, 3)}
                if poller is not None:
                    p = json.loads(stats_file.read_text())
                    entry["poller"] = {"requests": p["requests"], "rate_hz": round(p["requests"] / p["seconds"], 1),
                                       "cpu_fraction": round(p["cpu_s"] / p["seconds"], 3),
                                       **summary(p["latencies_s"])}
                runs.append(entry)
                print(f"  load {name}: makespan {entry['makespan_s']:.2f} s, coordinator CPU {cpu:.2f} s"
                      + (f", poller {entry['poller']['rate_hz']} Hz, p50 {entry['poller']['p50_ms']} ms, "
                         f"p99 {entry['poller']['p99_ms']} ms" if poller else ""), flush=True)
    finally:
        left = fl.down()
        if left:
            print(f"warning: killed leftover pids {left}", file=sys.stderr)
    without = [r["makespan_s"] for r in runs if r["mode"] == "without"]
    with_ = [r["makespan_s"] for r in runs if r["mode"] == "with"]
    pairs = []
    for rep in range(reps):
        a = next(r["makespan_s"] for r in runs if r["rep"] == rep and r["mode"] == "with")
        b = next(r["makespan_s"] for r in runs if r["rep"] == rep and r["mode"] == "without")
        pairs.append(round(a / b, 3))
    noise = (max(without) - min(without)) / statistics.median(without)
    slower_pairs = sum(1 for x in pairs if x > 1)
    # Two-sided sign test over the pairs: could this many slower pairs be chance?
    n = len(pairs)
    k = max(slower_pairs, n - slower_pairs)
    sign_p = min(1.0, 2 * sum(math.comb(n, i) for i in range(k, n + 1)) / 2 ** n)
    all_poll = [r["poller"] for r in runs if "poller" in r]
    return {"what": f"fleet up --nodes 2; {reps} x 2 runs of {steps} no-op steps, alternating, with and without "
                    f"a {hz:g} Hz status poller",
            "steps": steps, "reps": reps, "hz": hz, "runs": runs,
            "makespan_without_s": without, "makespan_with_s": with_,
            "median_without_s": round(statistics.median(without), 3),
            "median_with_s": round(statistics.median(with_), 3),
            "ratio_of_medians": round(statistics.median(with_) / statistics.median(without), 3),
            "pair_ratios": pairs, "median_pair_ratio": round(statistics.median(pairs), 3),
            "noise_without_range_over_median": round(noise, 3),
            "pairs_slower_with_poller": slower_pairs, "sign_test_p": round(sign_p, 4),
            "pair_ratio_quartiles": [round(pct(pairs, 25), 3), round(pct(pairs, 75), 3)],
            "poller_cpu_fraction_median": round(statistics.median(p["cpu_fraction"] for p in all_poll), 3),
            "coordinator_cpu_without_s": [r["coordinator_cpu_s"] for r in runs if r["mode"] == "without"],
            "coordinator_cpu_with_s": [r["coordinator_cpu_s"] for r in runs if r["mode"] == "with"],
            "coordinator_cpu_median_without_s": round(statistics.median(
                r["coordinator_cpu_s"] for r in runs if r["mode"] == "without"), 3),
            "coordinator_cpu_median_with_s": round(statistics.median(
                r["coordinator_cpu_s"] for r in runs if r["mode"] == "with"), 3),
            "poller_requests_median": statistics.median(p["requests"] for p in all_poll),
            "poller_rate_hz_min": min(p["rate_hz"] for p in all_poll),
            "poller_p50_ms_median": round(statistics.median(p["p50_ms"] for p in all_poll), 3),
            "poller_p99_ms_max": max(p["p99_ms"] for p in all_poll)}


# -- report --------------------------------------------------------------------------------------------

def section(res: dict) -> str:
    a, b, c = res["real_fleet"], res["in_process"], res["load"]
    L = [SECTION, "",
         f"`python benchmarks/status_latency.py` ({res['date']}, {res['machine']['cpus']} cores: "
         f"{res['machine']['cpu']}; results in `results/status_latency.json`).", "",
         "### A status request with 1,000 steps in flight", "",
         "| setting | steps | what is timed | p50 | p95 | p99 | max | answer |",
         "|---|---|---|---|---|---|---|---|",
         f"| real fleet, `fleet up --nodes 2` (1 core per node) | 1,000 submitted: "
         f"{a['counts_during'].get('running', 0)} running, {a['counts_during'].get('ready', 0)} ready | "
         f"Client.ask(Status) | {a['client_ask']['p50_ms']} ms | {a['client_ask']['p95_ms']} ms | "
         f"{a['client_ask']['p99_ms']} ms | {a['client_ask']['max_ms']} ms | {a['answer_bytes']} B |",
         f"| real fleet, same | same | the `fleet status --json` command | {a['fleet_status_json_command']['p50_ms']:.0f} ms"
         f" | {a['fleet_status_json_command']['p95_ms']:.0f} ms | - | {a['fleet_status_json_command']['max_ms']:.0f} ms | |",
         f"| in-process Coordinator, 2 pretend nodes x {res['params']['cores']} cores | "
         f"{b['running_total']} RUNNING | status() | {b['status_call']['p50_ms']} ms | {b['status_call']['p95_ms']} ms | "
         f"{b['status_call']['p99_ms']} ms | {b['status_call']['max_ms']} ms | {b['answer_bytes']} B |",
         f"| in-process, same | same | request over the client socket (decode, status(), encode, CURVE, TCP) | "
         f"{b['request_round_trip']['p50_ms']} ms | {b['request_round_trip']['p95_ms']} ms | "
         f"{b['request_round_trip']['p99_ms']} ms | {b['request_round_trip']['max_ms']} ms | |",
         f"| in-process, same nodes | none | status() | {b['status_call_idle']['p50_ms']} ms | "
         f"{b['status_call_idle']['p95_ms']} ms | {b['status_call_idle']['p99_ms']} ms | "
         f"{b['status_call_idle']['max_ms']} ms | {b['answer_bytes_idle']} B |",
         "",
         "The real fleet cannot have 1,000 steps *running* on 2 cores: there, 1,000 are in flight "
         "(submitted, unfinished) and 2 run. The in-process rows are the coordinator itself with "
         f"1,000 steps really running (it sent {b['launches_received_by_pretend_agents']} Launch messages to "
         "the pretend agents); its answer lists the first 500 running steps and the total "
         f"(`running_total`), so its size is bounded. Handling the 1,000-step submission itself took "
         f"{b['submit_handling_s']} s there.", "",
         f"What that costs the loop: with 1,000 steps running, one status() takes "
         f"{b['status_call']['p50_ms']} ms of the coordinator's single thread at the median, so 100 requests a "
         f"second would take about {b['status_call']['p50_ms'] * 10:.0f}% of its time (profiled: about two thirds of "
         f"the call is `Scheduler.running()` building a view of every running step, 1,000 here, of which only 500 "
         f"are listed; about a third is the 500 dicts of the answer). The real-fleet load test below, with 2 steps running, "
         f"cannot show that; it measures the small-fleet case.", "",
         "### 100 status requests per second during a run", "",
         f"{c['reps']} x 2 runs of {c['steps']} no-op steps on `fleet up --nodes 2`, alternating with and "
         f"without a {c['hz']:g} Hz poller (a separate process):", "",
         "| | makespans (s) | median |", "|---|---|---|",
         f"| without poller | {', '.join(f'{x:.2f}' for x in c['makespan_without_s'])} | {c['median_without_s']:.2f} s |",
         f"| with {c['hz']:g} Hz poller | {', '.join(f'{x:.2f}' for x in c['makespan_with_s'])} | {c['median_with_s']:.2f} s |",
         "",
         f"- ratio of medians with/without: **{c['ratio_of_medians']}**; per repetition (with / without, run "
         f"back to back): "
         f"{', '.join(map(str, c['pair_ratios']))} (median {c['median_pair_ratio']}).",
         f"- {c['pairs_slower_with_poller']} of {c['reps']} pairs were slower with the poller (two-sided sign test "
         f"p = {c['sign_test_p']}); pair ratio quartiles {c['pair_ratio_quartiles'][0]}-{c['pair_ratio_quartiles'][1]}. "
         f"The machine's drift is large: the runs without a poller alone spread by "
         f"{100 * c['noise_without_range_over_median']:.0f}% of their median.",
         f"- the poller process itself used {100 * c['poller_cpu_fraction_median']:.0f}% of a core (median), on the "
         f"same 2 cores as the fleet.",
         f"- the coordinator's own CPU time per run (it also runs the scheduler and writes the event log): "
         f"median {c['coordinator_cpu_median_without_s']} s without, {c['coordinator_cpu_median_with_s']} s with "
         f"the poller, whose requests in a run numbered about {c['poller_requests_median']:.0f}: answering them "
         f"costs about {1000 * (c['coordinator_cpu_median_with_s'] - c['coordinator_cpu_median_without_s']) / max(1, c['poller_requests_median']):.2f} "
         f"ms of coordinator CPU each.",
         f"- the poller kept at least {c['poller_rate_hz_min']} Hz; its answers took {c['poller_p50_ms_median']} ms "
         f"at the median (p99 at most {c['poller_p99_ms_max']} ms) while the suite ran.",
         f"- verdict: {res['verdict']}", "",
         "On this machine the poller shares the fleet's 2 cores (on a cluster it would run on a login node or a "
         "laptop, costing the coordinator only the answers), so the ratio is an upper bound.", "",
         HISTORY]
    return "\n".join(L)


def verdict(c: dict) -> str:
    """Judged on the pairs (with and without, back to back), which cancel the machine's drift."""
    ratio, p = c["median_pair_ratio"], c["sign_test_p"]
    lo, hi = c["pair_ratio_quartiles"]
    if p < 0.05 and ratio > 1.02:
        return (f"measurably slower here: {c['pairs_slower_with_poller']} of {c['reps']} pairs slower with the "
                f"poller (sign test p = {p}), median pair ratio {ratio} (quartiles {lo}-{hi})")
    return (f"no slowdown measurable here: {c['pairs_slower_with_poller']} of {c['reps']} pairs slower with the "
            f"poller (sign test p = {p}), median pair ratio {ratio} (quartiles {lo}-{hi})")


def write_readme(text: str) -> None:
    """Add or replace only this section of benchmarks/README.md."""
    write_section(SECTION, text, README)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a small run (no README update)")
    ap.add_argument("--steps", type=int, default=1000, help="steps in flight (parts 1 and 2)")
    ap.add_argument("--cores", type=int, default=1000, help="cores of each pretend node (part 2)")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--load-steps", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=10, help="pairs of runs (even: each order equally often)")
    ap.add_argument("--hz", type=float, default=100.0)
    ap.add_argument("--readme-only", action="store_true", help="rewrite the README section from the saved results")
    ap.add_argument("--poll", help=argparse.SUPPRESS)
    ap.add_argument("--poll-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.poll:
        return poller_main(args.poll, args.hz, args.poll_out)
    if args.readme_only:
        write_readme(section(json.loads((HERE / "results" / "status_latency.json").read_text())))
        return 0
    if args.quick:
        args.steps, args.cores, args.requests, args.load_steps, args.reps = 100, 100, 50, 200, 2
    res = {"benchmark": "status_latency", "command": " ".join(["python", "benchmarks/status_latency.py", *(argv or sys.argv[1:])]),
           "date": today(), "machine": machine(),
           "params": {"steps": args.steps, "cores": args.cores, "requests": args.requests,
                      "load_steps": args.load_steps, "reps": args.reps, "hz": args.hz}}
    with tempfile.TemporaryDirectory(prefix="fleet-status-bench-") as tmp:
        work = Path(tmp)
        print("1. real fleet, 1,000 steps in flight", flush=True)
        res["real_fleet"] = real_fleet(work, args.steps, args.requests)
        print(f"   {res['real_fleet']['client_ask']}", flush=True)
        print("2. in-process coordinator, 1,000 steps running", flush=True)
        res["in_process"] = in_process(work, args.steps, args.cores, args.requests)
        print(f"   status() {res['in_process']['status_call']}\n   round trip {res['in_process']['request_round_trip']}",
              flush=True)
        print("3. load: makespan with and without a 100 Hz poller", flush=True)
        res["load"] = load(work, args.load_steps, args.reps, args.hz)
    c = res["load"]
    slower = c["median_pair_ratio"] - 1
    res["verdict"] = verdict(c)
    print(f"verdict: {res['verdict']}")
    if args.quick:
        print(json.dumps(res, indent=1))
        return 0
    path = write_result("status_latency", res)
    write_readme(section(res))
    print(f"wrote {path.relative_to(HERE.parent)} and the section {SECTION!r} of {README.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
