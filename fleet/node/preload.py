"""Preloading while serving: a suite's ``preload`` on a fleet that is already up.

A zygote imports its ``--preload`` modules before it says Hello. A Preload message
asks it for more while it serves (a suite submitted to a fleet `fleet up` started),
so that every later call step finds them imported, their pages shared.

Importing straight into the zygote would be a gamble: a module that starts a thread
at import leaves the zygote unable to fork safely, for good (with its steps running),
and one that fails half-way leaves its side effects behind. So each request is tried
first in a *probe*: a child forked from the zygote imports the modules one by one,
checks after each that it is still one OS thread, and says how it went on a pipe.
Only if the probe succeeds does the zygote import them itself, drop its spare child
(forked without them; the loop forks the next one), and count its own threads again.
The price is importing twice, once per module set and node; the gain is that a bad
module is refused without harm to anything running.

Part of the zygote's single-threaded loop: the probe is watched without blocking (its
pipe is read each turn, SIGCHLD wakes the loop when it ends, its deadline bounds the
poll). While the zygote imports for real, it serves nothing: exits wait until then.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Callable, NoReturn

from fleet.node import child, orphans, ownsignals, stale, threads as step_threads
from fleet.node.hello import ended
from fleet.wire import framing
from fleet.wire import messages as P

# A probe still importing after this long is killed and the request refused. The
# client that submitted waits for the answer (fleet run: 60 s), and the zygote then
# imports once more; `fleet up --preload` is bounded by its --timeout instead.
PROBE_TIMEOUT_S = 25.0


def thread_count() -> int | None:
    """OS threads of this process, from /proc/self/status (None if unreadable).

    threading.enumerate() would miss threads started by C libraries.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def thread_problem(module: str, threads: int | None) -> str:
    count = "an unknown number of" if threads is None else str(threads)
    return (f"module '{module}' starts a thread when imported ({count} threads after importing it); "
            f"a zygote forks, which needs exactly 1")


def import_at_start(modules: tuple[str, ...], fd_out: int, refuse: Callable[[str], NoReturn]) -> float:
    """The zygote's ``--preload``, before Hello: import each module, saying which to the
    agent first (an import that kills the interpreter is then named by the agent:
    fleet.node.hello), and :func:`refuse` one that fails or starts a thread, worded as
    a preload while serving words it. Returns the import time."""
    t0 = time.perf_counter()
    before = set(sys.modules)
    for name in modules:
        try:
            framing.write_message(fd_out, P.Importing(name))
        except OSError:
            pass  # the agent is gone: found out, and acted on, once serving
        try:
            importlib.import_module(name)
        except BaseException as exc:
            refuse(f"module '{name}' failed to import: {type(exc).__name__}: {exc}"[:1000])
        threads = thread_count()
        if threads != 1:  # after each: the refusal names the module that started one
            refuse(thread_problem(name, threads))
    stale.stamp_new(before)  # (a step running an edited one says so: fleet.node.stale)
    return time.perf_counter() - t0


def _probe(modules: list[str], w: int) -> None:
    """In the probe child: import each module, counting threads after each, noting what
    it changes of the signal handling (fleet.node.ownsignals); the answer as JSON lines
    on ``w`` (each write is one whole line). What the imports left running (a child, a
    daemon in a session of its own) is ended before the last line: the zygote stops
    reading at that line, not at the pipe's end, which such a process holds open."""
    def say(**what) -> None:
        os.write(w, (json.dumps(what) + "\n").encode())
    orphans.become_subreaper()  # what an import orphans stays below us, to be ended
    notes = []
    for name in modules:
        say(importing=name)
        before = ownsignals.snapshot()
        try:
            importlib.import_module(name)
        except BaseException as exc:  # SystemExit too: an answer, not a silent death
            orphans.end(0.0)
            say(error=f"module '{name}' failed to import: {type(exc).__name__}: {exc}"[:1000])
            return
        if changed := ownsignals.changes(before, ownsignals.snapshot()):
            notes.append(ownsignals.told(name, changed))
        threads = thread_count()
        if threads != 1:
            orphans.end(0.0)
            say(error=thread_problem(name, threads))
            return
    orphans.end(0.0)
    say(ok=True, notes=notes)


