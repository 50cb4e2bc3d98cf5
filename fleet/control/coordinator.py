"""The coordinator: a single-threaded loop around the pure scheduler.

It owns two ROUTER sockets (agents, clients), a ZeroMQ poller with a timer for
heartbeats (no busy waiting), the event stream and the completion markers. Every
message becomes a scheduler event; every decision becomes a message, a record, or
both. Nothing here decides what runs: that is fleet.core.scheduler.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import zmq

from fleet.wire import connection
from fleet.site import mpi
from fleet.wire import messages as P
from fleet.wire import security
from fleet.control import shard
from fleet.control import store
from fleet.wire import records
from fleet.core import states as S
from fleet.control.checks import checked_suite
from fleet.wire.events import EventLog
from fleet.site.allocation import from_environment
from fleet.site.launch import Launcher, launcher_for
from fleet.site.profiles import Profile, ProfileError, detect, load as load_profile
from fleet.core.problems import SuiteError
from fleet.core.resources import NodeSpec
from fleet.core.scheduler import (Blocked, Elsewhere, Finished, Ignored, NodeJoined, NodeLost, Reclaim, Retry,
                        Scheduler, Settled, Skipped, Start, StepExited, Submitted, Unrunnable, Wait)

log = logging.getLogger("fleet.control.coordinator")

STATUS_RUNNING = 500  # running steps listed in one status answer
PROGRESS_S = 0.5  # how stale a submission's counts by state may be in a progress answer


@dataclass
class _Agent:
    node: str
    identity: bytes
    host: str
    pid: int
    last_seen: float
    alive: bool = True


@dataclass
class _Submission:
    id: int
    suite: str
    steps: list[str]
    remaining: int
    finished: list = field(default_factory=list)
    counted: tuple | None = None  # (monotonic time, counts by state)


class Coordinator:
    def __init__(self, run_dir: Path, nodes: int, launcher: Launcher, *, bind_host: str = "127.0.0.1",
                 heartbeat_s: float = 1.0, timeout_s: float = 10.0, join_timeout_s: float = 60.0,
                 preload: tuple[str, ...] = (), profile: Profile | None = None, advertise: str = "",
                 stale_after: float = 600.0, max_attempts: int = 5, connection_name: str = connection.NAME):
        self.run_dir = Path(run_dir).resolve()
        # This fleet among all that may share the run directory (claims name it).
        self.fleet_id = f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"
        self.stale_after = stale_after
        self.max_attempts = max_attempts
        self.connection_name = connection_name
        self.elsewhere: dict[str, tuple[str, float, bool]] = {}  # step -> (holder, since, foreign)
        self.claimed: set[str] = set()  # steps whose claim this fleet holds
        self._next_refresh = 0.0
        self.expected = nodes
        self.launcher = launcher
        self.heartbeat_s = heartbeat_s
        self.timeout_s = timeout_s
        self.join_timeout_s = join_timeout_s
        self.preload = preload
        self.profile = profile or Profile("local", "")
        self.started = time.time()
        self.sched = Scheduler()
        self.events = EventLog(self.run_dir / "events.jsonl", fleet=self.fleet_id)
        self.ctx = zmq.Context()
        self.keys = security.Keys.generate()
        self.auth = security.start_authenticator(self.ctx, self.keys)
        self.agent_sock = self.ctx.socket(zmq.ROUTER)
        self.client_sock = self.ctx.socket(zmq.ROUTER)
        security.serve(self.agent_sock, self.keys, "agents")
        security.serve(self.client_sock, self.keys, "clients")
        for s in (self.agent_sock, self.client_sock):
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.MAXMSGSIZE, P.MAX_FRAME)
            s.setsockopt(zmq.ROUTER_MANDATORY, 1)
        aport = self.agent_sock.bind_to_random_port(f"tcp://{bind_host}")
        cport = self.client_sock.bind_to_random_port(f"tcp://{bind_host}")
        addr = advertise or (bind_host if bind_host not in ("0.0.0.0", "*")
                             else socket.gethostbyname(socket.gethostname()))
        self.agent_endpoint = f"tcp://{addr}:{aport}"
        self.client_endpoint = f"tcp://{addr}:{cport}"
        self.agents: dict[str, _Agent] = {}
        self.by_identity: dict[bytes, str] = {}
        self.specs: dict[str, object] = {}
        self.subs: dict[int, _Submission] = {}
        self.step_subs: dict[str, list[int]] = {}
        self.failures: list[dict] = []
        self.stopping = False
        self.ready = False
        self._warned: set[str] = set()
        self.dropped: dict[str, int] = {}
        self._joining: list[NodeSpec] = []

    # -- lifecycle ------------------------------------------------------------------
    def serve(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self.events.write(time.time(), "fleet_starting", nodes=self.expected, pid=os.getpid(), fleet=self.fleet_id,
                          machine=self.profile.name)
        self.launcher.start(self.agent_endpoint, self.expected, self.preload,
                            {security.AGENT_ENV: self.keys.agent_env(),
                             "FLEET_HEARTBEAT": f"{self.heartbeat_s},{self.timeout_s}"})
        deadline = time.monotonic() + self.join_timeout_s
        poller = zmq.Poller()
        poller.register(self.agent_sock, zmq.POLLIN)
        poller.register(self.client_sock, zmq.POLLIN)
        next_beat = time.monotonic()
        next_claims = time.monotonic() + self._claim_period()
        code = 0
        try:
            while not self.stopping:
                if not self.ready and time.monotonic() > deadline:
                    log.error("only %d of %d agents joined within %.0f s", len(self.agents),
                              self.expected, self.join_timeout_s)
                    self.events.write(time.time(), "fleet_failed", reason="agents did not join in time")
                    code = 3
                    break
                failed = self.launcher.failed()
                if failed and not self.ready:
                    log.error("agent start failed: %s", failed)
                    self.events.write(time.time(), "fleet_failed", reason=failed)
                    code = 3
                    break
                wait_ms = max(0, int((next_beat - time.monotonic()) * 1000))
                ready = dict(poller.poll(wait_ms))
                if self.agent_sock in ready:
                    self._drain(self.agent_sock, self._on_agent)
                if self.client_sock in ready:
                    self._drain(self.client_sock, self._on_client)
                if time.monotonic() >= next_beat:
                    self._beat()
                    next_beat = time.monotonic() + self.heartbeat_s
                if time.monotonic() >= next_claims:
                    self._tend_claims()
                    next_claims = time.monotonic() + self._claim_period()
                self.events.flush()
        finally:
            self._teardown()
        return code

    def _on_signal(self, signum, frame):
        self.stopping = True

    def _teardown(self) -> None:
        for a in self.agents.values():
            if a.alive:
                self._send_agent(a.node, P.Shutdown(grace=2.0))
        # Wait (bounded) for agents to say goodbye, then make sure of it.
        deadline = time.monotonic() + 5.0
        while any(a.alive for a in self.agents.values()) and time.monotonic() < deadline:
            if self.agent_sock.poll(100):
                self._drain(self.agent_sock, self._on_agent)
        self.launcher.stop()
        # Claims of steps that will not finish here (stopped mid-run, or a retry that was
        # never launched): released, so other fleets need not wait for them to go stale.
        for step in list(self.claimed):
            self._release(self._run_dir_of(step), step)
        self.events.write(time.time(), "fleet_down")
        self.events.close()
        if self.ready:
            try:
                (self.run_dir / self.connection_name).unlink()
            except FileNotFoundError:
                pass
        self.agent_sock.close(0)
        self.client_sock.close(0)
        self.auth.stop()
        self.ctx.term()

    # -- sockets --------------------------------------------------------------------------
    def _drain(self, sock, handler) -> None:
        for _ in range(1000):  # bounded, so one busy socket cannot starve the other
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) != 2:
                self._warn("frames", f"dropped a message of {len(frames)} frames")
                continue
            ident, frame = frames
            try:
                msg = P.decode(frame)
            except P.ProtocolError as e:
                self._warn(f"bad:{type(e).__name__}", f"dropped a malformed message: {e}")
                if isinstance(e, P.VersionMismatch):
                    self._reply(sock, ident, P.Error(str(e)))
                    if sock is self.agent_sock and not self.ready:
                        # Our own agent (it has the agent key) cannot work with us: say so now.
                        self.launcher.note_failure(f"an agent speaks {e}")
                continue
            try:
                handler(ident, msg)
            except Exception as e:
                # A bug (or a well-keyed peer's ill-typed fields) must not stop the fleet, nor
                # flood the log, nor leave a client waiting for nothing.
                key = f"error:{type(msg).__name__}"
                self.dropped[key] = self.dropped.get(key, 0) + 1
                if key not in self._warned:
                    self._warned.add(key)
                    log.exception("handling %s failed (further failures of this kind are counted, not logged)",
                                  type(msg).__name__)
                if sock is self.client_sock:
                    self._reply(sock, ident, P.Error(f"internal error handling {type(msg).__name__}: {e}"))

    def _warn(self, key: str, text: str) -> None:
        """Log the first of each kind of dropped input, and count them all: garbage
        must neither flood the log nor grow memory (keys are a small fixed set)."""
        self.dropped[key] = self.dropped.get(key, 0) + 1
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s (further ones of this kind are counted, not logged)", text)

    def _reply(self, sock, ident: bytes, msg) -> None:
        try:
            sock.send_multipart([ident, P.encode(msg)], zmq.NOBLOCK)
        except (zmq.Again, zmq.ZMQError):
            pass

    def _send_agent(self, node: str, msg) -> bool:
        a = self.agents.get(node)
        if a is None or not a.alive:
            return False
        try:
            self.agent_sock.send_multipart([a.identity, P.encode(msg)], zmq.NOBLOCK)
            return True
        except (zmq.Again, zmq.ZMQError):
            return False

    # -- agents -------------------------------------------------------------------------------
    def _on_agent(self, ident: bytes, msg) -> None:
        now = time.time()
        if isinstance(msg, P.Join):
            self._join(ident, msg, now)
            return
        if isinstance(msg, P.JoinFailed):
            log.error("agent on %s could not start: %s", msg.node, msg.reason)
            self.events.write(now, "agent_failed", node=msg.node, reason=msg.reason)
            self.launcher.note_failure(f"{msg.node}: {msg.reason}")
            return
        node = self.by_identity.get(ident)
        agent = self.agents.get(node) if node else None
        if agent is None or not agent.alive:
            self._warn(f"unknown:{type(msg).__name__}", f"dropped {type(msg).__name__} from an unknown or lost agent")
            if agent is not None and not isinstance(msg, P.Ok):
                # A lost agent that wakes up (SIGCONT, a healed network) must stop at once:
                # its steps have been given to others.
                self._reply(self.agent_sock, ident, P.Shutdown(grace=0.0))
            return
        agent.last_seen = time.monotonic()
        if isinstance(msg, P.Heartbeat):
            return
        if isinstance(msg, P.Started):
            try:
                view = self.sched.view(msg.step)
            except KeyError:
                view = None
            if view is None or view.state != S.RUNNING or view.attempt != msg.attempt \
                    or not view.placement or view.placement[0].node != node:
                self._warn("stale started", f"dropped a start report of {msg.step!r} attempt {msg.attempt} from {node}")
                return
            self.events.write(now, "started", step=msg.step, attempt=msg.attempt, node=node, pid=msg.pid, at=msg.at)
        elif isinstance(msg, P.Exited):
            self._exited(node, msg, now)
        elif isinstance(msg, P.Ok) and msg.what == "bye":
            agent.alive = False
        else:
            self._warn(f"unexpected:{type(msg).__name__}", f"dropped an unexpected {type(msg).__name__} from an agent")

    def _join(self, ident: bytes, msg: P.Join, now: float) -> None:
        if msg.node in self.agents and self.agents[msg.node].alive:
            self._reply(self.agent_sock, ident, P.Reject(f"node {msg.node!r} already has an agent"))
            return
        self.agents[msg.node] = _Agent(msg.node, ident, msg.host, msg.pid, time.monotonic())
        self.by_identity[ident] = msg.node
        spec = NodeSpec(msg.node, tuple(msg.cores), tuple(msg.gpus), int(msg.memory))
        self.events.write(now, "node_joined", node=msg.node, host=msg.host, cores=list(msg.cores),
                          gpus=list(msg.gpus), memory=msg.memory, pid=msg.pid, zygote_pid=msg.zygote_pid)
        self._reply(self.agent_sock, ident, P.Welcome(msg.node, self.heartbeat_s, self.timeout_s))
        if self.ready:
            self._act(self.sched.handle(NodeJoined(spec), now), now)
            return
        # Agents join in whatever order the network delivers; the scheduler sees the
        # nodes in one fixed order so that the same allocation gives the same decisions.
        self._joining.append(spec)
        if sum(a.alive for a in self.agents.values()) >= self.expected:
            for node in sorted(self._joining, key=lambda n: _natural(n.name)):
                self._act(self.sched.handle(NodeJoined(node), now), now)
            self._joining.clear()
            try:
                connection.write(self.run_dir, self.connection_name, connection.Connection(
                    client=self.client_endpoint, agents=self.agent_endpoint, pid=os.getpid(),
                    host=socket.gethostname(), started=self.started, run_dir=str(self.run_dir),
                    server_key=self.keys.server_public, client_public=self.keys.client_public,
                    client_secret=self.keys.client_secret))
            except FileExistsError:
                # Another coordinator won the race for this run directory: stop, and
                # leave its connection file alone (not ready: teardown does not remove it).
                log.error("%s appeared while this fleet was starting: another fleet is up in %s; stopping",
                          self.run_dir / self.connection_name, self.run_dir)
                self.events.write(now, "fleet_failed", reason="another fleet is up in this run directory")
                self.stopping = True
                return
            self.ready = True
            self.events.write(now, "fleet_up", nodes=sorted(self.agents))

    def _exited(self, node: str, msg: P.Exited, now: float) -> None:
        spec = self.specs.get(msg.step)
        try:
            view = self.sched.view(msg.step)
        except KeyError:
            view = None
        if (view is None or view.state != S.RUNNING or view.attempt != msg.attempt
                or (view.placement and view.placement[0].node != node)):  # not where it runs
            self._warn("stale exit", f"dropped a stale exit report of {msg.step} attempt {msg.attempt}")
            return
        rec = dict(step=msg.step, attempt=msg.attempt, node=node, outcome=msg.outcome,
                   returncode=msg.returncode, signal=msg.signal,
                   cores=[c for s in view.placement for c in s.cores],
                   gpus=[g for s in view.placement for g in s.gpus],
                   memory=sum(s.memory for s in view.placement),
                   decided_at=msg.decided_at, first_at=msg.first_at, work_start=msg.work_start,
                   work_end=msg.work_end, ended_at=msg.ended_at,
                   startup_s=round(max(0.0, msg.work_start - msg.decided_at), 6),
                   work_s=round(max(0.0, msg.work_end - msg.work_start), 6),
                   utime=msg.utime, stime=msg.stime, maxrss_kb=msg.maxrss_kb, error=msg.error)
        if not msg.placement_ok:
            self.events.write(now, "placement_mismatch", step=msg.step, attempt=msg.attempt, node=node,
                              given=rec["cores"], actual=list(msg.affinity))
        reason = msg.error or ""
        if msg.outcome == S.TERMINATED:
            neighbours = [dict(step=v.id, cores=v.spec.cores, memory=v.spec.memory, gpus=v.spec.gpus)
                          for v in self.sched.running_on(node) if v.id != msg.step]
            rec["neighbours"] = neighbours
            sig = signal.Signals(msg.signal).name if msg.signal else "a signal"
            reason = (f"killed by {sig}; running beside it on {node}: "
                      + (", ".join(f"{n['step']} (cores={n['cores']}, memory={n['memory'] or 'share'}, gpus={n['gpus']})"
                                   for n in neighbours) or "nothing"))
        rec["reason"] = reason
        self.events.write(now, "exit", **rec)
        # Decide and launch what this exit frees first; the files that record it come
        # after, off the path between one step's end and the next one's start. (The
        # done marker still precedes the claim's release, which other fleets rely on.)
        self._act(self.sched.handle(StepExited(msg.step, msg.attempt, msg.outcome, reason), now), now)
        run_dir = self._run_dir_of(msg.step)
        store.record_attempt(run_dir, msg.step, self.fleet_id, msg.attempt, {
            "outcome": msg.outcome, "node": node, "reason": reason, "work_s": rec["work_s"],
            "started_at": msg.work_start, "ended_at": msg.ended_at})
        if msg.outcome == S.SUCCEEDED and spec is not None:
            store.write_done(run_dir, spec, {
                "attempt": msg.attempt, "node": node, "work_s": rec["work_s"], "ended_at": msg.ended_at,
                "fleet": self.fleet_id})
            self._release(run_dir, msg.step)

    def _beat(self) -> None:
        now_m = time.monotonic()
        now = time.time()
        for a in list(self.agents.values()):
            if not a.alive:
                continue
            if now_m - a.last_seen > self.timeout_s:
                a.alive = False
                log.error("agent on %s missed heartbeats for %.1f s: lost", a.node, now_m - a.last_seen)
                self.events.write(now, "node_lost", node=a.node, reason="missed heartbeats")
                self._reply(self.agent_sock, a.identity, P.Shutdown(grace=0.0))  # read first if it wakes
                self._act(self.sched.handle(NodeLost(a.node, "agent missed heartbeats"), now), now)
            else:
                self._send_agent(a.node, P.Heartbeat("coordinator"))

    # -- decisions -----------------------------------------------------------------------------------
    def _run_dir_of(self, step: str) -> Path:
        return self.run_dir

    def _act(self, decisions, now: float) -> None:
        for d in decisions:
            if isinstance(d, Start):
                self._start(d, now)
            elif isinstance(d, Wait):
                self.events.write(now, "wait", step=d.step, reason=d.reason, behind=d.behind)
            elif isinstance(d, Retry):
                self.events.write(now, "retry", step=d.step, attempt=d.attempt, reason=d.reason)
                self._progress(d.step, "retry", d.attempt - 1, d.reason, final=False)
            elif isinstance(d, Finished):
                if d.outcome in (S.LOST, S.STOPPED) or d.step in self.elsewhere:
                    # No agent reported these ends: the record is ours to write.
                    self.events.write(now, "exit", step=d.step, attempt=d.attempt, outcome=d.outcome, reason=d.reason,
                                      **({"by": self.elsewhere[d.step][0]} if d.step in self.elsewhere else {}))
                if d.outcome == S.LOST:
                    store.record_attempt(self._run_dir_of(d.step), d.step, self.fleet_id, d.attempt,
                                         {"outcome": d.outcome, "reason": d.reason, "ended_at": now})
                final = self.sched.state(d.step) in S.FINAL
                if final and d.outcome != S.SUCCEEDED and d.step in self.specs:
                    run_dir = self._run_dir_of(d.step)
                    if d.step not in self.elsewhere:  # another fleet's outcome is its own to record
                        store.write_final(run_dir, self.specs[d.step], d.outcome,
                                          {"reason": d.reason, "attempt": d.attempt, "fleet": self.fleet_id, "at": now})
                        self._release(run_dir, d.step)
                self.elsewhere.pop(d.step, None)
                self._progress(d.step, d.outcome, d.attempt, d.reason, final=final)
            elif isinstance(d, Blocked):
                self.events.write(now, "blocked", step=d.step, because=d.because)
                self._final(d.step, S.BLOCKED, f"dependency {d.because} did not succeed", now)
                self._progress(d.step, S.BLOCKED, 0, f"dependency {d.because} did not succeed", final=True)
            elif isinstance(d, Unrunnable):
                self.events.write(now, "unrunnable", step=d.step, reason=d.reason)
                self._final(d.step, S.UNRUNNABLE, d.reason, now)
                self._progress(d.step, S.UNRUNNABLE, 0, d.reason, final=True)
            elif isinstance(d, Skipped):
                where = self.elsewhere.pop(d.step, None)
                self.events.write(now, "skipped", step=d.step, **({"by": where[0]} if where else {}))
                self._progress(d.step, S.SKIPPED, 0, "succeeded in another fleet" if where else "already succeeded",
                               final=True)
            elif isinstance(d, Ignored):
                self._warn("ignored", d.what)

    def _final(self, step: str, outcome: str, reason: str, now: float) -> None:
        """Record on disk how a step ended here without success (for audits and other fleets)."""
        spec = self.specs.get(step)
        if spec is not None and step not in self.elsewhere:
            store.write_final(self._run_dir_of(step), spec, outcome, {"reason": reason, "fleet": self.fleet_id, "at": now})

    def _progress(self, step: str, outcome: str, attempt: int, reason: str, final: bool) -> None:
        if outcome in (S.FAILED, S.TERMINATED, S.LOST, S.UNRUNNABLE):
            self.failures.append({"step": step, "outcome": outcome, "reason": reason, "t": time.time()})
            del self.failures[:-50]
        for sid in self.step_subs.get(step, ()):
            sub = self.subs[sid]
            sub.finished.append([step, outcome, attempt, reason])
            if final:
                sub.remaining -= 1

    def _start(self, d: Start, now: float) -> None:
        if self.stopping:
            return  # nothing starts during teardown (a retry decided now has nowhere to run)
        spec = self.specs[d.step]
        slot = d.placement[0]
        run_dir = self._run_dir_of(d.step)
        c = store.claim(run_dir, spec, self.fleet_id, d.attempt, self.stale_after,
                        max(self.max_attempts, spec.retries + 1) if self.max_attempts else 0)
        if c.kind != store.Claim.OURS:
            self._not_ours(d, c, now)
            return
        self.claimed.add(d.step)
        if c.adopted is not None:
            self.events.write(now, "adopted", step=d.step, attempt=d.attempt, previous=c.adopted)
        self.events.write(now, "start", step=d.step, attempt=d.attempt, node=slot.node,
                          cores=[c for s in d.placement for c in s.cores],
                          gpus=[g for s in d.placement for g in s.gpus],
                          memory=sum(s.memory for s in d.placement),
                          nodes=[s.node for s in d.placement],
                          placement=[dict(node=s.node, cores=list(s.cores), gpus=list(s.gpus), memory=s.memory)
                                     for s in d.placement])
        command = list(spec.command) if isinstance(spec.command, tuple) else spec.command
        cores = list(slot.cores)
        env = {"FLEET_STEP": d.step, "FLEET_ATTEMPT": str(d.attempt), "FLEET_RUN_DIR": str(run_dir)}
        if spec.mpi:
            try:
                command, cores = self._render_mpi(spec, d, run_dir, command, env)
            except (mpi.RenderError, OSError) as e:
                self.events.write(now, "exit", step=d.step, attempt=d.attempt, node=slot.node, outcome=S.FAILED,
                                  reason=f"cannot launch the MPI step: {e}")
                self._act(self.sched.handle(StepExited(d.step, d.attempt, S.FAILED, f"cannot launch the MPI step: {e}"), now), now)
                return
        msg = P.Launch(
            step=d.step, attempt=d.attempt, kind="command" if spec.mpi else spec.kind, call=spec.call or "",
            args=dict(spec.args), command=command, cores=cores, gpus=list(slot.gpus), memory=slot.memory,
            workdir=str(records.workdir(run_dir, spec)), log=str(records.log_path(run_dir, d.step)),
            run_dir=str(run_dir), inputs=[str(run_dir / i) for i in spec.inputs],
            outputs=[str(run_dir / o) for o in spec.outputs],
            placement=[[s.node, list(s.cores), list(s.gpus), s.memory] for s in d.placement],
            decided_at=time.time(),
            # Every step is given its GPUs, none included (CUDA_VISIBLE_DEVICES="" hides them);
            # an MPI launcher's ranks get theirs, per node, from the rendered command instead.
            env=env, gpu_vars=[self.profile.gpu_var] if self.profile.gpu_var and not spec.mpi else [])
        if not self._send_agent(slot.node, msg):
            self._act(self.sched.handle(StepExited(d.step, d.attempt, S.LOST, f"could not reach the agent on {slot.node}"), now), now)

    def _not_ours(self, d: Start, c, now: float) -> None:
        """The step was decided but its claim says otherwise: hand it back."""
        if c.kind == store.Claim.STOPPED:
            self._act(self.sched.handle(StepExited(d.step, d.attempt, S.STOPPED, c.detail), now), now)
            return
        holder = (records.read_claim(self._run_dir_of(d.step), d.step) or ({}, 0))[0].get("fleet", "")
        self.elsewhere[d.step] = (holder, now, False)
        self.events.write(now, "elsewhere", step=d.step, attempt=d.attempt, holder=holder,
                          reason=c.detail or "already succeeded")
        self._act(self.sched.handle(Elsewhere(d.step, d.attempt, c.detail or "already succeeded"), now), now)
        if c.kind == store.Claim.DONE:
            self._act(self.sched.handle(Settled(d.step, S.SUCCEEDED), now), now)

    def _release(self, run_dir: Path, step: str) -> None:
        store.release(run_dir, step, self.fleet_id)
        self.claimed.discard(step)

    def _claim_period(self) -> float:
        """How often steps held elsewhere are looked at."""
        return min(2.0, max(0.2, self.stale_after / 4))

    def _tend_claims(self) -> None:
        """Keep our claims fresh (a few times per stale_after, not every turn: each is a
        read and a utime per running step) and look at steps other fleets hold."""
        now = time.time()
        if now >= self._next_refresh:
            self._next_refresh = now + max(0.2, self.stale_after / 4)
            for v in self.sched.running():
                store.refresh(self._run_dir_of(v.id), v.id, self.fleet_id)
        for step, (holder, since, foreign) in list(self.elsewhere.items()):
            run_dir = self._run_dir_of(step)
            spec = self.specs[step]
            if records.is_done(run_dir, spec):
                self._act(self.sched.handle(Settled(step, S.SUCCEEDED), now), now)
                continue
            final = records.read_final(run_dir, step)
            if final is not None and final.get("at", 0) >= since and final.get("fleet") != self.fleet_id:
                self._act(self.sched.handle(Settled(step, S.FAILED, f"{final.get('outcome')} in fleet "
                                                    f"{final.get('fleet')}: {final.get('reason', '')}"), now), now)
                continue
            if foreign:
                continue  # another shard's step: only its outcome settles it
            cur = records.read_claim(run_dir, step)
            if cur is None or records.holder_dead(cur[0]) or cur[1] >= self.stale_after:
                self.elsewhere.pop(step, None)
                why = "its claim was released" if cur is None else f"its claim by {cur[0].get('fleet')} went stale"
                self.events.write(now, "reclaim", step=step, reason=why)
                self._act(self.sched.handle(Reclaim(step, why), now), now)

    def _render_mpi(self, spec, d: Start, run_dir: Path, command, env: dict) -> tuple[list, list]:
        """The launcher command for an MPI step, with the files it reads written into
        the step's .fleet directory; returns (argv, cores the launcher process runs on)."""
        one_host = self.profile.launcher == "local"
        r = mpi.render(self.profile.mpi, d.placement, spec.threads, command, self.profile.mpi_flags, one_host,
                       gpu_var=self.profile.gpu_var)
        fleet_dir = records.step_dir(run_dir, d.step) / ".fleet"
        fleet_dir.mkdir(parents=True, exist_ok=True)
        for name, text in r.files.items():
            (fleet_dir / name).write_text(text)
        fill = lambda v: v.replace("{fleet}", str(fleet_dir))  # noqa: E731
        env.update({k: fill(v) for k, v in r.env.items()})
        # What each rank should have, for the rank-level probe (fleet.node.mpiprobe).
        env["FLEET_RANKS"] = ";".join(f"{node}:{','.join(map(str, c))}" for node, c in mpi.layout(d.placement, spec.threads))
        # A local fleet's pretend nodes share this machine: the launcher may use all the cores.
        cores = [c for s in d.placement for c in s.cores] if one_host else list(d.placement[0].cores)
        return [fill(a) for a in r.argv], cores

    # -- clients --------------------------------------------------------------------------------------
    def _on_client(self, ident: bytes, msg) -> None:
        if isinstance(msg, P.Submit):
            self._reply(self.client_sock, ident, self._submit(msg))
        elif isinstance(msg, P.Progress):
            sub = self.subs.get(msg.submission)
            if sub is None:
                self._reply(self.client_sock, ident, P.Error(f"no submission {msg.submission}"))
                return
            since = max(0, msg.since)
            counts = self._sub_counts(sub)
            self._reply(self.client_sock, ident, P.ProgressReply(
                sub.id, sub.remaining == 0, counts, sub.finished[since:since + 5000],
                min(len(sub.finished), since + 5000)))
        elif isinstance(msg, P.Status):
            self._reply(self.client_sock, ident, P.StatusReply(self.status()))
        elif isinstance(msg, P.Down):
            self._reply(self.client_sock, ident, P.Ok("down"))
            self.stopping = True
        else:
            self._reply(self.client_sock, ident, P.Error(f"unexpected {type(msg).__name__}"))

    def _sub_counts(self, sub: _Submission) -> dict[str, int]:
        """Steps of a submission by state, recounted at most every PROGRESS_S (a client
        polls several times a second; a large suite is not recounted each time)."""
        now = time.monotonic()
        if sub.counted is None or now - sub.counted[0] > PROGRESS_S or sub.remaining == 0:
            counts: dict[str, int] = {}
            for s in sub.steps:
                st = self.sched.state(s)
                counts[st] = counts.get(st, 0) + 1
            sub.counted = (now, counts)
        return sub.counted[1]

    def _submit(self, msg: P.Submit) -> P.SubmitReply:
        if not self.ready:
            return P.SubmitReply(False, problems=["the fleet is still starting"])
        try:
            suite, graph = checked_suite(msg.suite, self.sched.pool.nodes(), run_dir=self.run_dir)
        except SuiteError as e:
            return P.SubmitReply(False, problems=[str(p) for p in e.problems])
        for s in suite.steps:
            old = self.specs.get(s.id)
            if old is not None and old.identity() != s.identity():
                return P.SubmitReply(False, problems=[f"{s.source}: step '{s.id}': already submitted to this fleet with a different definition"])
        steps, deps, foreign = suite.steps, graph.deps, set()
        if msg.shard:
            try:
                steps, deps, foreign = self._shard(suite, graph, msg)
            except (shard.ShardError, ValueError) as e:
                return P.SubmitReply(False, problems=[str(e)] if not isinstance(e, _Problems) else e.args[0])
        done = set()
        for s in steps:
            if msg.force and s.id not in foreign:
                store.clear_done(self.run_dir, s)
            elif s.id not in self.specs and records.is_done(self.run_dir, s):
                done.add(s.id)
        sid = len(self.subs) + 1
        ids = [s.id for s in steps]
        sub = _Submission(sid, str(msg.suite), ids, len(ids))
        self.subs[sid] = sub
        for s in steps:
            self.specs.setdefault(s.id, s)
            self.step_subs.setdefault(s.id, []).append(sid)
        now = time.time()
        self.events.write(now, "submitted", submission=sid, suite=str(msg.suite), name=suite.name,
                          steps=len(ids), skipped=len(done), serial=msg.serial, force=msg.force,
                          shard=msg.shard, foreign=len(foreign))
        for s in steps:
            self.events.write(now, "step", step=s.id, submission=sid, cores=s.cores, min_cores=s.min_cores,
                              gpus=s.gpus, memory=s.memory, deps=list(deps[s.id]),
                              priority=s.priority, step_kind=s.kind, task=s.task,
                              **({"foreign": True} if s.id in foreign else {}))
        for f in foreign - done:
            self.elsewhere[f] = ("another shard", now, True)
        # Steps already known to this fleet (shared with an earlier suite) count from their state.
        for s in steps:
            try:
                st = self.sched.state(s.id)
            except KeyError:
                continue
            if st in S.FINAL:
                sub.remaining -= 1
                sub.finished.append([s.id, st, 0, "finished in an earlier submission"])
        self._act(self.sched.handle(Submitted(tuple(steps), deps, frozenset(done), serial=msg.serial,
                                              foreign=frozenset(foreign - done)), now), now)
        return P.SubmitReply(True, sid, len(ids), len(done))

    def _shard(self, suite, graph, msg: P.Submit):
        """This shard's steps, plus the other shards' steps they depend on (foreign:
        waited for through their markers, never run here)."""
        i, n = shard.parse(msg.shard)
        owned = {s.id for s in suite.steps if shard.owner(s.task, n) == i}
        foreign = {d for s in suite.steps if s.id in owned for d in graph.deps[s.id] if d not in owned}
        if foreign and not msg.wait_foreign:
            raise _Problems([f"{s.source}: step '{s.id}': field 'deps': depends on '{d}', which shard "
                             f"{shard.owner(suite.step(d).task, n)}/{n} runs (--no-wait-foreign)"
                             for s in suite.steps if s.id in owned for d in graph.deps[s.id] if d in foreign])
        shard.record(self.run_dir, n, msg.new_generation)
        steps = [s for s in suite.steps if s.id in owned or s.id in foreign]
        deps = {s.id: (() if s.id in foreign else graph.deps[s.id]) for s in steps}
        return steps, deps, foreign

    def status(self) -> dict:
        now = time.time()
        nodes = []
        specs = {n.name: n for n in self.sched.pool.nodes()}
        for a in sorted(self.agents.values(), key=lambda a: _natural(a.node)):
            spec = specs.get(a.node)
            if spec is not None:
                free_c, free_g, free_m = self.sched.pool.free_on(a.node)
                nodes.append(dict(node=a.node, host=a.host, alive=a.alive, cores=len(spec.cores),
                                  cores_busy=len(spec.cores) - free_c, gpus=len(spec.gpus),
                                  gpus_busy=len(spec.gpus) - free_g, memory=spec.memory,
                                  memory_held=spec.memory - free_m))
            else:
                nodes.append(dict(node=a.node, host=a.host, alive=False))
        # A bounded answer, whatever the allocation's size: the first STATUS_RUNNING
        # running steps in start order, and how many run in all.
        views = self.sched.running(STATUS_RUNNING)
        running = [dict(step=v.id, node=v.placement[0].node if v.placement else None,
                        cores=sum(len(s.cores) for s in v.placement), attempt=v.attempt,
                        elapsed_s=round(now - v.started_at, 3) if v.started_at else None)
                   for v in views]
        return dict(up_since=self.started, run_dir=str(self.run_dir), pid=os.getpid(),
                    nodes=nodes, counts=self.sched.counts(), running=running, running_total=self.sched.running_count(),
                    failures=self.failures[-10:], dropped=dict(self.dropped),
                    submissions=[dict(id=s.id, suite=s.suite, steps=len(s.steps),
                                      finished=len(s.steps) - s.remaining) for s in self.subs.values()])


