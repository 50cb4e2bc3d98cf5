"""The zygote: a single-threaded, pre-imported fork server, one (or more) per node.

Run by the agent as::

    python -m fleet.node.zygote --fd-in N --fd-out M [--preload mod1,mod2] [--grace S]

``--fd-in`` is the read end of the agent's request pipe, ``--fd-out`` the write end
of the response pipe (both passed with ``pass_fds``). It pins the thread pools of
numerical libraries to one thread, imports the preload modules (saying each to the
agent first: an import that kills it is named by the agent, fleet.node.hello), checks
that it is still one OS thread (else it sends Refused and exits 3), sends Hello, then serves
(a Preload while serving: :mod:`fleet.node.preload`):
a ``call`` step is a fork running :func:`fleet.node.child.run_call` (usually the
spare forked ahead of demand, :mod:`fleet.node.spare`), a ``command`` step is
spawned with subprocess (vfork/posix_spawn, no copy of this process:
:mod:`fleet.node.command`). Every child is reaped here with os.wait4 and reported
as Exited.

A Launch with ``after`` (a node's window) is held until the step it names is
reaped here, then started at once (:mod:`fleet.node.queued`). Reports go to the agent
once per loop turn, back to back in one write (:func:`fleet.wire.framing.write_payloads`).

A step with a ``timeout`` is stopped when it passes (SIGTERM to its process group and
the other groups of its session, SIGKILL after the step's ``grace``) and reported ``timed_out``; a Kill with ``cancel``
stops it the same way and reports it ``cancelled`` (:mod:`fleet.node.stopping`).

It stops on Shutdown, at end of file on the request pipe (the agent is gone), on
SIGTERM or SIGHUP, and when its parent dies (PR_SET_PDEATHSIG = SIGTERM): every step
is stopped so, with its own grace (at most the Shutdown's, or ``--grace`` when the
agent is gone: its steps may soon run elsewhere), and all are reaped before it exits.
It uses no threads, ever: a thread holding a lock at fork time would leave that lock
held forever in the child.
"""

import os

from fleet.node.threads import THREAD_VARS  # import-light: nothing in it reads these

# The agent's values. A step does not get them back: its thread-pool variables are
# set to its own thread count (fleet.node.threads), on every path.
INHERITED_THREAD_ENV = {name: os.environ.get(name) for name in THREAD_VARS}
if __name__ == "__main__":  # only the zygote process, not a module importing this
    # Thread-pool sizes are read when a library is loaded, so they must be 1 before
    # any preload import, or a pool's threads start in the zygote. Forced, not
    # defaulted: an agent's OMP_NUM_THREADS=8 must not start 7 threads in here.
    for _name in THREAD_VARS:
        os.environ[_name] = "1"

import argparse  # noqa: E402  (after the environment on purpose)
import select  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

import msgpack  # noqa: E402

from fleet.node import child, command, exits, logcut, memlimit, orphans, session, srunend, srunstop  # noqa: E402
from fleet.node.preload import Preloads, import_at_start, thread_count  # noqa: E402
from fleet.node.outbox import Outbox  # noqa: E402
from fleet.node.queued import GOES_ON, Queued, test_hold  # noqa: E402
from fleet.node import spare as spare_mod, threads as step_threads  # noqa: E402
from fleet.node.spare import Spare  # noqa: E402
from fleet.node.stopping import WITH_NODE, Stops  # noqa: E402
from fleet.wire import framing, interpreter, logtag  # noqa: E402
from fleet.wire import messages as P  # noqa: E402

EXIT_REFUSED = 3
DEFAULT_GRACE = 2.0


@dataclass
class _Step:
    launch: P.Launch
    pid: int
    pgid: int
    spawned_at: float  # parent-side time; first_at if the child never reported
    popen: subprocess.Popen | None = None
    report: dict = field(default_factory=dict)
    ending: str | None = None  # being stopped: the outcome to report (fleet.node.stopping)
    why: str = ""  # who stopped it, if a Kill did (P.Kill.why)
    term_at: float | None = None
    kill_at: float | None = None
    killed: bool = False


