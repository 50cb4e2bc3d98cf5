"""The per-step files a journal owes (done markers, final.json), written off the loop.

Written on the coordinator's loop (fleet.control.journal's sync, once per flush), each
file cost one open, one write and one close on the loop's thread: ~25 us a step on a
local tmpfs, and 0.5-5 ms on Lustre/GPFS, where a create is a round trip to the
metadata server. That capped a whole allocation at a few hundred to ~2,000 steps per
second and held the loop (status answers, heartbeats) for a turn's whole batch.

Now the journal hands each flush's owed files here, after the lines that owe them were
fsync'd (the order the journal always kept: no file precedes its durable line), and
THREADS threads write them, each its own queue. A step's files always go to one
thread (by the step's id), in the order owed, so a final that replaces a success and
drops its marker is never overtaken by that marker. The threads let go of the
interpreter's lock in the calls (open, write, close, and the metadata server's wait),
so several creates are in flight at once: what a parallel filesystem rewards.

What this fleet itself reads while files are queued sees them as written
(`read_done`: the queued marker first, then the disk): a submission's check, a step's
children, --only. Other readers go through the journal or wait for the file: another
fleet polls a marker after the claims log says the step ended; at sharing, steps whose
files are queued are claimed and said ended (fleet.control.recording); a client hears
that its submission finished once its files are written (`reached`); a sealed journal
owes nothing (close and rotation wait for the threads). A kill -9 loses nothing: the
journal owes the files still queued, and the next fleet's replay writes them.

Back-pressure: at most BOUND files are queued. When a flush would queue more, the loop
waits until the threads are back under BOUND: each wait is for that flush's excess,
about what writing them on the loop used to cost (never more), and the waits are
counted in status answers (`loop.markers_*`). Memory stays bounded (~1 KiB a file).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque

from fleet.wire import records

log = logging.getLogger("fleet.control.markwriter")
THREADS_ENV = "FLEET_MARKER_THREADS"  # threads writing files (0: on the loop, as before)
BOUND_ENV = "FLEET_MARKER_QUEUE"      # files queued at most before the loop waits
THREADS = 4
BOUND = 100_000
_DONE = "/" + records.DONE
_pending: dict[str, "Writer"] = {}  # run directory -> its fleet's writer (read_done)


def threads() -> int:
    return int(os.environ.get(THREADS_ENV) or THREADS)


class Writer:
    """Threads writing owed files, in order per step (see the module's docstring)."""

    def __init__(self, run_dir, put, unlink_done, n: int | None = None, bound: int | None = None):
        self.n = threads() if n is None else n
        self.bound = int(os.environ.get(BOUND_ENV) or BOUND) if bound is None else bound
        self._put, self._unlink = put, unlink_done
        self._lock = threading.Lock()
        self._work = [threading.Condition(self._lock) for _ in range(self.n)]
        self._moved = threading.Condition(self._lock)  # a thread finished a piece
        self._queues = [deque() for _ in range(self.n)]
        self.added = [0] * self.n    # files handed to each thread
        self.written = [0] * self.n  # files each thread finished (in its order)
        self.queued: dict[str, tuple] = {}  # step -> its last owed file touching its marker
        self.waited_s, self.waits = 0.0, 0
        self.failed = 0  # files not written (an error logged): the journal still owes them
        self.most = 0  # files queued at most
        self._closing = False
        self._threads = [threading.Thread(target=self._run, args=(i,), name=f"fleet-markers-{i}", daemon=True)
                         for i in range(self.n)]
        for t in self._threads:
            t.start()
        self.key = str(run_dir)
        _pending[self.key] = self

    # -- the loop's side ---------------------------------------------------------------------------
    def owed(self, item: tuple) -> None:
        """A (path, rec, drop, step) file owed, not yet durable: seen by read_done already
        (add() queues it for the threads after the journal's fsync)."""
        if item[2] or item[0].endswith(_DONE):
            with self._lock:
                self.queued[item[3]] = item

    def add(self, owed: list) -> None:
        """Queue (path, rec, drop, step) files, their journal lines durable already."""
        n, queued, qs = self.n, self.queued, self._queues
        with self._lock:
            before = [len(q) for q in qs]
            for item in owed:
                step = item[3]
                qs[hash(step) % n if n > 1 else 0].append(item)
                if item[2] or item[0].endswith(_DONE):  # the step's marker changes
                    queued[step] = item
            for i, q in enumerate(qs):
                if len(q) > before[i]:
                    self.added[i] += len(q) - before[i]
                    self._work[i].notify()
            depth = self.depth()
            self.most = max(self.most, depth)
            if depth > self.bound:
                self._wait_under(self.bound)

    def depth(self) -> int:
        """Files queued and not yet written."""
        return sum(self.added) - sum(self.written)

    def _wait_under(self, most: int, timeout: float | None = None) -> bool:
        """(Lock held) wait until at most `most` files are queued; False on timeout."""
        t0 = time.monotonic()
        end = None if timeout is None else t0 + timeout
        while self.depth() > most:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                break
            self._moved.wait(left)
        if most:  # back-pressure, not a drain
            self.waited_s += time.monotonic() - t0
            self.waits += 1
        return self.depth() <= most

    def ticket(self) -> tuple:
        """Where each thread's queue ends now: reached() once all before it is written."""
        return tuple(self.added)

    def reached(self, ticket: tuple) -> bool:
        return all(w >= t for w, t in zip(self.written, ticket))

    def drain(self, timeout: float) -> bool:
        """Wait (at most timeout s) until every file queued is written."""
        with self._lock:
            return self._wait_under(0, timeout)

    def steps(self) -> list[str]:
        """The steps whose marker is still queued (written or removed)."""
        with self._lock:
            return list(self.queued)

    def figures(self) -> dict:
        """For status answers: files queued now and at most, the loop's waits for room."""
        return dict(markers_queued=self.depth(), markers_queued_most=self.most, markers_waits=self.waits,
                    markers_waited_s=round(self.waited_s, 3), markers_failed=self.failed)

    def close(self, timeout: float) -> bool:
        """Drain (bounded), then end the threads; False if files are still queued."""
        drained = self.drain(timeout)
        with self._lock:
            self._closing = True
            for c in self._work:
                c.notify()
        if _pending.get(self.key) is self:
            del _pending[self.key]
        return drained

    # -- the threads -------------------------------------------------------------------------------
    def _run(self, i: int) -> None:
        q, work = self._queues[i], self._work[i]
        while True:
            with self._lock:
                while not q and not self._closing:
                    work.wait()
                if not q:
                    return
                piece = [q.popleft() for _ in range(min(len(q), 64))]  # (left in q: counted as queued)
            for path, rec, drop, _ in piece:
                self._one(path, rec, drop)
            with self._lock:
                self.written[i] += len(piece)
                queued = self.queued
                for item in piece:
                    if queued.get(item[3]) is item:
                        del queued[item[3]]
                self._moved.notify_all()

    def _one(self, path: str, rec, drop: bool) -> None:
        try:
            self._put(path, rec)
            if drop:
                self._unlink(os.path.dirname(path))
        except Exception as e:  # (never ends the thread) still owed by the journal: replay writes it
            self.failed += 1
            log.error("cannot write %s: %r", path, e)


def queued_in(run_dir) -> dict:
    """step -> its marker's queued file, of the fleet writing in run_dir here (or none)."""
    w = _pending.get(str(run_dir))
    return w.queued if w is not None else {}


def read_done(run_dir, step: str) -> dict | None:
    """The step's done marker as this fleet's own reads must see it: one queued to be
    written (or removed) first, else the disk's (records.read_done). Safe from any
    thread: the queued one is looked up before the disk is read, and a thread drops it
    from the queue only after its file is written."""
    w = _pending.get(str(run_dir))
    item = w.queued.get(step) if w is not None else None
    if item is None:
        return records.read_done(run_dir, step)
    if not item[0].endswith(_DONE):
        return None  # a final that drops the marker
    rec = item[1]
    return json.loads(rec) if isinstance(rec, str) else rec