class _Problems(ValueError):
    """Several problems, each already naming its file, step and field."""


def _natural(name: str) -> list:
    """node2 before node10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fleet-coordinator")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--nodes", type=int, default=1, help="pretend nodes of a local fleet")
    ap.add_argument("--machine", default="", help="machine profile (default: detected)")
    ap.add_argument("--bind", default="", help="address to listen on (default: 127.0.0.1 locally, all interfaces in a job)")
    ap.add_argument("--advertise", default="", help="address agents and clients use to reach us")
    ap.add_argument("--preload", default="")
    ap.add_argument("--heartbeat", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--join-timeout", type=float, default=120.0)
    ap.add_argument("--stale-after", type=float, default=600.0,
                    help="seconds after which another fleet's unrefreshed claim may be adopted")
    ap.add_argument("--max-attempts", type=int, default=5,
                    help="attempts of a step across every fleet before it is stopped (0: no limit)")
    ap.add_argument("--connection-name", default=connection.NAME)
    ap.add_argument("--parent-pid", type=int, default=0,
                    help="stop (SIGTERM: a clean teardown) when this process, our parent, dies")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.parent_pid:
        from fleet.node.child import set_pdeathsig
        set_pdeathsig(signal.SIGTERM)
        if os.getppid() != args.parent_pid:  # it died before the death signal was armed
            log.error("the process that started this fleet (pid %d) is gone", args.parent_pid)
            return 1
    preload = tuple(m for m in args.preload.split(",") if m)
    run_dir = Path(args.run_dir)
    try:
        profile = load_profile(args.machine or detect())
    except ProfileError as e:
        log.error("%s", e)
        return 2
    nodes = args.nodes
    alloc_nodes: tuple[str, ...] = ()
    if profile.launcher != "local":
        alloc_nodes = from_environment().nodes
        if not alloc_nodes:
            log.error("machine %s starts agents with %s, but this is not inside a batch job", profile.name, profile.launcher)
            return 2
        nodes = len(alloc_nodes)
    bind = args.bind or ("127.0.0.1" if profile.launcher == "local" else "0.0.0.0")
    coord = Coordinator(run_dir, nodes, launcher_for(profile, run_dir, alloc_nodes),
                        bind_host=bind, heartbeat_s=args.heartbeat, timeout_s=args.timeout,
                        join_timeout_s=args.join_timeout, preload=preload, profile=profile,
                        advertise=args.advertise, stale_after=args.stale_after, max_attempts=args.max_attempts,
                        connection_name=args.connection_name)
    return coord.serve()


if __name__ == "__main__":
    sys.exit(main())