class Zygote:
    """The serving loop; construct after the single-thread check."""

    def __init__(self, fd_in: int, fd_out: int, grace: float = DEFAULT_GRACE, fence: float = 0.0,
                 preloaded: tuple[str, ...] = ()):
        self.fd_in, self.fd_out, self.grace = fd_in, fd_out, grace
        # Fencing: an agent that says nothing for `fence` seconds (stopped, hung) may
        # already be declared lost, its steps started again elsewhere; ours must end.
        self.fence = fence
        self.last_heard = time.monotonic()
        os.set_inheritable(fd_in, False)
        os.set_inheritable(fd_out, False)
        self.report_r, self.report_w = os.pipe()
        os.set_blocking(self.report_r, False)
        self.wake_on_reports = not spare_mod.roomy(self.report_w)  # else read each turn, not woken for
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.steps: dict[int, _Step] = {}  # by pid
        self.keys: dict[tuple[str, int], int] = {}  # (step, attempt) -> pid
        self.ids: dict[str, int] = {}  # step -> pid: what a queued launch may wait for
        self.queued = Queued()  # launches waiting for a step running here (fleet.node.queued)
        self.outbox = Outbox(self.fd_out)  # reports, written at the turn's end (or held: fleet.node.outbox)
        self.requests = framing.FrameReader()
        self.reports = msgpack.Unpacker(raw=False)
        self.agent_gone = False
        self.child_ended = True  # a SIGCHLD came since the last reap (_on_child): reap then only
        self.stop_grace: float | None = None  # set: shut down with this grace
        self.spare = Spare(self.report_w, INHERITED_THREAD_ENV)
        self.prefork = True  # keep a spare
        self.stops = Stops(self._signal_group, lambda step: self.steps.get(step.pid) is step, launcher=srunstop.Srun())
        self.srun_ends = srunend.Held(self._warn)  # steps whose srun died: their Slurm step ended first
        self.preloads = Preloads(preloaded)  # and take more while serving
        # Handlers, not SIG_IGN: an ignored signal stays ignored across exec, a
        # handled one is reset to default, so spawned commands get defaults.
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, self._on_child)
        signal.signal(signal.SIGINT, self._on_signal)  # the agent decides, not ^C
        self.warned = ""  # a --signal without B: reaches us too, and our steps (node.jobend): said first
        for sig in (signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, self._on_warning)
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_stop)

    # -- plumbing ---------------------------------------------------------------

    @property
    def own_fds(self) -> tuple[int, ...]:
        """Descriptors a forked child must close."""
        return (self.fd_in, self.fd_out, self.report_r, self.wake_r, self.wake_w) + logcut.fds  # (commands' logs)

    def _on_signal(self, signum, frame) -> None:
        pass  # the wakeup fd already woke the loop

    def _on_warning(self, signum, frame) -> None:
        self.warned = signal.Signals(signum).name

    def _on_child(self, signum, frame) -> None:
        self.child_ended = True  # (and the wakeup fd woke the loop)

    def _on_stop(self, signum, frame) -> None:
        if self.stop_grace is None:
            self.stop_grace = self.grace

    def _warn(self, text: str) -> None:
        print(f"{logtag.tag()}fleet zygote {os.getpid()}: {text}", file=sys.stderr, flush=True)

    def send(self, msg, hold: float = 0.0) -> None:
        """Report to the agent at the end of this loop turn, or within `hold` seconds
        while launches are queued here (fleet.node.outbox)."""
        self.outbox.add(msg, hold)

    def flush(self) -> None:
        """Write the reports held to the agent, in one write."""
        if not self.outbox.flush():
            self.agent_gone = True
            if self.stop_grace is None:
                self.stop_grace = self.grace

    def _drain(self, fd: int) -> bytes:
        chunks = []
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                break
            chunks.append(chunk)
            if len(chunk) < 65536:  # a pipe's read takes all it holds: empty now (no EAGAIN read)
                break
        return b"".join(chunks)

    def _read_reports(self) -> None:
        self.reports.feed(self._drain(self.report_r))
        for record in self.reports:
            step = self.steps.get(record.get("pid")) if isinstance(record, dict) else None
            if step is not None:
                step.report.update(record)

    # -- requests ---------------------------------------------------------------

    def _read_requests(self) -> None:
        try:
            data = os.read(self.fd_in, 65536)
        except OSError:
            data = b""
        self.last_heard = time.monotonic()
        if not data:  # end of file: the agent died or closed us
            self.agent_gone = self.outbox.gone = True  # nobody is left to read what we would send
            if self.stop_grace is None:
                self.stop_grace = self.grace
            return
        try:
            frames = self.requests.feed_frames(data)
        except ValueError as exc:  # stream out of step: treat as a lost agent
            self._warn(f"request stream corrupt ({exc}); shutting down")
            self.stop_grace = self.grace
            return
        for reason in self.requests.dropped:
            self._warn(f"dropped a malformed request: {reason}")
        self.requests.dropped.clear()
        for payload, msg in frames:
            if self.stop_grace is not None:
                break  # nothing starts after a Shutdown
            if isinstance(msg, P.Launch):
                self.launch(msg, payload)
                if self.child_ended:  # a burst of launches must not delay earlier exits
                    self.reap()
            elif isinstance(msg, P.Kill):
                self.kill(msg)
            elif isinstance(msg, P.Shutdown):  # None: each step's own grace
                self.stop_grace = float("inf") if msg.grace is None else max(0.0, float(msg.grace))
            elif isinstance(msg, P.Preload):
                self.preloads.ask(msg.modules)
            elif isinstance(msg, P.Tick):
                pass  # its arrival was the point
            else:
                self._warn(f"dropped unexpected {msg.TYPE} message")

    def launch(self, msg: P.Launch, payload: bytes | None = None) -> None:
        """Start one step: fork for a call, spawn for a command. ``payload`` is
        ``msg`` as received (None: made here)."""
        if (msg.step, msg.attempt) in self.keys or (msg.step, msg.attempt) in self.queued:
            self._warn(f"dropped a second launch of {msg.step} attempt {msg.attempt}")
        elif self.queued.gone(msg):  # queued behind a step that went on (fleet.node.queued)
            self.send(P.Dropped(msg.step, msg.attempt, f"dropped: {msg.after!r} went on before it"))
        elif self.preloads.holds_back():
            pass  # left unanswered: its agent writes it to the zygote replacing this one (fleet.node.preload)
        elif msg.after and (msg.after in self.ids or self.queued.holds(msg.after)):
            self.queued.hold(msg, payload)  # started when that step is reaped (a chain: in turn)
        elif msg.kind == "call":
            self._fork_call(msg, payload)
        elif msg.kind == "command":
            self._spawn_command(msg)
        else:
            self._not_started(msg, f"unknown step kind {msg.kind!r}")

    def _make_spare(self) -> None:
        """Fork the next call step's child ahead of demand, between starts."""
        if self.stop_grace is None and self.prefork:
            self.spare.make(self.own_fds)

    def _fork_call(self, msg: P.Launch, payload: bytes | None) -> None:
        # No setpgid here: the child makes a session of its own (a spare while it waits),
        # which a group leader cannot (fleet.node.session.lead). Until it has, a signal
        # to its group finds none and reaches the child itself (_signal_group).
        pid = self.spare.hand(msg)
        if pid is not None:
            self._register(_Step(msg, pid, pid, time.time()))
            return
        sys.stdout.flush()  # or the child would write our buffered bytes again
        sys.stderr.flush()
        parent = os.getpid()
        try:
            pid = os.fork()
        except OSError as exc:
            self._not_started(msg, f"fork failed: {exc}")
            return
        if pid == 0:
            first_at = time.time()
            try:
                child.run_call(msg, self.report_w, first_at=first_at,
                               close_fds=self.own_fds, restore_env=INHERITED_THREAD_ENV,
                               parent=parent)
            finally:
                os._exit(70)  # not reached: run_call always _exits
        self._register(_Step(msg, pid, pid, time.time()))

    def _spawn_command(self, msg: P.Launch) -> None:
        try:
            spawned = command.spawn(msg, INHERITED_THREAD_ENV)
        except command.NotStarted as exc:
            self._not_started(msg, str(exc), exc.disk_full)
            return
        pid = spawned.popen.pid
        step = _Step(msg, pid, pid, spawned.at, spawned.popen)
        step.report = spawned.report
        self._register(step)

    def _register(self, step: _Step) -> None:
        self.steps[step.pid] = step
        self.keys[(step.launch.step, step.launch.attempt)] = step.pid
        self.ids[step.launch.step] = step.pid
        self.stops.arm(step, step.launch.timeout)
        self.send(P.Started(step.launch.step, step.launch.attempt, step.pid, step.pgid, step.spawned_at),
                  step.launch.hold)

    def _not_started(self, msg: P.Launch, error: str, disk_full: int | None = None) -> None:
        self.send(exits.not_started(msg, error, disk_full))

    def _signal_group(self, step: _Step, sig: int) -> None:
        try:
            os.killpg(step.pgid, sig)
        except ProcessLookupError:
            try:  # its group is not made yet (a call step's child), or it left it: reach it directly
                os.kill(step.pid, sig)
            except ProcessLookupError:
                pass
        # and the groups it made in its session (`timeout`, `set -m`): each step has its own
        session.signal_rest(step.pid, step.pgid, sig)

    def kill(self, msg: P.Kill) -> None:
        """Signal a running step's process group (cancel: stop it, fleet.node.stopping);
        unknown steps are ignored (they have exited, and their Exited is on its way).
        A held launch is dropped by a cancel or a withdrawal; a withdrawal does nothing else
        (the step started: its Started says so, and it runs)."""
        if (msg.cancel or msg.withdraw) and self.queued.drop(msg.step, msg.attempt):  # held: nothing ran
            how = "withdrawn" if msg.withdraw else "cancelled"
            self.send(P.Dropped(msg.step, msg.attempt, f"{how} before it started"))
            return
        if msg.withdraw:
            return
        step = self.steps.get(self.keys.get((msg.step, msg.attempt), 0))  # (None: ended, or held: srunend)
        if step is not None and msg.cancel:
            self.stops.stop(step, min(step.launch.grace, msg.grace), "cancelled", msg.why)
        if step is None or msg.cancel:
            return
        try:
            self._signal_group(step, msg.signal)
        except (OSError, ValueError) as exc:
            self._warn(f"kill {msg.step}: {exc}")

    # -- children ---------------------------------------------------------------

    def reap(self, block: bool = False) -> None:
        """Reap every exited child and send its Exited; the children's records are read
        once for the batch (each wrote its own before it exited)."""
        self.child_ended = False  # before the wait: a child ending after it sets it again
        ended = exits.reap(self, block)
        if ended:
            self._read_reports()
        for step, status, usage, ended_at in ended:
            if self.steps.get(step.pid) is step:  # (not one whose end was held: fleet.node.srunend)
                del self.steps[step.pid]
            if self.stop_grace is not None and step.ending is None:  # (see stopping.WITH_NODE: an
                step.ending = WITH_NODE  # exit 0 of a shell whose command the job's end killed too)
            if not self.srun_ends.hold(step, status, usage, ended_at):  # (its srun died: fleet.node.srunend)
                self._exited(step, status, usage, ended_at)

    def _exited(self, step: _Step, status: int, usage, ended_at: float) -> None:
        self.keys.pop((step.launch.step, step.launch.attempt), None)
        if self.ids.get(step.launch.step) == step.pid:
            del self.ids[step.launch.step]
        ended = exits.exited(step, status, usage, ended_at)
        self.send(ended, step.launch.hold)
        if ended.outcome in GOES_ON:  # it runs again at once, before what was queued behind it
            for sid, attempt in self.queued.behind(step.launch.step):  # (fleet.node.queued)
                self.send(P.Dropped(sid, attempt, f"dropped: {step.launch.step!r} went on before it"))
            return
        # Its cores are free: what was queued behind it starts now, its Started after this
        # Exited; one that could not start passes them on at once to what waited for it.
        due = self.queued.due(step.launch.step)
        while due:
            msg, payload = due.pop(0)
            if self.stop_grace is None:
                self.launch(msg, payload)
                test_hold()  # (tests only: FLEET_TEST_PROMOTED_HOLD)
                if msg.step not in self.ids:
                    due += self.queued.due(msg.step)
            else:  # stopping: it never starts, and the coordinator hears so (what waits for it: at shutdown)
                self.send(P.Dropped(msg.step, msg.attempt, "its node stopped before it started", stopped=True))

    # -- the loop ---------------------------------------------------------------

    def serve(self) -> int:
        """Serve until told to stop, then stop every step; returns the exit status."""
        poller = select.poll()
        for fd in (self.fd_in, self.wake_r) + ((self.report_r,) if self.wake_on_reports else ()):
            poller.register(fd, select.POLLIN)
        self._make_spare()
        while self.stop_grace is None:
            timeout = None
            if self.fence > 0:
                left = self.fence - (time.monotonic() - self.last_heard)
                if left <= 0:
                    self._warn(f"no word from the agent for {self.fence:g} s: stopping every step (fencing)")
                    self.stop_grace = 0.0
                    break
                timeout = max(1, int(left * 1000))
            timeout = self.preloads.poll_ms(timeout)
            timer = self.stops.next_ms()
            if timer is not None:
                timeout = timer if timeout is None else min(timeout, timer)
            wait = self.outbox.wait_ms(len(self.queued))
            if wait == 0:
                self.flush()
            elif wait is not None:  # reports held while launches are queued here
                timeout = wait if timeout is None else min(timeout, wait)
            ready = poller.poll(timeout)
            if self.warned:  # before the exits it caused, which the agent then takes as interrupted
                self.send(P.Ok("warned", signal=self.warned))
                self.warned = ""
            for fd, _events in ready:
                if fd == self.wake_r:
                    self._drain(self.wake_r)
                elif fd == self.report_r:
                    self._read_reports()
                elif fd == self.fd_in:
                    self._read_requests()
            self.stops.due(self._grace_of)
            if self.child_ended:  # (the children's records are read when they are reaped)
                self.reap()
            self.preloads.turn(self)
            self._make_spare()
        self.shutdown(self.stop_grace)
        return 0

    def _grace_of(self, step: _Step) -> float:
        """The step's grace, at most the shutdown's once the zygote is stopping."""
        cap = float("inf") if self.stop_grace is None else self.stop_grace
        return min(step.launch.grace, cap)

    def shutdown(self, grace: float) -> None:
        """SIGTERM every step's group, SIGKILL each after its own grace (at most
        ``grace`` s), reap all."""
        self.stop_grace = grace
        for step, attempt in self.queued.clear():  # none of them starts: nothing ran, no attempt used
            self.send(P.Dropped(step, attempt, "its node stopped before it started", stopped=True))
        self.spare.drop()
        self.preloads.drop()
        for step in list(self.steps.values()):
            self.stops.stop(step, self._grace_of(step), WITH_NODE)
        poller = select.poll()
        poller.register(self.wake_r, select.POLLIN)
        self.reap()
        while any(not step.killed for step in self.steps.values()) or self.stops.pending() or self.srun_ends:
            poller.poll(self.stops.next_ms() or (100 if self.srun_ends else 1))  # (a helper's end wakes it)
            self._drain(self.wake_r)
            self.stops.due(self._grace_of)
            self.reap()
            self.flush()  # each stopped step's exit as it comes
        self.reap(block=True)
        self.flush()
        # What steps left running outside their groups and sessions, adopted here
        # (fleet.node.orphans): it goes with the fleet.
        orphans.end(min(grace, DEFAULT_GRACE), log=self._warn)
        while True:  # anything else we parented (none expected): no zombies
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break


