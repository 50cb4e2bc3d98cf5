"""`fleet step`'s hold on its one step: the step's `timeout`, its `memory` and this
command's own end (SIGTERM, SIGHUP), kept as a node keeps them (fleet.node.stopping,
fleet.node.memlimit, fleet.node.memwatch).

The step stays in this command's process group (the terminal's: Ctrl-C and a debugger
reach it), so it cannot be signalled by its group without signalling this command and
whatever else shares the group (the other end of a pipe). Instead this command is a
child subreaper (fleet.node.orphans): whatever the step starts stays below it, and the
step's processes are this command's descendants. Stopping them is a node's stopping:
SIGTERM (and SIGCONT), SIGKILL once the step's `grace` is over; what is left below
this command when the step has ended is killed, as a node kills what a step left.

Memory is held by the mechanism a node here would choose (fleet.node.memlimit.choose,
FLEET_MEMLIMIT too): the step's own cgroup, or the watchdog, sampling the step's
processes here.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass

import psutil

from fleet.core import states as S
from fleet.node import memlimit, memmeasure, memwatch, orphans
from fleet.node.stopping import ended_reason, signal_name

TIMED_OUT_EXIT = 124  # `fleet step`'s status for a step past its timeout (as timeout(1)'s)
OUT_OF_MEMORY_EXIT = 137  # and past its memory (128 + SIGKILL, as the kernel's OOM kill)
POLL_S = 0.05


@dataclass
class Stop:
    """How the hold ended the step, if it did: its outcome (timed_out, out_of_memory,
    terminated: this command was told to stop), why, the signal this command got, and
    whether the step had to be killed."""

    outcome: str = ""
    why: str = ""
    signal: int = 0
    killed: bool = False

    def reason(self, launch) -> str:
        if self.outcome == S.TIMED_OUT:
            return ended_reason(S.TIMED_OUT, launch.timeout, launch.grace, self.killed)
        if self.outcome == S.TERMINATED:
            return (f"fleet step got {signal_name(self.signal)}"
                    + (f"; SIGKILL after {launch.grace:g} s grace" if self.killed else "; ended after SIGTERM"))
        return self.why

    def status(self) -> int:
        """This command's exit status for it."""
        return {S.TIMED_OUT: TIMED_OUT_EXIT, S.OUT_OF_MEMORY: OUT_OF_MEMORY_EXIT}.get(self.outcome, 128 + self.signal)


class Memory:
    """The step's memory limit on this machine, as a node holds it (none: nothing)."""

    def __init__(self, launch):
        self.launch, self.limit = launch, memlimit.limited(launch)
        self.choice, self.peak = memlimit.Choice(memlimit.NONE), 0

    def __enter__(self) -> Memory:
        if self.limit:
            self.choice = memlimit.choose(os.environ.get("FLEET_MEMLIMIT", "auto"))
            memlimit.use(self.choice.arg())  # the step's child joins its cgroup (fleet.node.memlimit.enter)
        return self

    def __exit__(self, *exc) -> None:
        if self.choice.kind in (memlimit.CGROUP1, memlimit.CGROUP2):
            path = memlimit.cgroup_dir(self.choice, self.launch.step, self.launch.attempt)
            for _ in range(100):  # (its last processes may still be dying)
                if memlimit.remove(path):
                    break
                memlimit.kill_members(path)
                time.sleep(0.02)
            memlimit.release(self.choice)
        memlimit.use(memlimit.NONE)

    @property
    def watching(self) -> bool:
        return self.choice.kind == memlimit.WATCHDOG

    def sample(self, pid: int) -> bool:
        """The watchdog's look at the step's processes: True if they are past the limit."""
        used = memmeasure.used(below(pid), self.limit, os.getpid())  # (forked from this command)
        self.peak = max(self.peak, used)
        return used > self.limit

    def judged(self, stop: Stop, error: str, status: int | None = None) -> Stop:
        """The stop, or out_of_memory if the step's cgroup says the kernel ended it for its
        own limit (a step that exited 0, ``status``, keeps its success: as on a node,
        fleet.node.memwatch.judge_cgroup, what the OOM killer took is said on stderr)."""
        if stop.outcome == S.OUT_OF_MEMORY:
            return Stop(S.OUT_OF_MEMORY, memwatch.oom_reason(self.peak, self.limit, memwatch.WATCHDOG_HOW))
        if stop.outcome or self.choice.kind not in (memlimit.CGROUP1, memlimit.CGROUP2):
            return stop
        used = memlimit.usage(self.choice, memlimit.cgroup_dir(self.choice, self.launch.step, self.launch.attempt))
        if used is None:
            return stop
        described = memlimit.DESCRIBED[self.choice.kind]
        if status == 0 or not (used.own_oom or (used.hit_limit and "MemoryError" in (error or ""))):
            if used.oom_kills:
                print(f"fleet: {memwatch.oom_note(used, self.limit, described)}", file=sys.stderr, flush=True)
            return stop
        how = f"{'killed by the kernel' if used.own_oom else 'a MemoryError'} at its {described}"
        return Stop(S.OUT_OF_MEMORY, memwatch.oom_reason(used.peak, self.limit, how))


def below(pid: int) -> list[int]:
    """The step's processes: ``pid`` and everything else below this command."""
    try:
        return [pid] + [p.pid for p in psutil.Process().children(recursive=True) if p.pid != pid]
    except psutil.Error:
        return [pid]


def _signal(pids, sig: int) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except OSError:  # (gone meanwhile)
            pass


def hold(pid: int, launch, memory: Memory) -> tuple[int, Stop]:
    """Wait for the step (``pid``, a child of this command) while holding it to its
    timeout and memory and passing this command's SIGTERM or SIGHUP on to it; its wait
    status and how it was stopped (an empty Stop: it ended by itself)."""
    got: list[int] = []
    old = {s: signal.signal(s, lambda sig, _frame: got.append(sig)) for s in (signal.SIGTERM, signal.SIGHUP)}
    now = time.monotonic()
    deadline = now + launch.timeout if launch.timeout else float("inf")
    stop, kill_at, sample_at = Stop(), float("inf"), now
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status, stop
            now = time.monotonic()
            if not stop.outcome and (got or now >= deadline):
                stop = Stop(S.TERMINATED, signal=got[0]) if got else Stop(S.TIMED_OUT)
                _signal(below(pid), signal.SIGTERM)
                _signal(below(pid), signal.SIGCONT)
                kill_at = now + max(0.0, launch.grace)
            if memory.watching and not stop.killed and now >= sample_at:
                sample_at = now + memwatch.WATCH_S
                if memory.sample(pid) and not stop.outcome:
                    stop, kill_at = Stop(S.OUT_OF_MEMORY), now
            if now >= kill_at and not stop.killed:
                stop.killed = True
                _signal(below(pid), signal.SIGKILL)
            time.sleep(POLL_S)
    finally:
        end_below()
        for s, h in old.items():
            signal.signal(s, h)


def end_below(wait_s: float = orphans.KILL_WAIT_S) -> None:
    """Kill and reap whatever the step left running below this command."""
    deadline = time.monotonic() + wait_s
    while True:
        left = below(0)[1:]
        _signal(left, signal.SIGKILL)
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        if not left or time.monotonic() > deadline:
            return
        time.sleep(0.02)