@dataclass
class _Probe:
    modules: tuple  # as asked (the answer names them)
    pid: int
    fd: int  # the read end of its pipe, non-blocking
    deadline: float  # time.monotonic()
    timeout: float
    data: bytes = b""
    reaped: bool = False  # by the zygote's loop: its pid is no longer ours to wait for
    returncode: int = 0  # once reaped (Popen's sense: -N for signal N)

    def read(self, now: float) -> tuple[bool, str] | None:
        """(ok, reason) once it has said its last line, ended, or is out of time (then
        it is killed, with what its import left); None while it runs. For ok, the reason
        is what the user is told of the modules (their signal handling), or ""."""
        eof = False
        while not eof:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            eof = not chunk
            self.data += chunk
        lines = []
        for line in self.data.decode(errors="replace").splitlines():
            try:
                lines.append(json.loads(line))
            except ValueError:
                pass  # a line cut by the kill
        final = next((d for d in reversed(lines) if "ok" in d or "error" in d), None)
        # Done at its last line, not at end of file: a process its import left holds the
        # pipe open (before 2026-12-07 each suite waited the whole PROBE_TIMEOUT_S for it).
        if final is None and not eof and now < self.deadline:
            return None
        current = next((d["importing"] for d in reversed(lines) if "importing" in d), "?")
        if final is None and eof and not self.reaped and now < self.deadline:
            return None  # it died unasked: how, its SIGCHLD tells (the loop reaps it, then reads again)
        if not self.reaped:
            _kill(self.pid)  # and what its import started (a reaped probe's group is theirs)
        os.close(self.fd)
        if final is not None:
            return bool(final.get("ok")), str(final.get("error", "")) or "; ".join(final.get("notes") or ())
        if not eof:
            return False, (f"importing module '{current}' took longer than {self.timeout:g} s (fleet up --preload "
                           f"{current} can take longer: as long as its --timeout, 120 s by default)")
        how = ended(self.returncode) if self.reaped else "died"
        return False, f"module '{current}' failed to import: the process importing it {how}"


def _kill(pid: int) -> None:
    """SIGKILL the probe ``pid``, what is below it (a subreaper: what its import left,
    in whatever session) and its own group; it is reaped by the zygote's loop."""
    below = orphans.below(pid)
    try:
        os.killpg(pid, signal.SIGKILL)  # its own group: whatever the import started too
    except OSError:
        pass
    for p in below:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


