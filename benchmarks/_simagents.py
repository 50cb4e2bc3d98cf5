"""Simulated agents for control-plane benchmarks: many agents in one process, speaking
the real protocol over real ZeroMQ with CURVE, and a coordinator host that starts none.

Two entry points, each its own process (so the coordinator's CPU and memory are
measured apart from the load):

    python benchmarks/_simagents.py coordinator --run-dir D --nodes N --agents-file F ...
        a real fleet.control.coordinator.Coordinator whose launcher starts nothing: it
        writes the agents' endpoint and keys (what a real launcher puts in each agent's
        environment) to F, mode 0600, and the load generator reads them from there.

    python benchmarks/_simagents.py agents --agents-file F --first 1 --count 1000 --width 4 ...
        `count` simulated agents node<first>..: one ZeroMQ context, one epoll, one DEALER
        socket per agent whose identity is its node name, each with the agent keys. Each
        joins (64 cores by default), heartbeats every interval the coordinator's Welcome
        names, and answers each Launch with Started and, after --duration seconds (a timer
        heap; 0: at once), Exited "succeeded"; a Kill with Exited "terminated"; Shutdown
        with Ok("bye"). It runs until every one of its agents was told to shut down, or
        its deadline, and writes what it saw to --out (JSON).

The rest of this module is what benchmarks/control_scale.py reads afterwards: the load
generators' reports merged, start rates, the coordinator's CPU and peak RSS, the
machine's TCP listen counters, and the check of events.jsonl.

Nothing runs a step: what is measured is the coordinator and the wire. Every message is
built with fleet.wire.messages, the codec the real agent and zygote use. Two shortcuts
keep the load generator cheaper than what it measures (it shares the machine): an
agent's heartbeat is encoded once (the same bytes a real agent sends every time), and a
frame equal to the coordinator's heartbeat is counted without being decoded.

The sockets are watched with epoll on their ZMQ_FD, not zmq.Poller: zmq_poll looks at
every socket on every call, which at thousands of sockets made this process, not the
coordinator, the bottleneck. ZMQ_FD only says that a socket's state may have changed,
and a send may consume that signal while a message waits, so a socket is also looked at
after every send (the usual rule for ZMQ_FD).

A pass's Started and Exited reports go per agent as one batch, as fleet.node.agent relays
a read of its zygote's; FLEET_SIM_UNBATCHED=1 sends each alone (this generator before;
a real agent's zygote read at a busy node carries one or two), unless held.
And as fleet.node.agent does, an agent that sent reports less than the coordinator's
report hold ago (Welcome.report_hold_s) holds what comes until the hold has passed.
The coordinator's hold is its default (scaled with the allocation:
fleet.control.liveness.report_hold) unless FLEET_SIM_REPORT_HOLD gives one (seconds; 0:
no hold, as before it existed).

FLEET_SIM_WINDOW=N (or "cores": the node's cores, a real fleet's default) gives the
coordinator a node window (fleet.core.window) and makes these agents keep the queue a
node's zygote keeps (fleet.node.queued): a Launch with ``after`` a step running on that
agent starts the moment that step ends, its Started in the same batch as that Exited; a
Kill with cancel or withdraw of a held launch drops it (Dropped; a withdraw of a started
one does nothing). Unset: window 0, as the recorded
runs were made. FLEET_SIM_WINDOW_DEPTH=D gives the coordinator chains of D steps behind
a running one (`fleet up --window-depth D`, fleet.core.windowchain): a launch may name a
step held here, and starts when that one has run in turn; a dropped held launch hands
the launches that waited for it to the step it waited for (as fleet.node.queued does).
"""

from __future__ import annotations

import argparse
import heapq
import select
import json
import os
import signal
import sys
import time
from collections import deque
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

import psutil  # noqa: E402
import zmq  # noqa: E402

from fleet.node import markers as node_markers  # noqa: E402
from fleet.wire import events as E  # noqa: E402
from fleet.wire import messages as P  # noqa: E402
from fleet.wire import numtext  # noqa: E402
from fleet.wire import security  # noqa: E402
from _reports import merge_reports, ms, pct, start_rates  # noqa: E402,F401  (kept importable from here)

# Each DEALER socket holds a TCP connection and an eventfd; a process may hold 20,000
# descriptors here, so one load generator process serves at most this many agents.
MAX_PER_PROCESS = 4000
UNBATCHED = os.environ.get("FLEET_SIM_UNBATCHED") == "1"
MARKER_S = float(os.environ.get("FLEET_TEST_MARKER_SLEEP_MS") or 0) / 1000  # a node's marker write, modelled
node_markers._SLEEP = 0.0  # (modelled per node here, never slept: see SimAgents.acks)
HOLD = float(os.environ["FLEET_SIM_REPORT_HOLD"]) if os.environ.get("FLEET_SIM_REPORT_HOLD") else None
_WINDOW = os.environ.get("FLEET_SIM_WINDOW", "")
WINDOW = None if _WINDOW == "cores" else int(_WINDOW or 0)  # the coordinator's window: None is the node's cores
DEPTH = int(os.environ.get("FLEET_SIM_WINDOW_DEPTH") or 1)  # steps a chain may hold behind a running one


# -- the coordinator's side ------------------------------------------------------------------

class KeysFileLauncher:
    """A launcher that starts no agent: it hands the agents' endpoint and keys to a
    file (0600, created exclusively) that the load generator reads."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def start(self, endpoint, nodes, preload, env):
        hb, timeout = (float(x) for x in env.get("FLEET_HEARTBEAT", "1,10").split(","))
        data = {"endpoint": endpoint, "nodes": nodes, "curve": env[security.AGENT_ENV],
                "heartbeat_s": hb, "timeout_s": timeout, "pid": os.getpid()}
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, self.path)  # readers see the whole file or none

    def failed(self):
        return None

    def note_failure(self, reason):
        print(f"simagents coordinator: an agent failed: {reason}", file=sys.stderr, flush=True)

    def stop(self):
        pass


def coordinator_main(argv: list[str]) -> int:
    """Run a real coordinator with KeysFileLauncher until it is told to stop."""
    import logging
    ap = argparse.ArgumentParser(prog="_simagents.py coordinator")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--agents-file", required=True)
    ap.add_argument("--heartbeat", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--join-timeout", type=float, default=120.0)
    ap.add_argument("--parent-pid", type=int, default=0)
    ap.add_argument("--profile", default="", help="run the coordinator under cProfile, its stats to this file")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    _die_with_parent(args.parent_pid)
    from fleet.control.coordinator import Coordinator
    # window 0 unless FLEET_SIM_WINDOW says otherwise (see the module's docstring).
    coord = Coordinator(Path(args.run_dir), args.nodes, KeysFileLauncher(Path(args.agents_file)),
                        heartbeat_s=args.heartbeat, timeout_s=args.timeout, join_timeout_s=args.join_timeout,
                        window=WINDOW, report_hold_s=HOLD, window_depth=DEPTH)
    stats = os.environ.get("FLEET_BENCH_STATS")
    if stats:  # collections, turns, messages, scheduler calls (benchmarks/_coordstats.py)
        from _coordstats import install
        write_stats = install(coord, stats)
        try:
            return _serve(coord, args.profile)
        finally:
            write_stats()
    trace = os.environ.get("FLEET_BENCH_TRACEMALLOC")
    if trace:  # what the coordinator holds, by line (benchmarks/coord_memory.py)
        return _traced(coord, trace)
    return _serve(coord, args.profile)


def _serve(coord, profile: str) -> int:
    """coord.serve(), under cProfile (its stats to `profile`) if named."""
    if not profile:
        return coord.serve()
    import cProfile
    prof = cProfile.Profile()
    try:
        return prof.runcall(coord.serve)
    finally:
        prof.dump_stats(profile)


def _traced(coord, path: str) -> int:
    """coord.serve() under tracemalloc: snapshots of what it holds at the end (path) and
    near its peak (path + ".peak": taken by a thread each time the traced size passes
    1.1x the last snapshot's; each snapshot holds the interpreter's lock a while, so
    the run's timings are not the untraced ones)."""
    import threading
    import tracemalloc
    tracemalloc.start(int(os.environ.get("FLEET_BENCH_TRACEMALLOC_FRAMES", "1")))
    best = {"size": 0, "snap": None}
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.5):
            cur = tracemalloc.get_traced_memory()[0]
            if cur > 1.1 * best["size"] and cur > 32 << 20:
                best["snap"], best["size"] = tracemalloc.take_snapshot(), cur
    t = threading.Thread(target=watch, name="bench-tracemalloc", daemon=True)
    t.start()
    try:
        return coord.serve()
    finally:
        stop.set()
        t.join()
        tracemalloc.take_snapshot().dump(path)
        if best["snap"] is not None:
            best["snap"].dump(path + ".peak")
        with open(path + ".json", "w") as f:
            json.dump({"peak_traced_mib": tracemalloc.get_traced_memory()[1] / 2**20,
                       "peak_snapshot_traced_mib": best["size"] / 2**20}, f)


