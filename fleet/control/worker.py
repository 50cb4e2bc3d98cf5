"""The coordinator's one worker thread: slow reading done off the loop.

Reading, checking and splitting a submitted suite and reading its steps' done markers
take seconds for a big suite (and longer on a parallel file system). The coordinator's
loop must keep answering agents and clients meanwhile, so it hands that work here: a
single long-lived daemon thread (the coordinator never forks, so a thread is safe)
that runs one job at a time, in order, and hands each result back through a queue,
waking the loop through a pipe it polls. A job only reads files and builds new
objects; nothing of the coordinator's (scheduler, step definitions, event log) is
touched here: whatever it needs is copied before it is handed over.
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable

log = logging.getLogger("fleet.control.coordinator")

# While a job runs (a big suite checked and hashed: tens of seconds at a million steps),
# this thread and the loop share the interpreter lock. The loop lets go of it at every
# ZeroMQ call (a heartbeat to each agent, a launch message to each, every message
# drained) and then waits up to the switch interval (5 ms by default) before the job's
# thread must hand it back: at a thousand agents, seconds a turn, and status answers
# waited that long (benchmarks/README.md, "A million steps of 1 s"). A shorter interval
# bounds that wait; it costs nothing while only one thread runs.
SWITCH_S = 0.0002


@dataclass(frozen=True)
class Done:
    """One job's end: what it returned, or the exception it raised (then value is None)."""

    tag: Any
    value: Any
    error: BaseException | None = None


class Worker:
    """Runs jobs on one thread, in the order given; `fd` becomes readable when one ends."""

    def __init__(self, name: str = "fleet-worker"):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)  # a full pipe already wakes the loop: never wait on it
        self.pending = 0  # handed over and not yet collected
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_S))
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def fd(self) -> int:
        """Poll this for reading: a job has ended (collect() takes the results)."""
        return self._r

    def put(self, tag: Any, fn: Callable, *args) -> None:
        """Run fn(*args) after the jobs before it; its Done carries `tag`."""
        self.pending += 1
        self._jobs.put((tag, fn, args))

    def collect(self) -> list[Done]:
        """The jobs that ended since the last call, in order."""
        try:
            while os.read(self._r, 4096):
                pass
        except BlockingIOError:
            pass
        out = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                break
        self.pending -= len(out)
        return out

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            tag, fn, args = job
            try:
                done = Done(tag, fn(*args))
            except BaseException as e:  # reported by the loop to whoever asked; the thread goes on
                done = Done(tag, None, e)
            self._done.put(done)
            try:
                os.write(self._w, b"!")
            except OSError:  # closed at teardown, or full: the loop reads the queue anyway
                pass

    def close(self, timeout: float = 5.0) -> None:
        """Stop after the current job (bounded wait; the thread is a daemon)."""
        self._jobs.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():  # still in a job: its wake-up would land in whatever
            return                   # file took the pipe's numbers; two fds left open instead
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass
