"""Control-plane scale with simulated agents (issue 12, benchmark a).

    python benchmarks/control_scale.py            # the recorded runs: writes results/control_scale.json
                                                  # and the "Control-plane scale" section of README.md
    python benchmarks/control_scale.py --agents 20 --steps 200 --work DIR
                                                  # one run, its figures printed (no README); keeps DIR
    python benchmarks/control_scale.py --readme-only   # rewrite the section from the saved results

Each run has three kinds of process, all on 127.0.0.1, each its own process group:

- a real coordinator (fleet.control.coordinator.Coordinator, built by
  `benchmarks/_simagents.py coordinator`) whose launcher starts no agent but writes
  the agents' endpoint and CURVE keys to a 0600 file;
- load generators (`benchmarks/_simagents.py agents`), each hosting up to 4,000
  simulated agents of 64 cores in one process (no forking): one DEALER socket each,
  CURVE, the real messages; Started, then Exited "succeeded" after --duration s;
- this script: it measures the coordinator's process from outside (psutil CPU
  times, /proc VmHWM), submits the suite through fleet.control.client.Client, polls
  Progress once a second (as a `fleet run` would, without its rows), and asks Status
  every 0.2 s from a second thread to time the answers.

Measured per run: join (first Join sent -> the fleet_up record), heartbeat cost
(coordinator CPU over --idle s, every agent joined, no step), submission (Submit sent ->
reply), step starts per second (Launches received by the agents: over the whole suite,
Submit sent -> last Launch; inside the Submit's handling; after it), decision-to-agent
latency (Launch.decided_at -> received, one clock), coordinator CPU per step (Submit ->
done, including the probes' answers; "net" less the heartbeat cost), its peak RSS
(VmHWM) and its RSS every ~10 s of the run, Status answer times during the submission and
the run, and the machine's TCP listen-queue counters during the join. Then events.jsonl
(read_records) must show each step started once and succeeded once; from it too, how long
each step's end waited to be recorded (`exit` line's time - the end its node reported:
reports waiting in the coordinator's socket while it is behind).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for p in (str(REPO), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

import psutil  # noqa: E402

from _scale_extra import loadavg, room_for, slowest, sustained  # noqa: E402
from _simagents import (MAX_PER_PROCESS, check_events, cpu_s, merge_reports, ms, peak_rss_mib,  # noqa: E402
                        start_rates, tcp_counters)
from fleet.control.client import Client  # noqa: E402
from fleet.wire import connection  # noqa: E402
from fleet.wire import messages as P  # noqa: E402

SIM = HERE / "_simagents.py"


# Why a run's directory is on /dev/shm unless --work says otherwise: the simulated nodes
# write every step's done marker (as a node does), but all from one process and on its
# loop, into one local file system. On this machine's disk, writeback held that loop for
# 6-12 s at a time from about 200,000 steps on, so that every agent's heartbeats stopped
# at once and the coordinator lost the 1,000 nodes (benchmarks/README.md, "The simulated
# nodes' markers on disk"). A real node writes on a thread when writes are slow (fleet.node.markers),
# and a thousand nodes' writes do not queue behind one another.
SHM_WHY = "one process writes the markers of every simulated node"


def default_parent() -> str | None:
    """Where the temporary run directory goes: /dev/shm if there is one (see SHM_WHY)."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def env() -> dict:
    """This environment with the repository first on PYTHONPATH (its fleet is the one measured)."""
    path = [str(REPO), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


PREFIX: dict[str, list[str]] = {}  # a process's name -> what its command runs behind (coordinator_core.py: taskset)


class Processes:
    """What one run started, each in its own session; kill() ends them by group."""

    def __init__(self, work: Path):
        self.work = work
        self.procs: list[subprocess.Popen] = []

    def start(self, name: str, argv: list[str]) -> subprocess.Popen:
        with open(self.work / f"{name}.log", "ab") as log:
            p = subprocess.Popen([*PREFIX.get(name, ()), sys.executable, str(SIM), *argv, "--parent-pid", str(os.getpid())],
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env(),
                                 start_new_session=True)
        self.procs.append(p)
        return p

    def wait(self, timeout: float) -> list[str]:
        """Wait for all to exit by themselves; kill the groups of those that did not."""
        deadline, late = time.monotonic() + timeout, []
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                late.append(" ".join(map(str, p.args[p.args.index(str(SIM)) + 1:][:2])) + f" (pid {p.pid})")
        self.kill()
        return late

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()


class StatusProbe(threading.Thread):
    """Asks Status every `every` s on its own socket; keeps (sent at, seconds to answer)."""

    def __init__(self, conn: connection.Connection, every: float = 0.2, timeout: float = 600.0):
        super().__init__(daemon=True)
        self.conn, self.every, self.timeout = conn, every, timeout
        self.samples: list[tuple[float, float]] = []  # (sent at, seconds to the answer)
        self.stop, self.error, self.loop = threading.Event(), None, None  # loop: the last answer's loop figures

    def run(self) -> None:
        c = Client(self.conn)
        try:
            while not self.stop.is_set():
                t0 = time.time()
                self.loop = c.ask(P.Status(), timeout=self.timeout).status.get("loop")
                self.samples.append((t0, time.time() - t0))
                self.stop.wait(self.every)
        except Exception as e:  # reported with the results, never hidden
            self.error = f"{type(e).__name__}: {e}"
        finally:
            c.close()

    def between(self, t0: float, t1: float) -> list[float]:
        """Answer times of the requests sent in [t0, t1]."""
        return [lat for sent, lat in self.samples if t0 <= sent <= t1]


def write_suite(path: Path, run_dir: Path, steps: int) -> Path:
    """N zero-work command steps (nothing runs them: the simulated agents only report)."""
    path.write_text(f'[suite]\nname = "scale"\nrun_dir = "{run_dir}"\nmax_steps = {max(steps, 1)}\n\n'
                    f'[[steps]]\nid = "s/{{i}}"\narray = "1-{steps}"\ncommand = "true"\n')
    return path


def start_fleet(procs: Processes, run: Path, agents: int, duration: float, heartbeat: float,
                deadline: float, profile: str = "", agent_timeout: float = 10.0) -> list:
    """The coordinator and the load generators; the load generators' output files."""
    af = run / "agents.json"
    procs.start("coordinator", ["coordinator", "--run-dir", str(run), "--nodes", str(agents), "--agents-file",
                                str(af), "--heartbeat", str(heartbeat), "--timeout", str(agent_timeout),
                                "--join-timeout", str(deadline),
                                *(["--profile", profile] if profile else [])])
    nproc = math.ceil(agents / MAX_PER_PROCESS)
    width, outs, first = len(str(agents)), [], 1
    for k in range(nproc):
        count = agents // nproc + (1 if k < agents % nproc else 0)
        out = run.parent / f"agents{k}.json"
        outs.append(out)
        procs.start(f"agents{k}", ["agents", "--agents-file", str(af), "--first", str(first), "--count",
                                   str(count), "--width", str(width), "--duration", str(duration),
                                   "--deadline", str(deadline), "--out", str(out)])
        first += count
    return outs


def wait_up(run: Path, procs: Processes, timeout: float) -> connection.Connection:
    deadline = time.monotonic() + timeout
    path = connection.path_in(run)
    while time.monotonic() < deadline:
        if path.exists():
            try:
                return connection.read(path)
            except (connection.ConnectionError_, ValueError):
                pass
        dead = [p.pid for p in procs.procs if p.poll() is not None]
        if dead:
            raise RuntimeError(f"processes {dead} exited before the fleet was up; see {procs.work}/*.log")
        time.sleep(0.05)
    raise RuntimeError(f"the fleet was not up within {timeout:.0f} s; see {procs.work}/coordinator.log")


def helpers_cpu_s(proc: psutil.Process) -> float:
    """CPU seconds of the coordinator's own child processes (this coordinator's launcher
    starts no agent; until 2026-12-02 the journal's fold processes ran during a run):
    those it has reaped (its children's times) and those still running. Coordinator
    work on another core, not in cpu_s."""
    t = proc.cpu_times()
    out = t.children_user + t.children_system
    for c in proc.children(recursive=True):
        try:
            ct = c.cpu_times()
            out += ct.user + ct.system
        except psutil.Error:
            pass
    return out


def loop_cpu_s(proc: psutil.Process) -> float:
    """CPU seconds of the process's main thread (its id is the process's): the coordinator's loop."""
    for t in proc.threads():
        if t.id == proc.pid:
            return t.user_time + t.system_time
    return 0.0


def threads_cpu_s(proc: psutil.Process) -> dict:
    """CPU seconds of the process's threads, summed by name (/proc's comm; digits dropped, so the
    marker writer's threads are one line): where the CPU beside the loop's goes."""
    out: dict[str, float] = {}
    for t in proc.threads():
        try:
            with open(f"/proc/{proc.pid}/task/{t.id}/comm") as f:
                name = "loop" if t.id == proc.pid else f.read().strip().rstrip("0123456789").rstrip("-")
        except OSError:
            continue
        out[name] = out.get(name, 0.0) + t.user_time + t.system_time
    return out


def heartbeat_cost(coord: psutil.Process, loadgens: list[psutil.Process], idle: float) -> dict:
    """Coordinator (and load generator) CPU per second with every agent joined, no steps."""
    time.sleep(min(2.0, idle))  # the join's own work settles first
    c0, l0, t0 = cpu_s(coord), sum(map(cpu_s, loadgens)), time.monotonic()
    time.sleep(idle)
    dt = time.monotonic() - t0
    return {"seconds": round(dt, 2), "coordinator_core_fraction": round((cpu_s(coord) - c0) / dt, 4),
            "loadgen_core_fraction": round((sum(map(cpu_s, loadgens)) - l0) / dt, 4),
            "coordinator_rss_mib": round(coord.memory_info().rss / 2**20, 1)}


def submit_and_run(conn, coord: psutil.Process, suite: Path, steps: int, deadline: float) -> dict:
    """Submit with a Status probe running; poll Progress until done; the coordinator's CPU."""
    probe = StatusProbe(conn)
    c = Client(conn)
    try:
        probe.start()
        time.sleep(0.3)  # a few answers before the submission, for comparison
        cpu0, t0, sys0, load0 = cpu_s(coord), time.time(), coord.cpu_times().system, loadavg()
        loop0, help0 = loop_cpu_s(coord), helpers_cpu_s(coord)
        reply = c.ask(P.Submit(str(suite)), timeout=max(1.0, deadline - time.monotonic()))
        t1, cpu_in, loop_in = time.time(), cpu_s(coord), loop_cpu_s(coord)
        threads_in = threads_cpu_s(coord)
        if not reply.ok:
            raise RuntimeError(f"submission refused: {reply.problems}")
        done, rss, series = False, [], []
        while not done and time.monotonic() < deadline:
            pr = c.ask(P.Progress(reply.submission, since=1 << 40), timeout=max(1.0, deadline - time.monotonic()))
            done = pr.done
            rss.append(coord.memory_info().rss)
            if len(rss) % 10 == 1:  # the coordinator's memory through the run, every ~10 s
                series.append((round(time.time() - t1, 1), round(rss[-1] / 2**20)))
            if not done:
                time.sleep(1.0)
        t2, cpu1, sys1, loop1 = time.time(), cpu_s(coord), coord.cpu_times().system, loop_cpu_s(coord)
        help1, threads1 = helpers_cpu_s(coord), threads_cpu_s(coord)
        time.sleep(0.5)
    finally:
        probe.stop.set()
        probe.join(timeout=30)
        c.close()
    return {"done": done, "counts": pr.counts, "submit_s": round(t1 - t0, 3), "t_submit": t0, "t_submit_reply": t1,
            "t_done_polled": t2,
            "coordinator_cpu_s": round(cpu1 - cpu0, 3), "coordinator_cpu_submit_s": round(cpu_in - cpu0, 3),
            "coordinator_cpu_system_s": round(sys1 - sys0, 3),  # of coordinator_cpu_s: the kernel's
            # Not in coordinator_cpu_s: its fold processes' (another core), to the last Progress.
            "coordinator_helpers_cpu_s": round(help1 - help0, 3),
            # Of coordinator_cpu_s, its main thread's (the loop's; the rest: ZeroMQ's I/O
            # threads, the worker thread, the marker writer's threads).
            "coordinator_loop_cpu_s": round(loop1 - loop0, 3), "coordinator_loop_cpu_submit_s": round(loop_in - loop0, 3),
            # After the submission's reply, by thread name (loop, fleet-markers, ZMQbg/IO, ...).
            "coordinator_threads_cpu_s_after_submission": {k: round(v - threads_in.get(k, 0.0), 3)
                                                           for k, v in sorted(threads1.items())},
            "coordinator_rss_mib_max_sampled": round(max(rss) / 2**20, 1),
            "coordinator_rss_mib_series": series,  # [(s after the submission's reply, MiB)]
            "status_before_submit": ms([lat for s, lat in probe.samples if s < t0]),
            "status_during_submit": ms(probe.between(t0, t1)), "status_during_run": ms(probe.between(t1, t2)),
            "status_probe_error": probe.error, "status_slowest": slowest(probe.samples, t0),
            "coordinator_loop": probe.loop, "loadavg_at_submit": load0, "loadavg_at_done": loadavg()}


def case(work: Path, agents: int, steps: int, duration: float = 0.0, heartbeat: float = 1.0,
         idle: float = 10.0, timeout: float = 300.0, profile: str = "", agent_timeout: float = 10.0) -> dict:
    """One run: agents join, the heartbeat cost, then (steps > 0) the suite. Bounded by timeout."""
    work.mkdir(parents=True, exist_ok=True)
    room_for(work, steps)
    run = work / "run"
    run.mkdir(mode=0o700)
    deadline = time.monotonic() + timeout
    procs = Processes(work)
    res: dict = {"agents": agents, "cores_per_agent": 64, "steps": steps, "step_seconds": duration,
                 "heartbeat_s": heartbeat, "agent_timeout_s": agent_timeout}
    try:
        tcp0 = tcp_counters()
        outs = start_fleet(procs, run, agents, duration, heartbeat, timeout, profile, agent_timeout)
        t_spawn = time.time()
        conn = wait_up(run, procs, deadline - time.monotonic())
        res["up_seen_after_spawn_s"] = round(time.time() - t_spawn, 2)
        res["tcp_during_join"] = {k: v - tcp0.get(k, 0) for k, v in tcp_counters().items()}
        coord = psutil.Process(conn.pid)
        res["coordinator_cpu_during_join_s"] = round(cpu_s(coord), 2)
        gens = [psutil.Process(p.pid) for p in procs.procs[1:]]
        res["heartbeat"] = heartbeat_cost(coord, gens, idle) if idle > 0 else None
        if steps:
            suite = write_suite(work / "suite.toml", run, steps)
            res["run"] = submit_and_run(conn, coord, suite, steps, deadline)
        res["coordinator_peak_rss_mib"] = peak_rss_mib(conn.pid)
        down = Client(conn)
        try:
            down.ask(P.Down(), timeout=30)
        finally:
            down.close()
        res["left_running_killed"] = procs.wait(timeout=60)
    finally:
        procs.kill()
    res["coordinator_exit"] = procs.procs[0].returncode if procs.procs else None
    res["agents_seen"] = merge_reports(outs)
    res["events"] = check_events(run, steps)
    return summarize(res)


def summarize(res: dict) -> dict:
    """The headline figures of one run, computed from its parts."""
    a, ev = res["agents_seen"], res["events"]
    if a["t_connect"] and ev["fleet_up_t"]:
        res["join_s"] = round(ev["fleet_up_t"] - a["t_connect"], 2)
    received = a.pop("received")
    r = res.get("run")
    if r and res["steps"]:
        res.update(start_rates(received, r["t_submit"], r["t_submit_reply"]), starts_sustained=sustained(received))
        hb = (res.get("heartbeat") or {}).get("coordinator_core_fraction", 0.0)
        span = ev["last_exit_t"] - r["t_submit"]
        res["wall_s"] = round(span, 2)  # Submit sent -> the last exit recorded
        res["steps_per_s_end_to_end"] = round(res["steps"] / span, 1) if span > 0 else None
        res["coordinator_cpu_us_per_step"] = round(1e6 * r["coordinator_cpu_s"] / res["steps"], 1)
        net = r["coordinator_cpu_s"] - hb * (r["t_done_polled"] - r["t_submit"])
        res["coordinator_cpu_us_per_step_net_of_heartbeats"] = round(1e6 * net / res["steps"], 1)
        # The steps' own cycle (start, exit, records), the submission (read, checked, entered) apart.
        after = r["coordinator_cpu_s"] - r["coordinator_cpu_submit_s"]
        res["coordinator_cpu_us_per_step_after_submission"] = round(1e6 * after / res["steps"], 1)
        helpers = r.get("coordinator_helpers_cpu_s", 0.0)  # (runs recorded before it: not measured)
        res["coordinator_and_helpers_cpu_us_per_step"] = round(1e6 * (r["coordinator_cpu_s"] + helpers) / res["steps"], 1)
        res["coordinator_and_helpers_cpu_us_per_step_after_submission"] = round(1e6 * (after + helpers) / res["steps"], 1)
        loop_after = r["coordinator_loop_cpu_s"] - r["coordinator_loop_cpu_submit_s"]
        res["coordinator_loop_cpu_us_per_step_after_submission"] = round(1e6 * loop_after / res["steps"], 1)
    return res


# -- the recorded runs -----------------------------------------------------------------------------------

RECORDED = [
    # (name, agents, steps, step seconds, heartbeat timeout s, case timeout s)
    ("100 agents, 20,000 zero-length steps", 100, 20_000, 0.0, 10.0, 240),
    ("100 agents, 10,000 steps of 1 s", 100, 10_000, 1.0, 10.0, 200),
    ("1,000 agents, 20,000 zero-length steps", 1000, 20_000, 0.0, 10.0, 300),
    ("1,000 agents, 20,000 zero-length steps, agents' heartbeat timeout 60 s", 1000, 20_000, 0.0, 60.0, 300),
    ("10,000 agents, join and heartbeats only", 10_000, 0, 0.0, 10.0, 400),
]


def recorded(work: Path, only: list[int] | None) -> dict:
    from _nodebench import machine, today
    res = {"benchmark": "control_scale", "command": "python benchmarks/control_scale.py", "date": today(),
           "machine": machine(), "runs": []}
    for k, (name, agents, steps, dur, agent_timeout, timeout) in enumerate(RECORDED):
        if only and k not in only:
            continue
        print(f"{name} ...", flush=True)
        t0 = time.monotonic()
        r = case(work / f"case{k}", agents, steps, dur, timeout=timeout, agent_timeout=agent_timeout)
        r["name"], r["case_wall_s"] = name, round(time.monotonic() - t0, 1)
        r["command"] = (f"python benchmarks/control_scale.py --agents {agents} --steps {steps} --duration {dur:g}"
                        + (f" --agent-timeout {agent_timeout:g}" if agent_timeout != 10 else ""))
        print("  " + json.dumps(headline(r)), flush=True)
        res["runs"].append(r)
    return res


def headline(r: dict) -> dict:
    """The figures printed as each recorded run ends."""
    keys = ("join_s", "steps_per_s_end_to_end", "coordinator_cpu_us_per_step", "coordinator_peak_rss_mib",
            "starts_per_s", "starts_per_s_in_submission", "starts_per_s_after_submission")
    run = r.get("run") or {}
    return {**{k: r.get(k) for k in keys}, "heartbeat_core": (r.get("heartbeat") or {}).get("coordinator_core_fraction"),
            "latency": r["agents_seen"]["decision_to_agent"], "submit_s": run.get("submit_s"),
            "status_during_submit": run.get("status_during_submit"), "each_step_once": r["events"]["each_step_once"],
            "exit_to_record": {k: v for k, v in r["events"].get("exit_to_record", {}).items() if k != "by_window"}}


# -- the README section ------------------------------------------------------------------------------

SECTION = "## Control-plane scale (simulated agents)"

NOT_MADE = """\
| the issue's run | made here? |
|---|---|
| 100, 1,000, 10,000 agents x 200k zero-length steps | yes: 100 agents (results/control_scale_200k.json: 874 starts/s, 655 us of coordinator CPU per step), 1,000 and 10,000 agents (results/control_scale_1000x200k.json, control_scale_10000x200k.json: 1,559-2,602 starts/s, 380-630 us per step) |
| 1M steps of 1 s | 1,000 agents: yes (above, "A million steps of 1 s": 755 starts/s on the loaded machine, 22 min; and three runs on a quiet machine, 2,600-3,000 starts/s, 6 min each; each step once in all); 100 and 10,000 agents: no (not made this round) |
| a 1,000,000-step suite submitted in < 60 s while status answers in < 1 s | yes, with 2 simulated agents (benchmarks/million_submit.py): entered in 36.4 s, status max 57 ms (load 1.8: met); 92.7 s, status max 1.1 s with the machine at load 7 |
"""


LIMITS = """\
### What limits scale in the coordinator (seen in these runs)

Found with the first version of this benchmark (commit 0df97d8); line numbers are of
that commit. Three have since been changed, and the figures above are after the change:

- **A submission was handled, and every step that fit started, before the reply**
  (`_submit` -> `_act` in one loop turn): a Status request sent during a 20,000-step
  submission waited 7-23 s for all of it. Since then the suite is read, checked and its
  markers read on a worker thread, entered in parts, and decisions are acted on within
  a per-turn budget (fleet/control/intake.py, worker.py): status during the submission
  now answers in tens of milliseconds (the "during submit" column).
- **Per-step files on the start and exit path**: each start claims the step on disk
  (`fleet/control/store.py:91-135`: mkdir, an O_EXCL claim file, a completion-marker
  look, a directory listing of attempts) and each exit writes an attempt record and the
  done marker (write aside + rename each) and removes the claim
  (`fleet/control/outcomes.py:51-62`, `fleet/control/coordinator.py:257-258`): about ten
  metadata operations per step, on local disk here, most of the ~1 ms of coordinator
  CPU per step measured above. Profiled (`--agents 100 --steps 10000 --profile FILE`,
  cProfile, which slows it): of ~25 s of coordinator time, claiming took 6.2 s, the exit's
  records 4.5 s and releasing the claim 1.2 s, about half; `spec_hash` (for the done
  marker) 1.8 s of that; decoding messages 1.4 s, event records 1.4 s, building Launch
  messages 1.4 s, checking the submitted suite 1.4 s. In that slowed run 37 of the 100
  agents were declared lost (next item).
- **A turn takes up to 1,000 agent messages before it looks at the clients**
  (`fleet/control/transport.py:23`, `DRAIN_BATCH`; `fleet/control/coordinator.py:110-113`):
  at ~1 ms per exit handled, a Status request waits up to about a second behind a full
  batch of exits (the "during run" column).
- **Heartbeats are one message each way per agent per interval**
  (`fleet/control/liveness.py:96-112` sends one to every agent every `heartbeat_s`; each
  agent's is decoded and looked up, `fleet/control/coordinator.py:194-205`): linear in
  the agents, tens of microseconds each; see the heartbeat column at 10,000 agents.
- **Joining was quadratic, and the agent socket's listen backlog was ZeroMQ's default
  (100)** (both changed since): `Liveness.join` counted the live agents on every join,
  and the agent socket was bound without `zmq.BACKLOG`, so 10,000 agents connecting at
  once overflowed the listen queue and the kernel made them retry after 1, 3, 7, 15 ... s
  (the `tcp_during_join` counters in the JSON file: ListenOverflows and TCPSynRetrans;
  they are the machine's, so other work adds to them). The join took 69-132 s then, and
  47 s in the run before the change on a quiet machine; now the count is taken only once
  enough agents have joined and the backlog is 8,192 (capped by net.core.somaxconn,
  4,096 here), and the join is the figure in the table above.
- **The coordinator's own stall was taken for lost agents** (changed since: silence is
  judged only after the agents' messages are drained, and never over the loop's own
  stalls, fleet/control/liveness.py): an agent's `last_seen` is
  renewed only when the loop reads its message (`fleet/control/liveness.py:86`), and
  `beat()` declares lost every agent not heard for `timeout_s`
  (`fleet/control/liveness.py:103`). A Submit handled for longer than the timeout (10 s
  by default) therefore loses every agent at the next beat, although their heartbeats
  were waiting in the socket: the 1,000-agent run with the default timeout ended with
  every step `lost` (the agents were told to shut down). The same run with a 60 s timeout
  completes; its figures are the ones to read for the coordinator's cost.
- **Coordinator memory grows with connections and with steps**: with 10,000 agents joined
  and idle its RSS was 0.7-1.6 GiB across runs, of which the scheduler's 10,000 nodes of
  64 cores are ~17 MiB (measured separately), so presumably per-connection ZeroMQ/CURVE
  state and queued messages (not broken down here). A 20,000-step suite raised the peak
  by ~150 MiB with 100 agents and ~370-550 MiB with 1,000 (the idle figures are in the
  JSON file): at that rate a 1M-step suite would need several GiB. Not broken down here.
"""


def _f(x, unit: str = "", nd: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.{nd}f}{unit}" if isinstance(x, float) else f"{x:,}{unit}"


def _row(r: dict) -> str:
    hb = r.get("heartbeat") or {}
    run = r.get("run") or {}
    lat = r["agents_seen"]["decision_to_agent"]
    sub, dur = run.get("status_during_submit", {}), run.get("status_during_run", {})
    # A few Launches queued at the reply are no rate of their own.
    after = r.get("starts_per_s_after_submission") if r.get("starts_after_submission", 0) >= r["steps"] / 20 else None
    cells = [r["name"], _f(r.get("join_s"), " s"), _f(100 * hb.get("coordinator_core_fraction", float("nan")), " %"),
             _f(run.get("submit_s"), " s", 2), _f(r.get("starts_per_s"), "", 0),
             f"{_f(r.get('starts_per_s_in_submission'), '', 0)} / {_f(after, '', 0)}",
             f"{_f(lat.get('p50_ms'), '', 2)} / {_f(lat.get('p99_ms'), '', 1)} ms" if lat.get("n") else "-",
             _f(r.get("coordinator_cpu_us_per_step"), "", 0) + (
                 f" ({_f(r.get('coordinator_cpu_us_per_step_net_of_heartbeats'), '', 0)})" if run else ""),
             _f(r.get("coordinator_peak_rss_mib"), " MiB", 0),
             f"{_f(sub.get('max_ms'), '', 0)} / {_f(dur.get('p50_ms'), '', 0)} / {_f(dur.get('max_ms'), '', 0)} ms"
             if run else "-",
             _outcome(r)]
    return "| " + " | ".join(cells) + " |"


def _outcome(r: dict) -> str:
    counts = (r.get("run") or {}).get("counts", {})
    return "-" if not r["steps"] else "yes" if r["events"]["each_step_once"] else (
        "**no**: " + ", ".join(f"{n:,} {k}" for k, n in sorted(counts.items())))


def section(res: dict) -> str:
    """The README section for a recorded result (the tables, the targets, the commands)."""
    m = res["machine"]
    by = {r["agents"]: r for r in res["runs"]}
    L = [SECTION, "",
         f"`{res['command']}` ({res['date']}, {m['cpus']} cores: {m['cpu']}, load average "
         f"{m['loadavg_at_start'][0]} at the start, commit {m['code']['commit'][:7]}; results in "
         "[results/control_scale.json](results/control_scale.json); load generator in "
         "[_simagents.py](_simagents.py)). A real coordinator in its own process, agents simulated "
         "in load-generator processes (up to 4,000 each, no forking) over real ZeroMQ with CURVE, "
         "64 cores each; nothing runs a step. See the script's docstring for how each figure is taken.", "",
         "| run | join all | heartbeats (coordinator, % of a core) | submit | starts/s, whole suite | "
         "starts/s in / after the submission | decision -> agent p50 / p99 | coordinator CPU us/step "
         "(net of heartbeats) | coordinator peak RSS | status: max during submit / p50, max during run | "
         "each step once |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    L += [_row(r) for r in res["runs"]]
    L += ["", "Each run alone: " + "; ".join(f"`{r['command']}`" for r in res["runs"]) + ".", "",
          "### Against the issue's targets", "", "| target | measured here | |", "|---|---|---|"]
    L += _targets(by)
    L += ["", "### Which of the issue's runs were made", "", NOT_MADE, LIMITS]
    return "\n".join(L)


def _targets(by: dict) -> list[str]:
    k, t = by.get(1000, {}), by.get(10_000, {})
    hb = (t.get("heartbeat") or {}).get("coordinator_core_fraction")
    join = t.get("join_s")
    ok = lambda c: "met" if c else "**not met**"  # noqa: E731
    rows = [("&ge; 10,000 step starts/s through one coordinator with 1,000 agents",
             f"{_f(k.get('starts_per_s'), '', 0)} /s (whole 20,000-step suite)",
             ok((k.get("starts_per_s") or 0) >= 10_000)),
            ("&le; 100 us of coordinator CPU per step (1,000 agents)", f"{_f(k.get('coordinator_cpu_us_per_step'), ' us', 0)}",
             ok((k.get("coordinator_cpu_us_per_step") or 1e9) <= 100)),
            ("10,000 agents joined in < 30 s", f"{_f(join, ' s')}", ok(join is not None and join < 30)),
            ("heartbeats < 5 % of one core (10,000 agents)", f"{_f(100 * hb if hb is not None else None, ' %')}",
             ok(hb is not None and hb < 0.05)),
            ("1,000,000-step suite submitted in < 60 s, status < 1 s meanwhile",
             "36.4 s, status max 57 ms (machine at load 1.8); 92.7 s, 1.1 s at load 7 (benchmarks/million_submit.py)",
             "met (lightly loaded machine)")]
    return [f"| {a} | {b} | {c} |" for a, b, c in rows]


def write_readme(res: dict) -> None:
    from readme_section import write_section
    write_section(SECTION, section(res))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, help="one run of this many agents (else: the recorded runs)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--duration", type=float, default=0.0, help="seconds each step takes")
    ap.add_argument("--heartbeat", type=float, default=1.0)
    ap.add_argument("--agent-timeout", type=float, default=10.0, help="the coordinator's heartbeat timeout (fleet's default)")
    ap.add_argument("--idle", type=float, default=10.0, help="seconds of heartbeats measured with no step")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--work", help="directory to run in (kept); default a temporary one (removed), on "
                    "/dev/shm where there is one (see SHM_WHY)")
    ap.add_argument("--profile", default="", help="cProfile the coordinator of a single run into this file")
    ap.add_argument("--only", default="", help="indices of the recorded runs to make (e.g. 0,3)")
    ap.add_argument("--readme-only", action="store_true")
    ap.add_argument("--out", help="one run: write its results (no per-step lists) to this JSON file")
    args = ap.parse_args(argv)
    if args.readme_only:
        write_readme(json.loads((HERE / "results" / "control_scale.json").read_text()))
        return 0
    with tempfile.TemporaryDirectory(prefix="fleet-scale-", dir=default_parent()) as tmp:
        work = Path(args.work).resolve() if args.work else Path(tmp)
        if args.agents:
            from _nodebench import machine
            m = machine()  # the load average at the start, the commit
            r = case(work, args.agents, args.steps, args.duration, args.heartbeat, args.idle, args.timeout,
                     str(Path(args.profile).resolve()) if args.profile else "", args.agent_timeout)
            print(json.dumps(r, indent=1))
            if args.out:
                r["machine"], r["command"] = m, "python benchmarks/control_scale.py " + " ".join(argv or sys.argv[1:])
                Path(args.out).write_text(json.dumps(r, indent=1) + "\n")
            return 0 if (not args.steps or r["events"]["each_step_once"]) else 1
        res = recorded(work, [int(x) for x in args.only.split(",") if x])
    from _nodebench import write_result
    path = write_result("control_scale", res)
    write_readme(res)
    print(f"wrote {path.relative_to(REPO)} and its section of benchmarks/README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