def _die_with_parent(parent: int) -> None:
    """SIGTERM (a clean stop) when the benchmark that started us dies."""
    if not parent:
        return
    from fleet.node.child import set_pdeathsig
    set_pdeathsig(signal.SIGTERM)
    if os.getppid() != parent:
        sys.exit(1)


# -- the agents' side ------------------------------------------------------------------------------

class SimAgents:
    """`count` pretend agents in this process, node names node<first>.. of `width` digits."""

    def __init__(self, conf: dict, first: int, count: int, width: int, cores: int, memory: int,
                 duration: float):
        self.endpoint = conf["endpoint"]
        server, public, secret = conf["curve"].split()
        self.names = [f"node{i:0{width}d}" for i in range(first, first + count)]
        self.cores = list(range(cores))
        self.memory = memory
        self.duration = duration
        self.heartbeat_s = conf["heartbeat_s"]
        self.ctx = zmq.Context(io_threads=1)
        self.ctx.set(zmq.MAX_SOCKETS, count + 64)
        self.socks: list = []
        self.epoll = select.epoll()
        self.by_fd: dict[int, int] = {}
        self.recheck: set[int] = set()  # sockets sent on since they were last read
        self.reports: dict[int, list[bytes]] = {}  # agent -> this pass's reports, encoded
        self.hold_s = 0.0  # the coordinator's report hold (Welcome)
        self.reported_at = [float("-inf")] * count  # agent -> when its reports last went (monotonic)
        self.report_due: float | None = None  # the earliest time a held agent's reports go
        for i, name in enumerate(self.names):
            s = self.ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.IDENTITY, name.encode())
            s.setsockopt(zmq.LINGER, 2000)
            s.setsockopt(zmq.MAXMSGSIZE, P.MAX_FRAME)
            security.connect_as(s, server, public, secret)
            self.socks.append(s)
            fd = s.getsockopt(zmq.FD)
            self.by_fd[fd] = i
            self.epoll.register(fd, select.EPOLLIN)
        self.pid = os.getpid()
        self.their_beat = P.encode(P.Heartbeat("coordinator"))
        self.our_beats = [P.encode(P.Heartbeat(name)) for name in self.names]
        # The coordinator's last clock stamp each agent read, and when: its beats echo it, as
        # a real agent's do (fleet.node.clockecho), so the coordinator's clock measure is paid.
        self.stamps = [0.0] * count
        self.read_at = [0.0] * count
        self.down = [False] * count
        self.n_down = 0
        self.exits: list = []          # heap of (due, agent, step, attempt, decided_at, started, cores)
        self.killed: set = set()
        self.running: set = set()      # (agent, step) running now: what a queued launch may wait for
        self.held: dict = {}           # (agent, step it waits for) -> [Launch]
        self.queued: dict = {}         # (agent, held step) -> the step it waits for (a chain may wait behind it)
        self.beats: deque = deque()    # (due, agent), in due order: one period apart per agent
        self.stats = {"agents": count, "first": first, "launches": 0, "duplicate_launches": 0,
                      "kills": 0, "heartbeats_in": 0, "rejects": [], "errors": [], "send_again": 0,
                      "welcomed": 0}
        self.seen: set = set()
        self.latency: list[float] = []  # decision -> Launch received here, s
        self.received: list[float] = []  # time.time() each Launch was received
        self.first_launch = self.last_launch = self.last_exit = 0.0
        # Done markers the coordinator hands (fleet.control.nodemarkers): written here at once,
        # as a real agent's thread writes them, and said written with the agent's next message,
        # or alone after node_markers.HOLD_S (agent -> (upto, when it was written)). With
        # FLEET_TEST_MARKER_SLEEP_MS each node's writer is modelled, not slept: its files count
        # as written that long apart, each node on its own (as its own thread on its own node);
        # sleeping here would make the hundreds of agents of this process wait for each other.
        self.acks: dict[int, tuple[int, float]] = {}
        self.writing: dict[int, deque] = {}  # agent -> (when written, upto) not yet due
        self.acks_seen = 0.0  # when to look at them again
        self.stats["markers_written"] = 0

    def _ack(self, i: int, frames: list) -> list:
        """frames, with the agent's markers' progress if it has some to say."""
        ack = self.acks.pop(i, None)
        return frames if ack is None else [*frames, P.encode(P.MarkersWritten(ack[0]))]

    def send(self, i: int, msg) -> None:
        held = self.reports.pop(i, None)  # after the reports before it, with them (fleet.node.agent)
        if i in self.acks:
            self.reported_at[i] = time.monotonic()
            self.send_bytes(i, self._ack(i, [*(held or ()), P.encode(msg)]))
        elif held:
            self.reported_at[i] = time.monotonic()
            self.send_bytes(i, [*held, P.encode(msg)])
        else:
            self.send_bytes(i, P.encode(msg))

    def report(self, i: int, msg) -> None:  # a Started or Exited: with the pass's others
        if UNBATCHED and self.hold_s <= 0:
            self.send(i, msg)
        else:  # (unbatched with a hold: held as a real agent holds what it would send alone)
            self.reports.setdefault(i, []).append(P.encode(msg))

    def flush_reports(self) -> None:
        """Send each agent's reports, but those of an agent that sent some within the hold."""
        reports, self.reports, self.report_due = self.reports, {}, None
        now, hold, at = time.monotonic(), self.hold_s, self.reported_at
        for i, frames in reports.items():
            if now - at[i] >= hold:
                at[i] = now
                self.send_bytes(i, self._ack(i, frames))
            else:
                self.reports[i] = frames
                due = at[i] + hold
                if self.report_due is None or due < self.report_due:
                    self.report_due = due

    def send_bytes(self, i: int, frame: bytes | list) -> None:
        try:
            self.socks[i].send_multipart(frame if type(frame) is list else [frame], zmq.NOBLOCK)
        except zmq.Again:
            self.stats["send_again"] += 1
        self.recheck.add(i)

    def connect(self) -> None:
        """Connect every socket and join, beats staggered over one heartbeat period."""
        self.t_connect = time.time()
        for i, s in enumerate(self.socks):
            s.connect(self.endpoint)
            self.send(i, P.Join(node=self.names[i], host="simagents", cores=self.cores, gpus=[],
                                memory=self.memory, pid=self.pid, zygote_pid=self.pid, preload=[]))
        self.t_joins_sent = time.time()
        now = time.monotonic()
        n = len(self.socks)
        self.beats.extend((now + self.heartbeat_s * (i + 1) / n, i) for i in range(n))

    def serve(self, deadline: float) -> str:
        """Until every agent was told to shut down (or the deadline, or SIGTERM): why it stopped."""
        stop, ended = [], []
        signal.signal(signal.SIGTERM, lambda *a: stop.append("SIGTERM"))
        signal.signal(signal.SIGUSR1, lambda *a: ended.append(time.time()))  # benchmarks/job_end_scale.py
        cpu0 = time.process_time()
        while not stop and self.n_down < len(self.socks):
            if ended and "job_end_t" not in self.stats:
                self.job_end(ended[0])
            now = time.monotonic()
            if now > deadline:
                stop.append("deadline")
                break
            due = min(self.beats[0][0] if self.beats else deadline,
                      self.exits[0][0] if self.exits else deadline, deadline,
                      self.report_due if self.report_due is not None else deadline,
                      self.acks_seen if self.acks or self.writing else deadline)
            wait = 0 if self.recheck else max(0.0, due - now)
            ready = {self.by_fd[fd] for fd, _ in self.epoll.poll(wait)}
            ready |= self.recheck
            self.recheck = set()
            for i in ready:
                self._drain(i)
            self._send_exits()
            self.flush_reports()
            self._send_acks()
            self._send_beats()
        self.stats["cpu_s"] = round(time.process_time() - cpu0, 3)
        return stop[0] if stop else "every agent was told to shut down"

    def job_end(self, t: float) -> None:
        """The batch system's SIGTERM to every agent at `t` (SIGUSR1 to this process):
        each agent relays its running steps' ends as interrupted and its queued launches
        as dropped, then says goodbye naming the signal, as fleet.node.agent and its zygote
        do (fleet.node.jobend)."""
        self.stats["job_end_t"] = t
        why = "killed by SIGTERM; its agent got SIGTERM (the job ending: no attempt used)"
        for _, i, step, attempt, decided, started, cores in self.exits:
            now = time.time()
            self.report(i, P.Exited(step=step, attempt=attempt, pid=self.pid, outcome="interrupted", returncode=None,
                                    signal=signal.SIGTERM, decided_at=decided, first_at=started, work_start=started,
                                    work_end=now, ended_at=now, utime=0.0, stime=0.0, maxrss_kb=0, affinity=cores,
                                    placement_ok=True, error=why,
                                    spelt=numtext.exit_numbers(decided, started, started, now, now, 0.0, 0.0)))
        for (i, _), held in self.held.items():
            for m in held:
                self.report(i, P.Dropped(m.step, m.attempt, "its node stopped before it started", stopped=True))
        self.stats["job_end_interrupted"] = len(self.exits)
        self.stats["job_end_dropped"] = sum(map(len, self.held.values()))
        self.exits, self.held = [], {}
        self.queued.clear()
        self.running.clear()
        for i in range(len(self.socks)):
            if not self.down[i]:
                self.send(i, P.Ok("bye", signal="SIGTERM"))  # (with its reports: fleet.node.agent)
                self._down(i)
        self.stats["job_end_sent_s"] = round(time.time() - t, 3)

    def _drain(self, i: int) -> None:
        s = self.socks[i]
        while True:
            try:
                frame = s.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            if frame == self.their_beat:
                self.stats["heartbeats_in"] += 1
                continue
            t = time.time()
            try:
                msg = P.decode(frame)
            except P.ProtocolError as e:
                self.stats["errors"].append(f"{self.names[i]}: {e}")
                continue
            if isinstance(msg, P.Launch):
                self._launch(i, msg, t)
            elif isinstance(msg, P.Heartbeat):
                self.stats["heartbeats_in"] += 1
                if msg.sent:
                    self.stamps[i], self.read_at[i] = msg.sent, time.monotonic()
            elif isinstance(msg, P.Markers):
                self._markers(i, msg)
            elif isinstance(msg, P.Welcome):
                self.stats["welcomed"] += 1
                self.t_last_welcome = t
                self.heartbeat_s = msg.heartbeat_s
                self.hold_s = msg.report_hold_s
                if msg.sent:
                    self.stamps[i], self.read_at[i] = msg.sent, time.monotonic()
            elif isinstance(msg, P.Kill):
                self._kill(i, msg, t)
            elif isinstance(msg, P.Shutdown):
                self.send(i, P.Ok("bye"))
                self._down(i)
            elif isinstance(msg, (P.Reject, P.Error)):
                self.stats["rejects" if isinstance(msg, P.Reject) else "errors"].append(
                    f"{self.names[i]}: {msg.reason}")
                self._down(i)

    def _down(self, i: int) -> None:
        if not self.down[i]:
            self.down[i] = True
            self.n_down += 1

    def _launch(self, i: int, msg: P.Launch, t: float) -> None:
        key = (msg.step, msg.attempt)
        if key in self.seen:
            self.stats["duplicate_launches"] += 1
        self.seen.add(key)
        self.stats["launches"] += 1
        self.latency.append(t - msg.decided_at)
        self.received.append(t)
        self.first_launch = self.first_launch or t
        self.last_launch = t
        # A node's window: start when that one ends (or, in a chain, when that held one has run).
        if msg.after and ((i, msg.after) in self.running or (i, msg.after) in self.queued):
            self.held.setdefault((i, msg.after), []).append(msg)
            self.queued[(i, msg.step)] = msg.after
            self.stats["held"] = self.stats.get("held", 0) + 1
            if (i, msg.after) in self.queued:
                self.stats["held_behind_held"] = self.stats.get("held_behind_held", 0) + 1
            return
        self._start(i, msg, t)

    def _start(self, i: int, msg: P.Launch, t: float) -> None:
        self.queued.pop((i, msg.step), None)
        # As a step's process does on its node (fleet.node.child): its .fleet directory,
        # where the done marker is written without a mkdir of its own.
        os.makedirs(os.path.join(os.path.dirname(msg.log), ".fleet"), exist_ok=True)
        self.report(i, P.Started(msg.step, msg.attempt, self.pid, self.pid, t))
        self.running.add((i, msg.step))
        item = (time.monotonic() + self.duration, i, msg.step, msg.attempt, msg.decided_at, t, tuple(msg.cores))
        if self.duration <= 0:
            self._exited(item, "succeeded")
        else:
            heapq.heappush(self.exits, item)

    def _kill(self, i: int, msg: P.Kill, t: float) -> None:
        self.stats["kills"] += 1
        after = self.queued.get((i, msg.step)) if msg.cancel or msg.withdraw else None
        if after is not None:
            held = self.held[(i, after)]
            kept = [m for m in held if (m.step, m.attempt) != (msg.step, msg.attempt)]
            if len(kept) < len(held):
                del self.queued[(i, msg.step)]
                for m in self.held.pop((i, msg.step), ()):  # what waited for it waits for what it waited for
                    self.queued[(i, m.step)] = after
                    kept.append(m)
                self.held[(i, after)] = kept
                how = "withdrawn" if msg.withdraw else "cancelled"
                # (a withdrawn one's attempt is unused: it may come again, to any node)
                self.stats["dropped"] = self.stats.get("dropped", 0) + 1
                self.report(i, P.Dropped(msg.step, msg.attempt, f"{how} before it started"))
                return
        if msg.withdraw:  # started already: it runs (fleet.core.windowback)
            return
        for item in self.exits:
            if item[1] == i and item[2] == msg.step and item[3] == msg.attempt:
                self.killed.add((i, msg.step, msg.attempt))
                self._exited(item, "terminated", msg.signal)

    def _exited(self, item: tuple, outcome: str, sig: int | None = None) -> None:
        _, i, step, attempt, decided, started, cores = item
        t = time.time()
        self.last_exit = t
        self.report(i, P.Exited(step=step, attempt=attempt, pid=self.pid, outcome=outcome,
                              returncode=0 if outcome == "succeeded" else None, signal=sig, decided_at=decided,
                              first_at=started, work_start=started, work_end=t, ended_at=t, utime=0.0,
                              stime=0.0, maxrss_kb=0, affinity=cores, placement_ok=True, error=None,
                              # its numbers spelled, as a node's zygote spells them (fleet.node.exits)
                              spelt=numtext.exit_numbers(decided, started, started, t, t, 0.0, 0.0)))
        self.running.discard((i, step))
        for msg in self.held.pop((i, step), ()):  # its queued successors, Started after this Exited
            self._start(i, msg, t)

    def _send_exits(self) -> None:
        now = time.monotonic()
        while self.exits and self.exits[0][0] <= now:
            item = heapq.heappop(self.exits)
            if (item[1], item[2], item[3]) in self.killed:
                self.killed.discard((item[1], item[2], item[3]))
                continue
            self._exited(item, "succeeded")

    def _markers(self, i: int, msg: P.Markers) -> None:
        for path, text in msg.files:
            node_markers.put(path, text)
        self.stats["markers_written"] += len(msg.files)
        now = time.monotonic()
        if MARKER_S:
            q = self.writing.setdefault(i, deque())
            q.append((max(now, q[-1][0] if q else now) + MARKER_S * len(msg.files), msg.last))
        else:
            self.acks[i] = (msg.last, self.acks.get(i, (0, now))[1])

    def _send_acks(self) -> None:
        """Progress that no report carried within node_markers.HOLD_S goes alone (looked
        at every tenth of it)."""
        now = time.monotonic()
        if not (self.acks or self.writing) or now < self.acks_seen:
            return
        self.acks_seen = now + node_markers.HOLD_S / 10
        for i in [i for i, q in self.writing.items() if q[0][0] <= now]:  # (MARKER_S) written by now
            q = self.writing[i]
            while q and q[0][0] <= now:
                at, upto = q.popleft()
                self.acks[i] = (upto, self.acks.get(i, (0, at))[1])
            if not q:
                del self.writing[i]
        late = now - node_markers.HOLD_S
        for i in [i for i, (_, t) in self.acks.items() if t <= late]:
            self.send_bytes(i, self._ack(i, []))

    def _send_beats(self) -> None:
        now = time.monotonic()
        while self.beats and self.beats[0][0] <= now:
            due, i = self.beats.popleft()
            if not self.down[i]:
                stamp = self.stamps[i]
                self.send_bytes(i, P.encode(P.Heartbeat(self.names[i], sent=time.time(), echo=stamp,
                                                        held=now - self.read_at[i])) if stamp else self.our_beats[i])
            self.beats.append((max(now, due + self.heartbeat_s), i))

    def summary(self, why: str) -> dict:
        """What this process saw, for the benchmark to merge (latencies in seconds)."""
        return {**self.stats, "stopped": why, "t_connect": self.t_connect, "t_joins_sent": self.t_joins_sent,
                "t_last_welcome": getattr(self, "t_last_welcome", None), "first_launch": self.first_launch,
                "last_launch": self.last_launch, "last_exit": self.last_exit,
                "received": self.received, "latency_s": self.latency,
                "pending_exits": len(self.exits)}

    def close(self) -> None:
        for s in self.socks:
            s.close()
        self.ctx.term()
        self.epoll.close()


