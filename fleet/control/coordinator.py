"""The coordinator: a loop around the pure scheduler, never held long by one thing.

It wires the parts: the sockets (fleet.control.transport), the agents table and heartbeats (liveness), what
clients submit (submissions; read and checked on a worker thread and entered in parts: intake), coming up (the
connection file, or why the fleet cannot come up: comingup), claims on a shared run directory (claims), turning
a start into a launch (launching), how attempts ended (outcomes) and the status answer (status). A ZeroMQ
poller with a timer for heartbeats drives it (no busy waiting). Every message becomes a scheduler event; every
decision becomes a message, a record, or both. Nothing here decides what runs: that is fleet.core.scheduler.
The command line is fleet.control.coordinator_cli (`python -m fleet.control.coordinator` runs it).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections import deque
from pathlib import Path

import zmq

from fleet.control import (cancelling, comingup, drain, early, eventlines, heap, jobend, launching, nodemarkers,
                           nocores, outcomes, preloads, recording, reports, rezygote, stopcause, store, turns,
                           turntrace)
from fleet.control.claims import Claims
from fleet.control.holdtimer import HoldTimer
from fleet.control.intake import Intake
from fleet.control.liveness import Liveness, report_hold, scaled
from fleet.control.status import answer as status_answer
from fleet.control.submissions import Submissions
from fleet.control.transport import DRAIN_S, Transport
from fleet.core import states as S
from fleet.core.decisions import Exits, GoOn
from fleet.core.scheduler import (Blocked, Entering, Finished, Ignored, NodeJoined, Retry, Scheduler,
                                  Skipped, Start, StepExited, Unrunnable, Wait)
from fleet.site.launch import Launcher
from fleet.site.profiles import Profile
from fleet.wire import connection, events, logtag, security
from fleet.wire import messages as P
from fleet.wire.events import EventLog

log = logging.getLogger("fleet.control.coordinator")

TURN_S = 0.05  # acting on decisions and taking submissions in, per loop turn (then the sockets again)


class Coordinator:
    """One fleet's control: bound at construction, run by serve() until stopped."""

    def __init__(self, run_dir: Path, nodes: int, launcher: Launcher, *, bind_host: str = "127.0.0.1",
                 heartbeat_s: float = 1.0, timeout_s: float = 10.0, join_timeout_s: float = 60.0,
                 preload: tuple[str, ...] = (), profile: Profile | None = None, advertise: str = "",
                 stale_after: float = 600.0, max_attempts: int = 5, connection_name: str = connection.NAME, window=None,
                 report_hold_s: float | None = None, window_depth: int = 1, fleet_id: str = ""):
        self.run_dir = Path(run_dir).resolve()
        # This fleet among all that may share the run directory (claims and log lines name it).
        self.fleet_id = fleet_id or logtag.new_id()
        self.connection_name = connection_name
        self.expected = nodes
        self.launcher = launcher
        # Fewer heartbeats per node on a big allocation (fleet.control.liveness.scaled).
        self.heartbeat_s, self.timeout_s = scaled(heartbeat_s, timeout_s, nodes)
        self.join_timeout_s = join_timeout_s
        self.preload = preload
        self.profile = profile or Profile("local", "")
        self.started = time.time()
        # Steps handed to nodes ahead (fleet.core.window); under PALS, MPI ranks in blocks (fleet.core.ppnblocks).
        self.sched = Scheduler(window=window, depth=window_depth, mpi_blocks=self.profile.mpi == "pals")
        self.sched.pass_starts = int(os.environ.get("FLEET_TEST_PASS_STARTS") or self.sched.pass_starts)  # tests
        self.events = EventLog(self.run_dir / "events.jsonl", fleet=self.fleet_id)
        self.transport = Transport(bind_host, advertise)
        self.specs: dict[str, object] = {}  # step id -> StepSpec, every step submitted to this fleet
        self.liveness = Liveness(self.transport, self.events, nodes, self.heartbeat_s, self.timeout_s,
                                 report_hold(nodes, report_hold_s))  # (None: scaled with the allocation)
        self.claims = Claims(self.run_dir, self.fleet_id, self.sched, self.specs, self.events,
                             stale_after=stale_after, max_attempts=max_attempts)
        self.submissions = Submissions(self.run_dir, self.sched, self.specs, self.events)
        self.submissions.node_hold = self.liveness.report_hold_s if window_depth > 1 else 0.0  # (Submissions.hold)
        self.recorder = recording.Recorder(self)  # the run directory's lease, the journal
        # Done markers written by the steps' nodes, else by the writer's threads (nodemarkers).
        self.markers = nodemarkers.attach(self.recorder.writer, self.transport, self.liveness.agents)
        self.preloads = preloads.Preloads(preload, self.liveness, self.events)
        self.cancelling = cancelling.Cancelling(self.sched, self.liveness.send, self._feed, self._unreachable)
        self.stopping = False
        self._inbox: deque = deque()  # (event, time): scheduler events not yet handed over (see _feed)
        self._todo: deque = deque()   # (decision, time): decisions not yet acted on
        self._feeding = False
        self.early = early.Early()  # reports of queued steps read before the pass that runs them
        self._until: float | None = None  # this loop turn's end for acting (time.monotonic())
        self.intake = Intake(self)  # submissions on their way in
        self.ready = False
        self.coming = comingup.ComingUp(self)  # the connection file, or why the fleet cannot come up
        self.nocores = nocores.NoCores(self)  # nodes whose cores are all held back (fleet.control.nocores)
        self.ended_why: dict[str, str] = {}  # step -> how its last attempt ended, for its retry line
        self.interrupted: set[str] = set()   # steps stopped by this fleet's own stop (not attempts)
        self.drain = drain.Drain(self)  # the allocation's end (fleet.control.drain)
        self.holds = HoldTimer(self)  # the ends of defer-widest's holds (fleet.control.holdtimer)
        self.orphan = jobend.Orphan(self)  # every agent gone for good (fleet.control.jobend)
        self.cause = stopcause.StopCause(self)  # what stopped it: coordinator.log, fleet_down
        turntrace.install(self)  # FLEET_TURN_TRACE: the slow loop turns, part by part

    # What tools and tests reach for by name (the parts own them).
    keys = property(lambda self: self.transport.keys)
    agent_sock = property(lambda self: self.transport.agent_sock)
    client_sock = property(lambda self: self.transport.client_sock)
    agent_endpoint = property(lambda self: self.transport.agent_endpoint)
    client_endpoint = property(lambda self: self.transport.client_endpoint)
    agents = property(lambda self: self.liveness.agents)

    # -- lifecycle ------------------------------------------------------------------
    def serve(self) -> int:
        """Start the agents and run until stopped; the process's exit status."""
        self.cause.install()  # SIGTERM, SIGINT, SIGHUP (fleet.control.stopcause)
        self.events.write(events.FleetStarting(t=time.time(), nodes=self.expected, pid=os.getpid(),
                                               fleet=self.fleet_id, machine=self.profile.name))
        self.launcher.start(self.agent_endpoint, self.expected, self.preload,  # (main thread: fleet.site.tether)
                            {security.AGENT_ENV: self.keys.agent_env(),
                             "FLEET_HEARTBEAT": f"{self.heartbeat_s},{self.timeout_s}",
                             logtag.ENV: self.fleet_id})  # (their log lines say whose they are)
        deadline = time.monotonic() + self.join_timeout_s
        self.intake.start()
        heap.watch()
        poller = zmq.Poller()
        # The sockets; off-loop work done (intake's worker); the journal's fsync made (the recorder's syncer).
        for s in (self.agent_sock, self.client_sock, self.intake.worker.fd, *self.recorder.fds()):
            poller.register(s, zmq.POLLIN)
        self.drain.wakeup(poller)  # a signal ends the wait at once (fleet.control.drain)
        next_beat = time.monotonic()
        next_claims = time.monotonic() + self.claims.period()
        code = 0
        try:
            while not self.stopping:
                if code := self.coming.check(deadline):  # (fleet.control.comingup)
                    break
                busy = self._todo or self._inbox or self.early.cut or self.intake.ready()
                # (shared: the claims log is followed every FOLLOW_S; done markers waiting to ride)
                wake = self.markers.wake(min(next_beat, next_claims))
                wait_ms = 0 if busy else self.holds.wait_ms(time.time(), self.drain.wait_ms(
                    time.time(), int((wake - time.monotonic()) * 1000)))
                ready = dict(poller.poll(self.liveness.polling(wait_ms)))  # (returning late: a stall, Liveness)
                self.recorder.stand(time.monotonic())  # found gone by another fleet: it stops (control.foundgone)
                self.drain.follow_clock(time.time())  # a wall clock's step, before any event is stamped with it
                self._until = jobend.woke(self) + TURN_S  # (deaf till the next poll: not counted; frozen: drains)
                if self.agent_sock in ready:
                    self._drain(self.agent_sock, self._on_agent)
                if self.client_sock in ready:
                    self._drain(self.client_sock, self._on_client)
                if self.intake.worker.fd in ready:
                    self.intake.collect()
                self.intake.work(time.time(), self._until)
                self._pump()
                if time.monotonic() >= next_beat:
                    self._beat()
                    next_beat = time.monotonic() + self.heartbeat_s
                self.drain.tick(time.time(), ready)  # its own timer: the drain point, not the next beat
                self.holds.tick(time.time())  # a held step's hold ended: a pass (fleet.control.holdtimer)
                if time.monotonic() >= next_claims:
                    self._tend_claims()
                    next_claims = time.monotonic() + self.claims.period()
                heap.after_collection()  # what survived a costly full collection: frozen (control/heap)
                heap.trim()  # the C library's free heap back to the system, every few seconds (control/heap)
                self.recorder.turn(ready)  # the journal first: the events never say more
                self.markers.tick(time.monotonic())  # done markers that found no message to ride
                self.transport.flush(lambda n, t: self._unreachable(n, t, False))  # the launches, one message an agent
                self.drain.write_events()  # (what a full disk refuses is kept; it drains the fleet)
                self.liveness.listening()
        finally:
            self._teardown()
        return code

    def _teardown(self) -> None:
        self._until = None  # act on every decision made: nothing starts, the records are written
        self.cause.say(self.orphan.why())
        self._pump()
        self.intake.close()
        for a in self.agents.values():
            if a.alive:
                self.liveness.send(a.node, P.Shutdown(self.recorder.shutdown_grace))  # each its own grace (none: found gone)
        # Wait (bounded) for agents to say goodbye, then make sure of it.
        deadline = time.monotonic() + 5.0 + cancelling.longest_grace(self.sched)
        while self.liveness.any_alive() and time.monotonic() < deadline:
            if self.agent_sock.poll(100):
                self._drain(self.agent_sock, self._on_agent)
                self._pump()
        outcomes.record_unreported(self.sched, self.interrupted, self.events, time.time())
        self.launcher.stop()
        self.recorder.close()
        self.events.write(events.FleetDown(t=time.time(), reason=self.orphan.why(), signal=self.cause.signal))
        self.drain.write_events(close=True)
        if self.ready:
            (self.run_dir / self.connection_name).unlink(missing_ok=True)
        self.transport.close()

    # -- sockets --------------------------------------------------------------------------
    def _drain(self, sock, handler) -> bool:
        """Hand a batch of sock's messages to handler; True if none is left waiting."""
        agents = sock is self.agent_sock  # their events wait: one pass after the batch (control.turns)
        held, self._feeding = self._feeding, self._feeding or agents
        until = time.monotonic() + DRAIN_S if agents else None  # (a node's goodbye ends all it ran)
        try:
            return self.transport.drain(sock, handler, self._agent_refused if agents else None, until)
        finally:
            self._feeding = held
            if agents and self._until is not None:  # what they brought is acted on this turn
                self._until = max(self._until, time.monotonic() + TURN_S)

    def _agent_refused(self, e: P.ProtocolError) -> None:
        if not self.ready:
            # Our own agent (it has the agent key) cannot work with us: say so now.
            self.launcher.note_failure(f"an agent speaks {e}")

    # -- agents -------------------------------------------------------------------------------
    def _on_agent(self, ident: bytes, msg) -> None:
        now = time.time()
        if type(msg) in reports.KINDS:  # a step's Started or Exited: most messages (fleet.control.reports)
            reports.report(self, ident, msg, now)
            return
        if isinstance(msg, P.Join):
            self._join(ident, msg, now)
            return
        if isinstance(msg, P.JoinFailed):
            log.error("agent on %s could not start: %s", msg.node, msg.reason)
            self.events.write(events.AgentFailed(t=now, node=msg.node, reason=msg.reason, preload=msg.preload or None))
            self.launcher.note_failure(f"{msg.node}: {msg.reason}")
            return
        agent = self.liveness.known(ident, msg)
        if agent is None or launching.reported(self, agent.node, msg, now) or isinstance(msg, P.Heartbeat):
            return  # (launching: a Dropped, and reports of queued steps that came early)
        if isinstance(msg, P.Started):
            self._started(agent.node, msg, now)
        elif isinstance(msg, P.Exited):
            self._exited(agent.node, msg, now)
        elif isinstance(msg, P.Preloaded):
            self.preloads.answered(agent.node, msg, now)
            self._settle_preloads(now)
        elif isinstance(msg, P.MarkersWritten):
            self.markers.written(agent.node, msg)
        elif isinstance(msg, P.Ok) and msg.what in ("bye", "warned"):  # unasked: its node is lost, or it was warned
            jobend.said(self, agent, msg, now)  # (a signal: the job ends, fleet.control.jobend)
        elif isinstance(msg, P.Ok) and msg.what == "restarted":  # its zygote died: a new one (fleet.node.rezygote)
            rezygote.restarted(self, agent, msg, now)
        else:
            self.transport.warn(f"unexpected:{type(msg).__name__}",
                                f"dropped an unexpected {type(msg).__name__} from an agent")

    def _join(self, ident: bytes, msg: P.Join, now: float) -> None:
        if msg.node in self.sched.fencing.nodes:  # its lost agent's steps may run there still (fleet.core.fencing)
            self.transport.reply(self.agent_sock, ident, P.Reject(f"node {msg.node!r} was lost; its steps may "
                                                                  f"still be stopping there: join again later"))
            return
        was_ready = self.ready
        nodes = self.liveness.join(ident, msg, now, was_ready)
        self.nocores.joined(msg)
        if not was_ready and self.nocores.none_left(nodes, now):
            return  # every node's cores held back: the fleet cannot come up
        nodes = self.preloads.joined(msg, nodes, was_ready)  # a late joiner first preloads
        for spec in nodes:
            self._feed(NodeJoined(spec), now)
        if nodes and not was_ready:
            self.coming.publish(now)  # the connection file: up (fleet.control.comingup)

    def _started(self, node: str, msg: P.Started, now: float) -> None:
        reports.started(self, node, msg, now, self.sched.placed(msg.step))

    def _exited(self, node: str, msg: P.Exited, now: float) -> None:
        reports.exited(self, node, msg, now, self.sched.placed(msg.step))

    def _interrupt(self, node: str, msg: P.Exited, view, now: float) -> None:
        """A step stopped as this fleet stops: interrupted, not an attempt (no attempt record nor final
        outcome: the next run runs it), not for the scheduler (nothing is retried or blocked after a stop)."""
        self.interrupted.add(msg.step)
        rec = outcomes.interrupted_exit(now, node, msg, view, self.drain.why_for(msg))
        self.events.write(rec)
        self.submissions.ended(msg.step, S.INTERRUPTED, msg.attempt, rec.reason, final=True)
        self.drain.interrupted(msg.step, msg.attempt, now)

    def _beat(self) -> None:
        # Silence is judged only with every agent message read: what waited in the socket
        # while the loop was busy is not silence (bounded: then the next beat judges).
        # Read only when some agent is half way to its timeout (Liveness.doubtful).
        jobend.frozen(self, now := time.time())  # (stopped in this turn: drained before its agents are read)
        emptied = not self.liveness.doubtful() or any(self._drain(self.agent_sock, self._on_agent) for _ in range(10))
        for node in self.liveness.beat(now, judge=emptied):
            self.markers.gone(node)
            jobend.lost(self, node, "agent missed heartbeats", now, fence=True)
        self.orphan.tick(now)  # no agent left, none to come: the fleet stops (fleet.control.jobend)
        self._settle_preloads(now)  # lost nodes are not waited for; nor anyone past the time

    def _tend_claims(self) -> None:
        now = time.time()
        for event in self.claims.tend(now):
            self._feed(event, now)

    # -- decisions -----------------------------------------------------------------------------------
    def _feed(self, event, now: float) -> None:
        """Hand the scheduler one event and act on its decisions, in order, as far as this
        loop turn allows (_pump). What acting produces (a claim held elsewhere, a launch
        that cannot be made, an agent found unreachable) joins the same inbox: acting
        never re-enters the core, however many steps a burst of failures touches."""
        self._inbox.append((event, now))
        self._pump()

    def _pump(self) -> None:
        """Act on waiting decisions, then hand over waiting events, first come first,
        until the turn's time is up (the rest waits for the next turn: thousands of
        starts do not keep the loop from its sockets); then the reports held for the
        steps those events made run (fleet.control.early), and what they bring."""
        if self._feeding:
            return
        self._feeding = True
        try:
            while self._todo or self._inbox or self.early:
                while self._todo or self._inbox:
                    if self._until is not None and time.monotonic() > self._until:
                        return
                    d = None
                    try:
                        if self._todo:
                            d, now = self._todo.popleft()
                            self._act((d,), now)
                        else:
                            event, now = turns.take(self._inbox)  # a turn's exits in one pass
                            self._todo.extend((d, now) for d in self.sched.handle(event, now))
                    except Exception as e:  # a bug must not stop the fleet: counted, logged once
                        if isinstance(d, launching.STARTS):
                            self._start_failed(d, e, now)
                        else:
                            self.transport.error("acting")
                if not self.early.replay(self.sched, self._started, self._exited,
                                         lambda: self.transport.error("acting"), self._until):
                    return  # (what is held waits for events still to come, or the next turn)
        finally:
            self._feeding = False

    def _unreachable(self, node: str, now: float, pump: bool = True) -> None:
        """A launch could not be sent: the node is lost, once; the scheduler ends each step
        it holds there as lost and retries it elsewhere. Found by the turn's flush (after the
        journal's write; pump False) the loss waits for the next turn: journaled, then told."""
        if self.liveness.lose(node, now, "could not reach the agent"):
            self.markers.gone(node)
            jobend.lost(self, node, f"could not reach the agent on {node}", now, later=True, fence=True)
            if pump:
                self._pump()

    def _act(self, decisions, now: float) -> None:
        for d in decisions:
            if isinstance(d, launching.DECIDED):  # Start, and a node's window (fleet.core.window)
                self._start(d, now)
            elif isinstance(d, Wait):
                self.events.write(events.Wait.of(now, d.step, d.why, d.behind))
            elif isinstance(d, Retry):
                why = self.ended_why.pop(d.step, "") or d.reason
                self.events.write(events.Retry(t=now, step=d.step, attempt=d.attempt, reason=why))
                spec = self.specs.get(d.step)
                self.submissions.retrying(d.step, d.attempt, spec.retries + 1 if spec else d.attempt, why)
            elif isinstance(d, Finished):
                self._finished(d, now)
            # A run counts a step's end before its records: one not written (full disk, bug) must not hang it.
            elif isinstance(d, Blocked):
                why = f"dependency {d.because} did not succeed"
                self.submissions.ended(d.step, S.BLOCKED, 0, why, final=True)
                self.events.write(events.Blocked(t=now, step=d.step, because=d.because))
                self._final(d.step, S.BLOCKED, why, now, d.because)
            elif isinstance(d, Unrunnable):
                self.submissions.ended(d.step, S.UNRUNNABLE, 0, d.reason, final=True)
                self.events.write(events.Unrunnable(t=now, step=d.step, reason=d.reason))
                self._final(d.step, S.UNRUNNABLE, d.reason, now, d.step if d.after_loss else None)
            elif isinstance(d, Skipped):
                where = self.claims.elsewhere.pop(d.step, None)  # (a rerun's million: lines by shape)
                self.submissions.ended(d.step, S.SKIPPED, 0,
                                       "succeeded in another fleet" if where else "already succeeded", final=True)
                self.events.write_encoded((eventlines.skipped(self.events.fleet, now, d.step, where and where[0]),))
            elif isinstance(d, cancelling.STOPS):  # a Kill, or a Withdraw of a queued step
                self.cancelling.kill(d, now)
            elif isinstance(d, Entering):
                self.intake.entering(d)
            elif isinstance(d, Ignored):
                self.transport.warn("ignored", d.what)
            elif isinstance(d, GoOn):  # a bounded pass: the rest of it after what is queued now
                self._inbox.append((Exits(()), now))

    def _finished(self, d: Finished, now: float) -> None:
        if self.recorder.parents:  # a parent's success is recorded with its family's (recording.parent_ended)
            self.recorder.parent_ended(d, now)
        elsewhere = self.claims.elsewhere
        final = not d.goes_on and self.sched.state(d.step) in S.FINAL  # (goes_on: a batch's later state)
        self.submissions.ended(d.step, d.outcome, d.attempt, d.reason, final=final)  # (first: see _act)
        if not d.ran:
            self.events.write(events.Cancelled(t=now, step=d.step, reason=d.reason))
        if d.outcome in (S.LOST, S.STOPPED) or d.step in elsewhere or d.overrules:
            # No agent reported these ends (or its record said the attempt went on): the record is ours to write.
            self.events.write(events.Exit(t=now, step=d.step, attempt=d.attempt, outcome=d.outcome, reason=d.reason,
                                          by=elsewhere[d.step][0] if d.step in elsewhere else None))
        if d.outcome == S.LOST or d.overrules or self.recorder.overruled:  # the attempt's record is ours to write
            self.recorder.ended_here(d, now)
        if final and d.outcome != S.SUCCEEDED and d.step in self.specs:
            if d.step not in elsewhere and self.claims.final_here(d.step):  # another fleet's is its own to record
                self.recorder.final(d.step, d.outcome,
                                    {"reason": d.reason, "attempt": d.attempt, "fleet": self.fleet_id, "at": now})
        elsewhere.pop(d.step, None)
        if not final:  # a Retry follows: its line names how this attempt ended
            self.ended_why[d.step] = d.reason or d.outcome

    def _final(self, step: str, outcome: str, reason: str, now: float, cause: str | None = None) -> None:
        """Record on disk how a step ended here without success, unless it is another fleet's (Claims.final_mark)."""
        if (mark := self.claims.final_mark(step, cause)) is not None:
            self.recorder.final(step, outcome, {"reason": reason, "fleet": self.fleet_id, "at": now, **mark})

    def _start(self, d: Start, now: float) -> None:
        if launching.recorded(self.events, d, now, self.recorder.taken_back, self.claims.elsewhere) or self.stopping:
            return  # nothing starts during teardown (a retry decided now has nowhere to run)
        spec = self.specs[d.step]
        c = self.recorder.claim(d, spec)
        if c.kind != store.Claim.OURS:
            for event in self.claims.not_ours(d, c, now):
                self._feed(event, now)
            return
        launching.write_start(self.events, now, d, c.adopted)
        slot = d.placement[0]
        try:
            msg = launching.launch(self.profile, spec, d, self.claims.run_dir_of(d.step), self.fleet_id,
                                   self.submissions.hold(d.step), self.liveness.clock_ahead(slot.node))
            sent = self.liveness.send(slot.node, msg)
        except Exception as e:  # it cannot be made, or encoded: the step fails (nothing was sent)
            why = str(e) if isinstance(e, launching.REFUSED) else launching.bug(self.transport, e)
            self.events.write(launching.failed(now, d, slot.node, why))
            self._feed(StepExited(d.step, d.attempt, S.FAILED, why), now)
            return
        if not sent:
            self._unreachable(slot.node, now)

    def _start_failed(self, d, e: Exception, now: float) -> None:
        """Starting `d` failed unforeseen (its records could not be made: a directory where a
        file is, a full disk): the attempt fails with the error as its reason, rather than
        stay running with nothing to end it (`fleet run` waited for good). Its exit is an
        event for the inbox: acting never re-enters the core."""
        why = launching.bug(self.transport, e, "start")
        try:
            self.events.write(launching.failed(now, d, d.placement[0].node, why))
        except Exception:  # (the record is lost, not the step's end)
            self.transport.error("acting")
        self._inbox.append((StepExited(d.step, d.attempt, S.FAILED, why), now))

    # -- clients --------------------------------------------------------------------------------------
    def _on_client(self, ident: bytes, msg) -> None:
        reply = lambda m: self.transport.reply(self.client_sock, ident, m)  # noqa: E731
        if isinstance(msg, P.Submit):
            self.intake.submit(ident, msg)  # answered when it is in (fleet.control.intake)
        elif isinstance(msg, P.Progress):
            reply(self.submissions.progress(msg))
        elif isinstance(msg, P.Status):
            reply(P.StatusReply(self.status(msg.nodes_from)))
        elif isinstance(msg, P.Cancel):
            reply(self.cancelling.asked(msg, time.time()))
        elif isinstance(msg, P.Down):  # the answer says how long its steps may take to stop
            reply(P.Stopping(cancelling.longest_grace(self.sched)))
            self.cause.on_down()
        else:
            reply(P.Error(f"unexpected {type(msg).__name__}"))

    # -- preloads (fleet.control.preloads) ------------------------------------------------------------
    def _settle_preloads(self, now: float) -> None:
        """Late joiners reach the scheduler (or are sent away); a held submission is entered or refused."""
        settled = self.preloads.settle()
        for node, reason in settled.turned_away:
            log.error("node %s cannot preload the fleet's modules, so it gets no steps: %s", node, reason)
            self.events.write(events.AgentFailed(t=now, node=node, reason=f"cannot preload: {reason}"))
            self.liveness.send(node, P.Shutdown(grace=2.0))
        for spec in settled.nodes:
            self._feed(NodeJoined(spec), now)
        if (held := settled.held) is None:
            return
        if held.problems:
            self.submissions.withdraw(held.acc)
            self.transport.reply(self.client_sock, held.ident, P.SubmitReply(False, problems=held.problems))
        else:  # answered once it is in; those behind it follow (fleet.control.intake)
            self.intake.begin(held.ident, held.msg, held.acc, now)

    def status(self, nodes_from: int = -1) -> dict:
        """The answer to `fleet status` (fleet.control.status); a page of the node table from `nodes_from`."""
        return status_answer(self.sched, self.liveness.in_order(), up_since=self.started, run_dir=self.run_dir,
                             failures=self.submissions.failures, dropped=self.transport.dropped,
                             submissions=self.submissions.subs.values(), nodes_from=nodes_from, wall=self.liveness.wall,
                             loop=self.liveness.loop_figures(submitting=self.intake.count(), **self.recorder.figures(),
                                                             **heap.figures()), quiet_s=self.liveness.timeout_s / 2,
                             longer_only=self.drain.closing.longer_only, preloading=self.preloads.waiting(),
                             kept=self.submissions.kept())


def main(argv: list[str] | None = None) -> int:
    """The coordinator's command line (fleet.control.coordinator_cli)."""
    from fleet.control import coordinator_cli
    return coordinator_cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
