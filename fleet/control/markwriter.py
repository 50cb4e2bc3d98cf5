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
owes nothing (close waits for the files; a rotated segment is sealed once they are
written, fleet.control.fold.rotate). A kill -9 loses nothing: the
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
        self.nodes = None  # fleet.control.nodemarkers.NodeMarkers, once the coordinator gives one
        self._after: dict[str, list] = {}  # step -> its files waiting for its marker on a node
        self._after_n = 0
        self._floor: tuple | None = None  # the threads' queues' ends when they last took over nodes' files
        self._threads = [threading.Thread(target=self._run, args=(i,), name=f"fleet-markers-{i}", daemon=True)
                         for i in range(self.n)]
        for t in self._threads:
            t.start()
        self.key = str(run_dir)
        _pending[self.key] = self

    # -- the loop's side ---------------------------------------------------------------------------
    def owed(self, item: tuple) -> None:
        """A (path, rec, drop, step, node) file owed, not yet durable: seen by read_done already
        (add() queues it for the threads after the journal's fsync)."""
        if item[2] or item[0].endswith(_DONE):
            with self._lock:
                self.queued[item[3]] = item

    def add(self, owed: list) -> None:
        """Queue (path, rec, drop, step, node) files, their journal lines durable already:
        a success's marker to the node that ran the step (fleet.control.nodemarkers), the
        rest to the threads."""
        if self.nodes is not None:
            owed = self._to_nodes(owed)
        if owed:
            self._enqueue(owed)

    def _to_nodes(self, owed: list) -> list:
        """Hand the markers nodes write to them; what the threads write is returned. A
        file of a step whose marker a node still has waits for it (_after): a final that
        drops the marker must not precede it."""
        nodes, after, rest, mine = self.nodes, self._after, [], []
        steps, takes = nodes.steps, nodes.takes
        for item in owed:
            step = item[3]
            if step in steps or step in after:
                after.setdefault(step, []).append(item)
                self._after_n += 1
                mine.append(item)
            elif item[4] is not None and not item[2] and takes(item[4]) and nodes.room(item[4]):
                nodes.add(item[4], item)
                mine.append(item)
            else:
                rest.append(item)
        if mine:  # (the journal said them owed already: owed(); said again for any other caller)
            with self._lock:
                for item in mine:
                    if item[2] or item[0].endswith(_DONE):
                        self.queued[item[3]] = item
        return rest

    def _enqueue(self, owed: list) -> None:
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
            depth = self.depth(threads=True)
            self.most = max(self.most, depth)
            if depth > self.bound:
                self._wait_under(self.bound)

    # -- markers on the nodes (fleet.control.nodemarkers) -----------------------------------------
    def written_on(self, node: str, msg) -> None:
        """A node's P.MarkersWritten: those it wrote leave the queue; the threads write the
        ones it could not; a step's files that waited for its marker go on."""
        done, failed = self.nodes.said(node, msg)
        if done:
            queued = self.queued
            with self._lock:
                for item in done:
                    if queued.get(item[3]) is item:
                        del queued[item[3]]
        self._moved_back(failed, [item[3] for item in done])

    def node_gone(self, node: str) -> None:
        """A node that will say nothing more (lost, unreachable, said goodbye): the
        threads write what it was given and did not say written."""
        if self.nodes is not None:
            self._moved_back(self.nodes.take_back(node.encode()), [])

    def _moved_back(self, items: list, released: list) -> None:
        """Items the threads write instead of a node; then the files that waited for
        those steps' markers (and for `released`, written by their node)."""
        waited = []
        for step in [*released, *(item[3] for item in items)]:
            more = self._after.pop(step, None)
            if more:
                waited += more
                self._after_n -= len(more)
        if items or waited:
            self._enqueue(items)
            self._enqueue(waited)
            self._floor = tuple(self.added)  # a ticket taken before waits for these too

    def depth(self, threads: bool = False) -> int:
        """Files queued and not yet written (by the threads or by nodes; threads: theirs only)."""
        out = sum(self.added) - sum(self.written)
        if threads:
            return out
        out += self._after_n
        return out + self.nodes.pending if self.nodes is not None else out

    def _wait_under(self, most: int, timeout: float | None = None) -> bool:
        """(Lock held) wait until at most `most` files are queued for the threads; False on
        timeout. (Not for nodes': they say so on the loop, which this holds.)"""
        t0 = time.monotonic()
        end = None if timeout is None else t0 + timeout
        while self.depth(threads=True) > most:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                break
            self._moved.wait(left)
        if most:  # back-pressure, not a drain
            self.waited_s += time.monotonic() - t0
            self.waits += 1
        return self.depth(threads=True) <= most

    def ticket(self) -> tuple:
        """Where each thread's queue ends now, and how many items nodes were given:
        reached() once all before it is written."""
        return tuple(self.added), (self.nodes.seq if self.nodes is not None else 0)

    def reached(self, ticket: tuple, hurry: bool = True) -> bool:
        """Whether every file queued before the ticket is written. hurry: what waits for
        a message to ride goes now (a finished submission's last markers ride nothing)."""
        added, seq = ticket
        if self.nodes is not None:
            if hurry:
                self.nodes.send_all()
            oldest = self.nodes.oldest_seq()
            if oldest is not None and oldest <= seq:
                return False
        floor = self._floor or added
        return all(w >= max(t, f) for w, t, f in zip(self.written, added, floor))

    def drain(self, timeout: float) -> bool:
        """Wait (at most timeout s) until every file queued is written: what nodes were
        given and did not say written yet is written by the threads (a seal never waits
        on a node)."""
        if self.nodes is not None:
            self._moved_back(self.nodes.take_back(), [])
        if self._after:
            self._moved_back([], list(self._after))
        with self._lock:
            return self._wait_under(0, timeout)

    def discard(self) -> None:
        """Drop every file queued and not yet written, the nodes' too: this fleet was found
        gone, and its steps' records are the fleets' that took them (fleet.control.foundgone)."""
        if self.nodes is not None:
            self.nodes.take_back()
        with self._lock:
            for i, q in enumerate(self._queues):
                self.written[i] += len(q)  # (counted as done: a ticket's wait ends)
                q.clear()
            self.queued.clear()
            self._after.clear()
            self._after_n = 0
            self._moved.notify_all()

    def steps(self) -> list[str]:
        """The steps whose marker is still queued (written or removed)."""
        with self._lock:
            return list(self.queued)

    def figures(self) -> dict:
        """For status answers: files queued now and at most, the loop's waits for room,
        markers written by nodes and taken back from them."""
        out = dict(markers_queued=self.depth(), markers_queued_most=self.most, markers_waits=self.waits,
                   markers_waited_s=round(self.waited_s, 3), markers_failed=self.failed)
        if self.nodes is not None:
            out.update(markers_on_nodes=self.nodes.on_nodes, markers_taken_back=self.nodes.taken_back)
        return out

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
            for path, rec, drop, *_ in piece:
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
            if drop:  # a final's: the marker goes (unlink_done); a marker's: the final.json before it
                if path.endswith(_DONE):
                    records.unlink(path[:-len(_DONE)] + "/" + records.FINAL)
                else:
                    self._unlink(os.path.dirname(path), drop)  # (only the success it replaces: store.final_record)
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