def wait_for_file(path: Path, timeout: float) -> dict:
    """The agents file the coordinator's launcher writes, once it is there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return json.loads(path.read_text())
        time.sleep(0.02)
    raise TimeoutError(f"{path} did not appear within {timeout:.0f} s")


# -- measuring from outside -------------------------------------------------------------------

def cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def peak_rss_mib(pid: int) -> float:
    """VmHWM: the process's peak resident set so far."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def tcp_counters() -> dict:
    """This machine's TCP listen-queue overflows and SYN retransmissions so far (all of
    its processes: other work counts too, so a run's delta is an upper bound)."""
    want = ("ListenOverflows", "ListenDrops", "TCPSynRetrans")
    lines = Path("/proc/net/netstat").read_text().splitlines()
    for names, values in zip(lines[::2], lines[1::2]):
        if names.startswith("TcpExt:"):
            d = dict(zip(names.split()[1:], values.split()[1:]))
            return {k: int(d.get(k, 0)) for k in want}
    return {}


def check_events(run: Path, steps: int) -> dict:
    """From events.jsonl: every step started once and succeeded once, nothing else."""
    starts: dict[str, int] = {}
    ok: dict[str, int] = {}
    other, up, declared, last = 0, None, 0, 0.0
    lags: list[tuple[float, float]] = []  # (recorded at, recorded at - the step's end on its node)
    for rec in E.read_records(run / "events.jsonl"):
        if isinstance(rec, E.Start):
            starts[rec.step] = starts.get(rec.step, 0) + 1
        elif isinstance(rec, E.Exit):
            last = max(last, rec.t)
            if rec.ended_at:
                lags.append((rec.t, rec.t - rec.ended_at))
            if rec.outcome == "succeeded":
                ok[rec.step] = ok.get(rec.step, 0) + 1
            else:
                other += 1
        elif isinstance(rec, E.FleetUp) and up is None:
            up = rec.t
        elif isinstance(rec, E.StepDeclared):
            declared += 1
    once = declared == steps and len(ok) == steps and all(v == 1 for v in ok.values()) \
        and all(v == 1 for v in starts.values()) and len(starts) == steps
    return {"declared": declared, "started_steps": len(starts), "succeeded_steps": len(ok),
            "started_twice": sum(v > 1 for v in starts.values()), "succeeded_twice": sum(v > 1 for v in ok.values()),
            "other_exits": other, "each_step_once": once and other == 0, "fleet_up_t": up,
            "last_exit_t": last, "exit_to_record": report_lag(lags)}