def _refuse(fd_out: int, reason: str, preload: bool = False) -> None:
    try:
        framing.write_message(fd_out, P.Refused(reason, preload))
    except OSError:
        pass
    print(f"{logtag.tag()}fleet zygote: refused: {reason}", file=sys.stderr, flush=True)
    os._exit(EXIT_REFUSED)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fleet.node.zygote")
    parser.add_argument("--fd-in", type=int, required=True, help="read end of the request pipe")
    parser.add_argument("--fd-out", type=int, required=True, help="write end of the response pipe")
    parser.add_argument("--preload", default="",
                        help="comma-separated modules to import before serving")
    parser.add_argument("--fence", type=float, default=0.0,
                        help="stop every step when the agent is silent this long (0: never)")
    parser.add_argument("--grace", type=float, default=DEFAULT_GRACE,
                        help="seconds between SIGTERM and SIGKILL when the agent is lost")
    parser.add_argument("--memlimit", default="none",
                        help="how steps are held to their memory: KIND[:CGROUP DIR] (fleet.node.memlimit)")
    parser.add_argument("--agent-pid", type=int, default=0, help="the agent's pid: gone already, stop")
    args = parser.parse_args(argv)
    memlimit.use(args.memlimit)  # before the first fork: every child inherits it
    child.set_pdeathsig(signal.SIGTERM)  # die with the agent, gracefully: our shutdown stops the commands too
    if args.agent_pid and os.getppid() != args.agent_pid:  # it died before the line above: no signal comes
        return 0
    orphans.become_subreaper()  # (before the first fork: see fleet.node.orphans)
    preload = tuple(m.strip() for m in args.preload.split(",") if m.strip())
    interpreter.user_path()  # (after our own imports, before the preloads)
    import_s = import_at_start(preload, args.fd_out, lambda reason: _refuse(args.fd_out, reason, True))
    step_threads.note_preloaded_pools()  # the children resize those pools (never us)
    threads = thread_count()
    if threads != 1:
        count = "an unknown number of" if threads is None else str(threads)
        _refuse(args.fd_out, f"{count} threads after importing preload modules {list(preload)}; forking needs exactly 1")
    zygote = Zygote(args.fd_in, args.fd_out, args.grace, args.fence, preload)
    # Everything imported so far goes to the collector's permanent generation: a
    # collection in a child would otherwise write to every object's header and copy
    # nearly every page it shares with us (gc.freeze exists for pre-fork servers).
    import gc
    gc.collect()
    gc.freeze()
    zygote.send(P.Hello(os.getpid(), threads, preload, import_s))
    zygote.flush()
    return zygote.serve()


if __name__ == "__main__":
    sys.exit(main())