class Preloads:
    """The zygote's preloaded modules and the Preload requests it is working through."""

    def __init__(self, loaded=(), timeout: float = PROBE_TIMEOUT_S):
        self.loaded: list[str] = list(loaded)
        self.queue: list[tuple[str, ...]] = []
        self.probe: _Probe | None = None
        self.timeout = timeout
        # Set if this zygote itself ended up with more than one thread: it forks no
        # call step after that (a thread holding a lock at fork leaves it held).
        self.poisoned = ""
        self.replace_why = ""  # what the Ok("replace") says, once drained

    def ask(self, modules: tuple) -> None:
        """A Preload arrived: answered in order, from the loop (:meth:`turn`)."""
        self.queue.append(tuple(modules))

    def reaped(self, pid: int, returncode: int = 0) -> None:
        """The zygote reaped ``pid``: if it was the probe, it is not waited for again
        (``returncode`` says how it ended: -N for signal N)."""
        if self.probe is not None and self.probe.pid == pid:
            self.probe.reaped = True
            self.probe.returncode = returncode

    def poll_ms(self, timeout_ms: int | None) -> int | None:
        """The loop's poll timeout, bounded by what preloading waits for."""
        if self.probe is None:
            return 0 if self.queue else timeout_ms
        left = max(1, int((self.probe.deadline - time.monotonic()) * 1000))
        return left if timeout_ms is None else min(left, timeout_ms)

    def turn(self, zygote) -> None:
        """One turn of the zygote's loop: finish a probe that ended, start the next; a
        poisoned zygote that has drained asks to be replaced."""
        if self.probe is not None:
            answer = self.probe.read(time.monotonic())
            if answer is None:
                return
            probe, self.probe = self.probe, None
            ok, reason = answer
            if ok:
                self._import_here(zygote, probe.modules, reason)
            else:
                zygote.send(P.Preloaded(probe.modules, False, reason, 0.0))
        while self.probe is None and self.queue and zygote.stop_grace is None:
            modules = self.queue.pop(0)
            new = [m for m in modules if m not in self.loaded]
            if not all(isinstance(m, str) and m for m in modules):
                zygote.send(P.Preloaded(modules, False, f"not module names: {list(modules)!r}"[:1000], 0.0))
            elif self.poisoned or not new:
                zygote.send(P.Preloaded(modules, not self.poisoned, self.poisoned, 0.0))
            elif isinstance(started := self._start(modules, new, zygote.own_fds + zygote.spare.fds), str):
                zygote.send(P.Preloaded(modules, False, started, 0.0))
        self.replace_if_drained(zygote)  # (after answering every Preload it read: none is replayed)

    def _start(self, modules: tuple, new: list[str], close_fds: tuple[int, ...]) -> str | None:
        r, w = os.pipe()
        sys.stdout.flush()  # or the child would write our buffered bytes again
        sys.stderr.flush()
        parent = os.getpid()
        try:
            pid = os.fork()
        except OSError as exc:
            os.close(r)
            os.close(w)
            return f"could not fork a process to try importing {new}: {exc}"
        if pid == 0:
            try:
                os.close(r)
                child._detach(close_fds, parent)  # default signals, own group, dies with us
                _probe(new, w)
            finally:
                os._exit(0)
        os.close(w)
        os.set_blocking(r, False)
        try:
            os.setpgid(pid, pid)  # as the child does: the group exists for a kill
        except OSError:
            pass
        self.probe = _Probe(modules, pid, r, time.monotonic() + self.timeout, self.timeout)
        return None

    def _import_here(self, zygote, modules: tuple, notes: str = "") -> None:
        """The probe imported them cleanly (``notes``: what it saw them change of the
        signal handling): import them here, between forks, keeping our own signal
        handling (fleet.node.ownsignals). A zygote that has a thread after is replaced
        (:meth:`_poisoned`)."""
        zygote.spare.drop()  # forked without them; the loop forks the next one
        ok, reason = True, ""
        t0 = time.perf_counter()
        before = set(sys.modules)
        handling = ownsignals.snapshot()
        for name in modules:
            if name in self.loaded:
                continue
            try:
                importlib.import_module(name)
            except BaseException as exc:
                ok, reason = False, f"module '{name}' failed to import: {type(exc).__name__}: {exc}"[:1000]
                break
            self.loaded.append(name)
        import_s = time.perf_counter() - t0
        if changed := ownsignals.restore(handling):  # (said whatever the probe saw: it started from defaults)
            zygote._warn(f"preloading {', '.join(modules)} changed {', '.join(changed)}: put back")
            notes = notes or ownsignals.told(",".join(modules), changed)
        stale.stamp_new(before)
        threads = thread_count()
        if threads != 1:
            return self._poisoned(zygote, modules, thread_problem(",".join(modules), threads), import_s)
        step_threads.note_preloaded_pools()  # the children resize those pools (never us)
        gc.collect()
        gc.freeze()  # as after the first preload: children do not copy these pages
        # Our own silence while importing, not the agent's: its ticks wait in the pipe.
        zygote.last_heard = time.monotonic()
        zygote.send(P.Preloaded(modules, ok, reason or (notes if ok else ""), import_s))

    def _poisoned(self, zygote, modules: tuple, reason: str, import_s: float) -> None:
        """This zygote has a thread now (the probe had none: a module that does more in
        the zygote than in a probe): it can fork no call step safely, for good. Refuse
        the request and drain: it starts nothing more (:meth:`holds_back`), its running
        steps run to their end, and then it asks its agent for a new zygote with its
        earlier modules (:meth:`replace_if_drained`; fleet.node.rezygote), which is
        written every launch left unanswered here. Before 2026-12-07 it served on, every
        later call step failing at once, for the fleet's life (a first fix that stopped it
        as on a SIGTERM ended every other submission's running steps: never released)."""
        self.poisoned = (f"this zygote is being replaced once its running steps end, so it takes no preload "
                         f"(it got a thread: {reason})")
        self.replace_why = f"got a thread from preloading {', '.join(modules)}"
        zygote.prefork = False
        zygote.spare.drop()
        zygote._warn(f"{reason}: the agent starts a new zygote once its running steps end "
                     f"(with the modules it had before); until then nothing starts here")
        zygote.send(P.Preloaded(modules, False, f"{reason} (in the zygote, not when tried apart: its node "
                                                f"restarts its zygote without it)", import_s))
        # (drained already? said at the end of this turn: fleet.node.preload.Preloads.turn)

    def holds_back(self) -> bool:
        """True if a launch is to be left unanswered: a poisoned zygote starts nothing
        (a call cannot be forked safely with a thread; a command would keep it from ever
        draining). Its agent writes each unanswered launch to the new zygote
        (fleet.node.rezygote.end_steps, clean), where it runs, no attempt used; one
        queued here behind a running step comes back through the launch when that step
        is reaped, and is left so then."""
        return bool(self.poisoned)

    def replace_if_drained(self, zygote) -> None:
        """A poisoned zygote with no step running or ending and nothing queued: it asks
        its agent to replace it (``Ok("replace")``, after every report it sent) and stops,
        with nothing to stop (grace 0)."""
        if (self.poisoned and zygote.stop_grace is None and not zygote.steps and not len(zygote.queued)
                and not zygote.srun_ends):
            zygote.send(P.Ok("replace", zygote=self.replace_why))
            zygote.stop_grace = 0.0

    def drop(self) -> None:
        """Stop a probe that is still importing (the zygote is shutting down)."""
        probe, self.probe = self.probe, None
        if probe is not None:
            os.close(probe.fd)
            _kill(probe.pid)
            if not probe.reaped:
                try:
                    os.waitpid(probe.pid, 0)
                except ChildProcessError:
                    pass