def report_lag(lags: list[tuple[float, float]], window_s: float = 10.0) -> dict:
    """How long a step's end waited to be recorded (the `exit` line's time minus the end
    its node reported: the reports' wait in the coordinator's sockets and loop), in all
    and by window_s of the run (p50, max), from the first exit."""
    if not lags:
        return {}
    waits = sorted(w for _, w in lags)
    pick = lambda xs, q: round(xs[min(len(xs) - 1, int(q * len(xs)))], 3)  # noqa: E731
    t0, by = min(t for t, _ in lags), {}
    for t, w in lags:
        by.setdefault(int((t - t0) // window_s), []).append(w)
    return {"p50_s": pick(waits, 0.5), "p99_s": pick(waits, 0.99), "max_s": round(waits[-1], 3),
            "by_window": [[int(k * window_s), pick(sorted(v), 0.5), round(max(v), 3)] for k, v in sorted(by.items())]}


def agents_main(argv: list[str]) -> int:
    """Run one load generator process (see the module doc)."""
    ap = argparse.ArgumentParser(prog="_simagents.py agents")
    ap.add_argument("--agents-file", required=True)
    ap.add_argument("--first", type=int, default=1)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--width", type=int, default=1, help="digits of the node names (as fleet's local launcher)")
    ap.add_argument("--cores", type=int, default=64)
    ap.add_argument("--memory", type=int, default=256 << 30)
    ap.add_argument("--duration", type=float, default=0.0, help="seconds each step runs")
    ap.add_argument("--deadline", type=float, default=600.0, help="seconds before this process stops by itself")
    ap.add_argument("--out", required=True)
    ap.add_argument("--parent-pid", type=int, default=0)
    args = ap.parse_args(argv)
    if args.count > MAX_PER_PROCESS:
        ap.error(f"--count {args.count}: at most {MAX_PER_PROCESS} agents per process (descriptors)")
    _die_with_parent(args.parent_pid)
    deadline = time.monotonic() + args.deadline
    conf = wait_for_file(Path(args.agents_file), args.deadline)
    sim = SimAgents(conf, args.first, args.count, args.width, args.cores, args.memory, args.duration)
    sim.connect()
    why = sim.serve(deadline)
    out = sim.summary(why)
    tmp = Path(args.out + ".tmp")
    tmp.write_text(json.dumps(out))
    os.replace(tmp, args.out)
    sim.close()
    return 0 if why.startswith("every") else 1


if __name__ == "__main__":
    role, rest = (sys.argv[1] if len(sys.argv) > 1 else ""), sys.argv[2:]
    if role == "coordinator":
        sys.exit(coordinator_main(rest))
    if role == "agents":
        sys.exit(agents_main(rest))
    sys.exit("usage: _simagents.py coordinator|agents ARGS (see the module doc)")
