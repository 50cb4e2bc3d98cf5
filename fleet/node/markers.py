"""The agent's writer of the done markers the coordinator hands its node (P.Markers).

The coordinator sends a marker only once the journal line that owes it is durable
(fleet.control.nodemarkers says why the node writes it). They are written in the order
given: first on a thread of their own, so that a slow metadata server (a create on
Lustre or GPFS is a round trip of milliseconds; a hung one, seconds) never holds the
loop's relays and heartbeats (the zygote stops its steps when the agent is silent).
Once FAST_N writes in a row took less than SLOW_S each, the loop writes them itself,
until one is slower: on a local filesystem the thread's wake-ups and hand-overs of the
interpreter's lock cost the agent about ten times the write (benchmarks/README.md,
"Done markers written on the nodes").

How far the writing got is what the agent says back (P.MarkersWritten) with its next
message. While the node has no step under way (no report is coming) the thread wakes
the loop through a pipe after each piece, so that it is said at once.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque

from fleet.wire import logtag, records

HOLD_S = 0.25  # progress said alone when no other message has carried it for this long
SLOW_S = 0.001  # a write slower than this is a remote filesystem's: the thread writes
FAST_N = 32     # writes in a row faster than SLOW_S before the loop writes them itself
# Test and benchmark hook (docs/operations.md), the same as the coordinator's
# (fleet.control.journal.SLEEP_ENV): milliseconds slept in each marker's write, to
# emulate a parallel filesystem's metadata latency.
_SLEEP = float(os.environ.get("FLEET_TEST_MARKER_SLEEP_MS") or 0) / 1000


def put(path: str, text: str) -> None:
    """A marker written in place (fleet.wire.records.put), after the test hook's sleep."""
    if _SLEEP:
        time.sleep(_SLEEP)
    records.put(path, text.encode())


class Writer:
    """Writes (path, text) files in order, on a thread of its own or, while the
    filesystem is fast, on the caller's; `progress()` for the loop."""

    def __init__(self):
        self.wake_r, self._wake_w = os.pipe()  # a byte when a piece is written: the loop polls it
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._lock = threading.Condition()
        self._queue: deque = deque()  # (number, path, text), for the thread
        self._upto = 0  # every file numbered up to this is written or failed
        self._failed: list[int] = []  # numbers not written, not yet said
        self.said = 0  # the upto last said to the coordinator
        self.before = 0  # the one said before it (unsay)
        self.errors = 0
        self._busy = False  # the thread took a piece off the queue, not yet written
        self._wake = True  # the thread writes to wake_r after each piece (the agent has no step under way)
        self._closing = False
        self.inline = False  # the caller writes (the last FAST_N writes were fast)
        self._fast = 0  # writes in a row faster than SLOW_S
        self._thread = threading.Thread(target=self._run, name="fleet-agent-markers", daemon=True)
        self._thread.start()

    def add(self, files: list, last: int) -> None:
        """Write them (numbered up to `last`): here while the filesystem is fast, else
        on the thread."""
        first = last - len(files) + 1
        items = [(first + i, f[0], f[1]) for i, f in enumerate(files)]
        with self._lock:  # (only this caller adds: once the thread has nothing, nothing of it can follow)
            inline = self.inline and not self._queue and not self._busy
        if inline:
            for k, item in enumerate(items):
                if not self._write([item], False):  # slow: the thread writes from now on
                    self.inline, self._fast = False, 0
                    items = items[k + 1:]
                    break
            else:
                return
        with self._lock:
            self._queue.extend(items)
            self._lock.notify()

    def progress(self) -> tuple[int, list[int]] | None:
        """(upto, failed) not yet said, or None: nothing new since the last said."""
        with self._lock:
            if self._upto == self.said and not self._failed:
                return None
            failed, self._failed = self._failed, []
            self.before, self.said = self.said, self._upto
            return self._upto, failed

    def unsay(self, progress: tuple[int, list[int]]) -> None:
        """The message that carried `progress` (the last progress()) was not sent: it is
        said again with the next."""
        with self._lock:
            self.said = self.before
            self._failed = progress[1] + self._failed

    def wake_when_written(self, on: bool) -> None:
        """Whether the thread wakes the loop after each piece (on: the node has no step
        under way, so no report would carry the progress soon)."""
        with self._lock:
            self._wake = on

    def unsaid(self) -> bool:
        """Progress not yet said."""
        with self._lock:
            return self._upto != self.said or bool(self._failed)

    def pending(self) -> bool:
        """Files given and not yet said written (being written, or written)."""
        with self._lock:
            return bool(self._queue) or self._busy or self._upto != self.said or bool(self._failed)

    def drain(self, timeout: float) -> bool:
        """Wait (at most timeout s) until every file given is written or failed."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._queue and not self._busy, timeout)

    def close(self) -> None:
        """Stop the thread and close the pipe. Under the lock, as the thread's wake-up
        write is: once closed, the pipe's numbers are the next file's (a test's pipe, a
        step's stdout), and a late b"m" would land in it. The thread is not joined: it
        may be in a hung filesystem's write."""
        with self._lock:
            self._closing = True
            self._lock.notify()
            for fd in (self.wake_r, self._wake_w):
                try:
                    os.close(fd)
                except OSError:
                    pass

    def _write(self, piece: list, thread: bool) -> bool:
        """Write a piece and record its progress; whether every write was fast. The
        thread's piece also counts toward `inline`, under the same lock that ends
        `_busy`, so that whoever sees the piece written (drain) sees its verdict."""
        failed, fast = [], True
        for number, path, text in piece:
            t0 = time.perf_counter()
            try:
                put(path, text)
                fast = fast and time.perf_counter() - t0 < SLOW_S
            except OSError as e:
                fast = False
                failed.append(number)
                self.errors += 1
                if self.errors <= 3:  # said, not flooded: the coordinator writes them
                    print(f"{logtag.tag()}fleet agent: cannot write {path}: {e}", file=sys.stderr, flush=True)
        with self._lock:
            self._upto = piece[-1][0]
            self._failed += failed
            if thread:
                self._fast = self._fast + len(piece) if fast else 0
                if self._fast >= FAST_N and not self._queue:  # (nothing of the thread's left to precede it)
                    self.inline = True
            self._busy = False
            self._lock.notify_all()
        return fast

    def _run(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._queue or self._closing)
                if self._closing:
                    return
                piece = [self._queue.popleft() for _ in range(min(len(self._queue), 256))]
                self._busy = True
            self._write(piece, True)
            with self._lock:
                if self._wake and not self._closing:  # (closed under this lock: see close)
                    try:
                        os.write(self._wake_w, b"m")  # non-blocking: never holds the lock long
                    except OSError:  # full: the loop is behind, and reads progress anyway
                        pass
