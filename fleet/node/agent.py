"""The agent: one per node, between the coordinator (ZeroMQ) and its zygote (pipes).

It starts the zygote before importing anything threaded (libzmq starts I/O threads
the moment a context exists), joins the coordinator with what the node has, relays
launches and kills to the zygote and exits back, and heartbeats. It never forks a
step. If the coordinator goes silent past the timeout, or the agent's parent dies,
or it is told to stop, it stops the zygote (which kills every step's process group),
kills any group the zygote left, and exits. Should it die with its zygote (a SIGKILL of
its process group), its watcher, in a session of its own, ends its steps
(fleet.node.watcher). Stopped by a signal (the batch system ending the job), it relays
its steps' failures from then on as interrupted, and says the signal in its goodbye
(fleet.node.jobend).

A relayed message is forwarded as the bytes that came, once decoding them has checked
them: the coordinator's Launch, Kill and Preload reach the zygote, and the zygote's
Started, Exited and Preloaded reach the coordinator, exactly as their senders encoded
them. The coordinator knows which node reports from this agent's ZeroMQ identity.
What one loop turn relays goes as one batch each way (fleet.wire.framing, "Batches"):
the coordinator's messages to the zygote in one write, the zygote's reports to the
coordinator as one multipart ZeroMQ message. Reports that come within the hold the
coordinator gave (Welcome.report_hold_s, fleet.control.liveness.report_hold) of the
last ones sent wait for it and go together, with whatever the agent sends first.
The done markers of the steps that succeeded here come with the coordinator's messages
(P.Markers) and are written by the agent (fleet.node.markers: on a thread until the
filesystem proved fast); how far it got rides with the agent's next message
(P.MarkersWritten), or goes alone.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import time

from fleet.node import (child, clockecho, jobend, markers, memlimit, memwatch, orphans, rezygote, searchpaths, session,
                        watcher, zygotewatch)
from fleet.node.agentargs import arguments, node_name, offered_cores, offered_gpus  # noqa: F401  (node_name: tests)
from fleet.node.hello import await_hello, zygote_end
from fleet.node.launcherenv import clean_environment
from fleet.node.zygotepipe import Requests, start_zygote
from fleet.wire import fencing, framing, logtag
from fleet.wire import messages as P


class Agent:
    def __init__(self, args, zygote: subprocess.Popen, req_w: int, rep_r: int, hello):
        import zmq  # only now: the zygote is already its own single-threaded process
        self.zmq = zmq
        self.args = args
        self.node = args.node
        self.zygote = zygote
        self.req_w = req_w
        self.requests = Requests(req_w)  # (non-blocking: what the pipe cannot take now waits, fleet.node.zygotepipe)
        self.rep_r = rep_r
        self.hello = hello
        self.reader = framing.FrameReader()
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, self.node.encode())
        self.sock.setsockopt(zmq.LINGER, 1000)
        self.sock.setsockopt(zmq.MAXMSGSIZE, P.MAX_FRAME)
        if args.curve:
            from fleet.wire import security
            security.connect_as(self.sock, *args.curve.split())
        self.sock.connect(args.connect)
        self._flags = int(zmq.RCVMORE), int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.NOBLOCK)  # (no enum arithmetic)
        self.pgids: dict[tuple[str, int], int] = {}
        self.graces: dict[tuple[str, int], float] = {}  # each launched step's grace, until it exits
        # Stopping on its own (the coordinator silent, a signal), the agent gives steps at
        # most this long: they may be started elsewhere soon. A Shutdown says otherwise
        # (None: each step's own grace).
        self.grace: float | None = fencing.STOP_GRACE_S
        self.heartbeat_s = args.heartbeat
        self.timeout_s = args.join_timeout  # until welcomed; then the fence time
        self.fence_s = args.fence
        self.last_heard = time.monotonic()
        self.clock = clockecho.Echo()  # the coordinator's last clock stamp, echoed (fleet.control.nodeclock)
        self.stopping: str | None = None
        self.zygote_end = ""  # how the zygote died under us ("killed by SIGKILL"), unasked
        self.outside = self.silent = ""  # the signal that stopped us (the job ending: fleet.node.jobend); or silence
        self.warned = ""  # the batch system's warning signal, until said to the coordinator
        self.warning = jobend.WarningSignal()  # the steps it reached: interrupted, whatever their end
        self.doubts: list[tuple[float, P.Exited, bytes]] = []  # exits held for jobend.DOUBT_S, in time order
        self.memory = memwatch.Enforcer(getattr(args, "memlimit", None) or memlimit.Choice(memlimit.NONE),
                                        parent=getattr(hello, "pid", 0))  # (a Refused has none)
        self.hold_s = 0.0  # reports sent at most this often (Welcome.report_hold_s)
        self.held: list[bytes] = []  # the zygote's reports waiting for the hold to pass
        self.reported_at = float("-inf")  # when reports were last sent (time.monotonic())
        self.markers = markers.Writer()  # the done markers the coordinator hands this node
        self.relayed_at = float("-inf")  # when a message last went to the coordinator (time.monotonic())
        self.idle = True  # no step launched here and not yet exited: the writer wakes the loop
        # Our children not to end with the orphans: the watcher, which outlives us on purpose.
        self.keep = frozenset({w.pid for w in [getattr(args, "watcher", None)] if w is not None})
        # A zygote that dies unasked is restarted (fleet.node.rezygote): how often; what a new one needs
        # again; its writes held until its Hello (None: none importing); how the last died.
        self.restarts, self.unstarted = rezygote.Restarts(), rezygote.Unstarted()
        self.booting, self.died, self.preloads_replayed, self.replacing = None, "", 0, ""
        self.watch = zygotewatch.Watch(zygote)  # its end, not by its pipe alone (registered in serve)

    def send(self, msg) -> None:
        """Send one of our own messages to the coordinator (after the reports held)."""
        held, self.held = self.held, []
        if held:
            self.reported_at = time.monotonic()
        self.relay(*held, P.encode(msg))

    def report(self, payloads: list[bytes]) -> None:
        """Send the zygote's reports now, or hold them until report_due() if some were
        sent less than hold_s ago: so that a busy node's reports go together."""
        self.held += payloads
        now = time.monotonic()
        if self.held and now - self.reported_at >= self.hold_s:
            held, self.held, self.reported_at = self.held, [], now
            self.relay(*held)

    def report_due(self) -> float | None:
        """When the reports held are to be sent (time.monotonic()); None: none held."""
        return self.reported_at + self.hold_s if self.held else None

    def relay(self, *payloads: bytes) -> None:
        """Send encoded messages to the coordinator as one message of one frame each
        (dropped if its queue is full), with the markers' progress, if any is new."""
        progress = self.markers.progress()
        if progress is not None:
            payloads = (*payloads, P.encode(P.MarkersWritten(*progress)))
        self.relayed_at = time.monotonic()
        over = [p for p in payloads if len(p) > P.MAX_FRAME]
        for p in over:  # the coordinator's socket would drop us for it
            self._warn(f"dropped a message of {len(p)} bytes, over the {P.MAX_FRAME} limit")
        frames = [p for p in payloads if len(p) <= P.MAX_FRAME] if over else list(payloads)
        if not frames:
            return
        try:
            self.sock.send_multipart(frames, self.zmq.NOBLOCK)
        except self.zmq.Again:
            if progress is not None:  # the coordinator would wait for it for good: said again next time
                self.markers.unsay(progress)

    def to_zygote(self, *payloads: bytes) -> bool:
        """Write encoded messages to the zygote, in one write as far as its pipe takes them, the
        rest when it has room (held while a new one imports); False if it is gone."""
        if self.booting is not None:
            self.booting += payloads
            return True
        try:
            self.requests.write(payloads)
            return True
        except (BrokenPipeError, OSError):
            self.watch.gone = True  # (this turn's look at the zygote starts a new one, or says why not)
            return False

    def _flush_zygote(self) -> None:
        """Its request pipe has room: write what waits (never blocking, fleet.node.zygotepipe)."""
        try:
            self.requests.flush()
        except OSError:
            self.watch.gone = True

    def _warn(self, text: str) -> None:
        print(f"{logtag.tag()}fleet agent {self.node}: {text}", file=sys.stderr, flush=True)

    def join(self, cores, gpus, memory, held=()) -> None:
        self.send(P.Join(node=self.node, host=socket.gethostname(), cores=list(cores), gpus=list(gpus),
                         memory=int(memory), pid=os.getpid(), zygote_pid=self.hello.pid, preload=list(self.hello.preload),
                         memlimit=self.memory.choice.describe(), held_back=list(held), sent=time.time()))

    def serve(self) -> int:
        zmq = self.zmq
        for sig in jobend.STOP_SIGNALS:  # (TERM, INT, HUP)
            signal.signal(sig, self._on_signal)
        for sig in jobend.WARNING_SIGNALS:
            signal.signal(sig, self._on_warning)
        # A signal (SIGTERM when the coordinator dies) must end the wait at once, not at
        # the next heartbeat: it writes to this pipe, which the poller watches.
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        poller = zmq.Poller()
        for s in (self.sock, self.rep_r, wake_r, self.markers.wake_r):
            poller.register(s, zmq.POLLIN)
        self.watch.register(poller, zmq.POLLIN)
        self.requests = self.requests.renewed(self.req_w, poller, zmq.POLLOUT)  # (watched while writes wait)
        next_beat = time.monotonic()
        zygote_open = True
        while not self.stopping:
            # (rounded up: a wait rounded down to 0 ms would spin until the hold passes)
            ready = dict(poller.poll(max(0, math.ceil(self._wait(time.monotonic(), next_beat) * 1000))))
            if wake_r in ready:
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass  # drained; the handler has set self.stopping (or self.warned)
                if self.warned:  # before the exits it may have caused (fleet.node.jobend)
                    self._say_warned(self.warned)
                    self.warned = ""
            if self.markers.wake_r in ready:
                self._markers_written()
            if self.requests.fd in ready:
                self._flush_zygote()
            if self.sock in ready:
                self._drain_coordinator()
            if zygote_open and (self.rep_r in ready or self.watch.ended(ready)):
                zygote_open = self._zygote_turn(poller, ready)
            now = time.monotonic()
            if self.doubts:
                self._release_doubts(now)
            if self.held:
                self.report([])  # (sent if the hold has passed)
            self._say_markers(now)
            self.memory.tick(now)  # the watchdog's sample, when due
            if now - self.last_heard >= self.timeout_s:
                self.stopping = self.silent = f"no word from the coordinator at {self.args.connect} for {now - self.last_heard:.1f} s"
            if now >= next_beat:
                self.send(self.clock.beat(self.node, memwatch.node_used(getattr(self.args, "memory", 0))))
                self.watch.look()
                if zygote_open and self.booting is None:
                    self.to_zygote(P.encode(P.Tick()))
                next_beat = now + self.heartbeat_s
        return self._stop(zygote_open)

    def _zygote_turn(self, poller, ready: dict) -> bool:
        """Relay what the zygote wrote; once it ended (its pipe's end of file, its pid, a
        write that failed: fleet.node.zygotewatch), what it wrote before, then a new one
        is started (True: fleet.node.rezygote.pipe_closed) or the agent stops (False)."""
        if not self.watch.ended(ready):
            data = os.read(self.rep_r, 1 << 16)
            if data:
                self._from_zygote(data)
                return True
        for data in zygotewatch.drain(self.rep_r):
            self._from_zygote(data)
        poller.unregister(self.rep_r)
        self.watch.close()
        if not rezygote.pipe_closed(self, zygote_end, start_zygote):
            return False
        poller.register(self.rep_r, self.zmq.POLLIN)  # a new one's
        self.watch = zygotewatch.Watch(self.zygote).register(poller, self.zmq.POLLIN)
        return True

    def _wait(self, now: float, next_beat: float) -> float:
        """Seconds the loop may wait: until the next beat, or sooner for the fence (the
        coordinator may count on it: fleet.wire.fencing), the reports held, the exits in
        doubt, the markers' progress or a memory sample."""
        due = self.report_due()
        wait = min(next_beat if due is None else min(next_beat, due), self.last_heard + self.timeout_s) - now
        if self.doubts:
            wait = min(wait, self.doubts[0][0] - now)
        if self.markers.pending():  # what it writes is said within markers.HOLD_S (looked at 20 times a second)
            wait = min(wait, max(self.relayed_at + markers.HOLD_S - now, markers.HOLD_S / 5))
        sample = self.memory.due_in(now)
        return wait if sample is None else min(wait, sample)

    def _say_markers(self, now: float) -> None:
        """(Each loop turn) the markers' progress where no report will carry it soon: at
        once when the node has just run out of steps (from then on the writer wakes the
        loop after each piece), alone once markers.HOLD_S passed with nothing sent."""
        idle = not self.graces
        if idle is not self.idle:
            self.idle = idle
            self.markers.wake_when_written(idle)
        if self.markers.unsaid() and (idle or now - self.relayed_at >= markers.HOLD_S):
            self.relay()

    def _markers_written(self) -> None:
        """The writer's thread woke the loop (it does so only while no step of this node
        is under way): _say_markers says its progress this turn."""
        try:
            while os.read(self.markers.wake_r, 512):
                pass
        except BlockingIOError:
            pass

    def _on_signal(self, signum, frame) -> None:
        self.outside = signal.Signals(signum).name
        self.stopping = f"signal {self.outside}"

    def _on_warning(self, signum, frame) -> None:
        self.warned = signal.Signals(signum).name
        self._take_warning(self.warned)

    def _take_warning(self, name: str) -> None:
        """The warning reached this node: the steps running (or whose exit is in doubt) got it too."""
        self.warning.took(name, [*self.graces, *((m.step, m.attempt) for _, m, _ in self.doubts)])

    def _say_warned(self, name: str) -> None:
        """Tell the coordinator of the warning (once), before the exits it caused."""
        if self.warning.first_word():
            self.send(P.Ok("warned", signal=name))

    def _relabelled(self, msg: P.Exited, payload: bytes) -> bytes:
        """``payload`` (an exit that may be the job's end), or its interrupted form if a
        signal stopped this agent, or the warning reached the step (fleet.node.jobend)."""
        if self.warning.reached(msg) and not self.outside:
            self._say_warned(self.warning.by)  # (its handler may have run since the loop said it)
            return self.warning.relabel(msg)
        return jobend.relabel(msg, self.outside) if self.outside else jobend.unheard(msg, payload, self.silent)

    def _release_doubts(self, now: float) -> None:
        """Relay the held exits whose doubt is over (jobend.DOUBT_S): interrupted if a
        signal stopped this agent meanwhile, or its warning reached them, else as they came."""
        n = next((i for i, d in enumerate(self.doubts) if d[0] > now), len(self.doubts))
        due, self.doubts = self.doubts[:n], self.doubts[n:]
        if due:
            self.report([self._relabelled(msg, payload) for _, msg, payload in due])

    def _drain_coordinator(self) -> None:
        relayed: list[bytes] = []  # for the zygote, as they came, in one write
        try:
            self._take_coordinator(relayed)
        finally:
            if relayed:  # (a zygote gone: its launches end as its death's, fleet.node.zygotewatch)
                self.to_zygote(*relayed)

    def _take_coordinator(self, relayed: list[bytes]) -> None:
        """Handle what the coordinator sent; what is for the zygote joins ``relayed``."""
        zmq, sock = self.zmq, self.sock
        more, events, pollin, noblock = self._flags
        frame = None
        while True:
            # After a frame: the batch's next, or a message waiting, asked rather than tried
            # (a receive that finds nothing raises zmq.Again, which costs more than a frame).
            if frame is not None and not sock.getsockopt(more) and not sock.getsockopt(events) & pollin:
                return
            try:
                frame = sock.recv(noblock)  # a batch's frames come one by one
            except zmq.Again:
                return
            self.last_heard = time.monotonic()
            try:
                msg = P.decode(frame)
            except P.ProtocolError as e:
                if isinstance(e, P.VersionMismatch):  # only our coordinator can reach us: we cannot work together
                    self.stopping = f"the coordinator speaks protocol version {e.got!r}, this agent speaks {P.VERSION}"
                    return
                self._warn(f"dropped a malformed message: {e}")
                continue
            if isinstance(msg, P.Launch):
                self.graces[(msg.step, msg.attempt)] = msg.grace
                self.memory.launched(msg)
                self.unstarted.launched((msg.step, msg.attempt), frame, msg.after)
                relayed.append(frame)  # as it came: decoding it was the check
            elif isinstance(msg, P.Kill):
                self.unstarted.killed((msg.step, msg.attempt), frame)
                relayed.append(frame)
            elif isinstance(msg, P.Preload):
                self.unstarted.preloads.append(frame)
                relayed.append(frame)
            elif isinstance(msg, P.Markers):
                self.markers.add(msg.files, msg.last)
            elif isinstance(msg, P.Heartbeat):
                self.clock.read(msg.sent, self.last_heard)
            elif isinstance(msg, P.Welcome):
                clockecho.welcomed(self, msg)
            elif isinstance(msg, P.Reject):
                self.stopping = f"rejected by the coordinator: {msg.reason}"
            elif isinstance(msg, P.Shutdown):
                self.stopping = "asked to shut down"
                self.grace = msg.grace
            elif isinstance(msg, P.Error):
                self.stopping = f"the coordinator said: {msg.reason}"

    def _from_zygote(self, data: bytes) -> None:
        """Relay the zygote's reports in ``data`` (the next bytes of its stream), as one batch."""
        if self.booting is not None:  # a new zygote's first words (fleet.node.rezygote)
            return rezygote.boot(self, data)
        out = []
        for payload, msg in self.reader.feed_frames(data):
            if isinstance(msg, (P.Started, P.Exited, P.Dropped)) and rezygote.kept(self, msg, payload):
                continue  # (dropped as it stopped unasked: for a new zygote)
            if isinstance(msg, P.Started):
                self.pgids[(msg.step, msg.attempt)] = msg.pgid
                self.memory.started(msg)
            elif isinstance(msg, (P.Exited, P.Dropped)):
                self.pgids.pop((msg.step, msg.attempt), None)
                self.graces.pop((msg.step, msg.attempt), None)
                if isinstance(msg, P.Exited):
                    judged = self.memory.exited(msg, payload)  # out_of_memory, and its peak
                    if judged is payload and msg.outcome in jobend.RELABELLED:  # the job's end? (fleet.node.jobend)
                        if self.outside or self.silent or self.warning.reached(msg):
                            judged = self._relabelled(msg, payload)
                        elif (self.doubts or jobend.doubtful(msg)) and not self.stopping:  # (stopping: the
                            self.doubts.append((time.monotonic() + jobend.DOUBT_S, msg, payload))  # zygote's kills)
                            continue
                    payload = judged
                else:
                    self.memory.dropped(msg)
            elif isinstance(msg, P.Ok) and msg.what == "warned":  # its zygote took the warning, before these exits
                self._take_warning(msg.signal)
                self._say_warned(msg.signal)
                continue
            elif rezygote.answered(self, msg):
                continue  # (a new zygote's first words, as the agent stops; its answer to a replayed Preload)
            elif not isinstance(msg, P.Preloaded):
                self._warn(f"dropped an unexpected {msg.TYPE} message from the zygote")
                continue
            out.append(payload)  # as the zygote encoded it
        self.report(out)
        for reason in self.reader.dropped:
            self._warn(f"dropped a malformed message from the zygote: {reason}")
        self.reader.dropped.clear()

    def _stop(self, zygote_open: bool) -> int:
        self.booting = None  # (a new zygote still importing reads the Shutdown after)
        self.hold_s = 0.0  # what the steps stopped now report goes at once
        self._release_doubts(math.inf)
        self.report([])
        longest = max(self.graces.values(), default=0.0)
        grace = longest if self.grace is None else min(self.grace, longest)
        self._warn(f"stopping: {self.stopping}")
        if zygote_open:
            self.to_zygote(P.encode(P.Shutdown(self.grace)))
            # Pass on the exits of the steps it stops, so that they are recorded (and their
            # claims released) rather than left for other fleets to find stale.
            zygotewatch.read_out(self.rep_r, self.zygote, time.monotonic() + grace + 3.0, self._from_zygote,
                                 self._flush_zygote)
        self.watch.close()
        self.requests.close()
        rezygote.say_kept(self)  # (kept before the agent began to stop)
        try:
            self.zygote.wait(timeout=1.0 if zygote_open else grace + 3.0)
        except subprocess.TimeoutExpired:
            self.zygote.kill()
            self.zygote.wait()
        # Whatever the zygote could not stop (it died first), stop here: each step's group,
        # and the other groups of its session (every step has one: fleet.node.session).
        session.kill_all(self.pgids.values())
        orphans.end(0.0, keep=self.keep, log=self._warn)  # what a zygote that died left us (fleet.node.orphans)
        self.memory.close()  # its cgroups removed, now that nothing is left in them
        self.markers.drain(3.0)  # (bounded: what is not said written, the coordinator writes itself)
        # The steps its death took: each launched and not ended (its Started may never have come).
        ran = sorted(self.graces) if self.zygote_end else ()
        self.send(P.Ok("bye", signal=self.outside, zygote=self.zygote_end, steps=ran))  # (with the markers' progress)
        self.markers.close()
        self.sock.close(linger=500)
        self.ctx.term()
        return 0


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    # Stop (cleanly: SIGTERM) when whatever started us dies, e.g. a coordinator killed with -9. One
    # that died before we could ask (a local agent's coordinator: --parent-pid) sends nothing: stop now.
    if not child.die_with(args.parent_pid, signal.SIGTERM):
        print(f"{logtag.tag()}fleet agent: stopping: the coordinator (pid {args.parent_pid}) that started it is gone",
              file=sys.stderr, flush=True)
        return 1
    # Heartbeat interval and the coordinator's timeout (after which it declares this
    # agent lost). To never run a step twice, the agent stops its steps at 3/4 of the
    # timeout without word from the coordinator, which runs them elsewhere only once that
    # stop must be over (fleet.wire.fencing); its zygote at 1/2 without word from the
    # agent (a stopped agent).
    beat, _, timeout = os.environ.pop("FLEET_HEARTBEAT", "1.0,10.0").partition(",")
    args.heartbeat, timeout = float(beat), float(timeout or 10.0)
    args.fence = fencing.fence_s(timeout)
    orphans.become_subreaper()  # (for a zygote that dies: fleet.node.orphans)
    args.node = node_name(args)
    # The keys are ours alone: steps (children of the zygote) must not inherit them.
    args.curve = os.environ.pop("FLEET_CURVE", "")
    clean_environment()
    searchpaths.make_absolute()  # (PYTHONPATH=src: the same for steps run in steps/<id>)
    # How steps are held to their memory here: decided once, before the zygote (which
    # a cgroup v2 choice moves with this process), logged, and said in the Join.
    args.memlimit = memlimit.choose(os.environ.pop("FLEET_MEMLIMIT", "auto"))
    print(f"{logtag.tag()}fleet agent {args.node}: memory limits: {args.memlimit.describe()}", file=sys.stderr, flush=True)
    # The token: in every step's environment (a new zygote's: fleet.node.rezygote), its watcher ends them if we die.
    token = args.token = watcher.new_token()
    args.zygote_fence = 0.5 * timeout
    zygote, req_w, rep_r = start_zygote(args.preload, fence=args.zygote_fence, limits=args.memlimit.arg(), token=token)
    cgroups = args.memlimit.root if args.memlimit.kind in (memlimit.CGROUP1, memlimit.CGROUP2) else ""
    # Its grace: the zygote's for a lost agent, done well before the coordinator may count
    # us lost; it fences steps of a frozen node when the zygote would (fleet.node.watcher).
    args.watcher, args.watcher_fd = watcher.start(  # (that fd stays open until we exit: the point)
        zygote.pid, token, min(2.0, timeout / 4), 0.5 * timeout, cgroups)
    hello = await_hello(zygote, rep_r)  # or why not: the module a crashed zygote was importing
    from fleet.node import probe
    cores, held = offered_cores(args, probe.usable_cores)
    memory = args.memory or probe.node_memory()
    gpus = offered_gpus(args, probe.node_gpus)
    agent = Agent(args, zygote, req_w, rep_r, hello)
    if not isinstance(hello, P.Hello):
        reason = hello.reason if isinstance(hello, P.Refused) else "the zygote exited before saying hello"
        agent.send(P.JoinFailed(args.node, reason, isinstance(hello, P.Refused) and hello.preload))
        print(f"{logtag.tag()}fleet agent {args.node}: cannot serve: {reason}", file=sys.stderr, flush=True)
        zygote.wait(timeout=10)
        memlimit.release(args.memlimit)
        agent.sock.close(linger=2000)
        agent.ctx.term()
        return 3
    agent.join(cores, gpus, memory, held)
    return agent.serve()


if __name__ == "__main__":
    sys.exit(main())
