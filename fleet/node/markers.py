"""The agent's writer of the done markers the coordinator hands its node (P.Markers).

The coordinator sends a marker only once the journal line that owes it is durable
(fleet.control.nodemarkers says why the node writes it). The files are written here on
one thread, in the order given, so that a slow metadata server (a create on Lustre or
GPFS is a round trip of milliseconds) never holds the agent's loop: its relays and
heartbeats. How far the thread got is what the agent says back (P.MarkersWritten),
with its next message; the loop hears of progress through a pipe it polls.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque

HOLD_S = 0.25  # progress said alone when no other message has carried it for this long
# Test and benchmark hook (docs/operations.md), the same as the coordinator's
# (fleet.control.journal.SLEEP_ENV): milliseconds slept in each marker's write, to
# emulate a parallel filesystem's metadata latency.
_SLEEP = float(os.environ.get("FLEET_TEST_MARKER_SLEEP_MS") or 0) / 1000


def put(path: str, text: str) -> None:
    """One open, no temporary file, no rename (the coordinator's journal is the
    authority; a torn file is rewritten by the next fleet's replay)."""
    data = text.encode()
    if _SLEEP:
        time.sleep(_SLEEP)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except FileNotFoundError:  # a step that never started here: its .fleet is not made yet
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)


class Writer:
    """One thread writing (path, text) files in order; `progress()` for the loop."""

    def __init__(self):
        self.wake_r, self._wake_w = os.pipe()  # a byte when a piece is written: the loop polls it
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._lock = threading.Condition()
        self._queue: deque = deque()  # (number, path, text)
        self._upto = 0  # every file numbered up to this is written or failed
        self._failed: list[int] = []  # numbers not written, not yet said
        self.said = 0  # the upto last said to the coordinator
        self.before = 0  # the one said before it (unsay)
        self.errors = 0
        self._busy = False  # a piece taken off the queue, not yet written
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="fleet-agent-markers", daemon=True)
        self._thread.start()

    def add(self, files: list, last: int) -> None:
        first = last - len(files) + 1
        with self._lock:
            self._queue.extend((first + i, f[0], f[1]) for i, f in enumerate(files))
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

    def drain(self, timeout: float) -> bool:
        """Wait (at most timeout s) until every file given is written or failed."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._queue and not self._busy, timeout)

    def close(self) -> None:
        with self._lock:
            self._closing = True
            self._lock.notify()
        for fd in (self.wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def _run(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._queue or self._closing)
                if self._closing:
                    return
                piece = [self._queue.popleft() for _ in range(min(len(self._queue), 256))]
                self._busy = True
            failed = []
            for number, path, text in piece:
                try:
                    put(path, text)
                except OSError as e:
                    failed.append(number)
                    self.errors += 1
                    if self.errors <= 3:  # said, not flooded: the coordinator writes them
                        print(f"fleet agent: cannot write {path}: {e}", file=sys.stderr, flush=True)
            with self._lock:
                self._upto = piece[-1][0]
                self._failed += failed
                self._busy = False
                self._lock.notify_all()
            try:
                os.write(self._wake_w, b"m")
            except OSError:  # full (the loop is behind: it reads progress anyway) or closed
                pass
