"""The journal's fsync, on a thread of its own: the loop never waits for the disk.

Why: the journal's lines are written on the loop at the end of each turn (a write to
the page cache) and fsync'd at most every FLUSH_S (fleet.control.journal). On local
disk an fsync takes a fraction of a millisecond; on Lustre or GPFS it is a round trip
to the servers, milliseconds at best and much more while they are busy, and while the
loop waited for it no agent was heard, no step started and no `fleet status` answered.

So the loop asks (`ask`) and goes on; this thread makes the fsync, then writes a byte
to a pipe the loop's poll watches (`fd`), so that the loop wakes and hands the files
that waited for that fsync (the done markers) to their writers. The journal's order is
unchanged: a marker is still handed over only after the line that owes it is durable.
Requests are done in the order asked; `done(ticket)` says whether one is, and raises
its OSError (a failing or full filesystem) for the loop to handle as it did when the
fsync was its own.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque

# "loop": the journal's fsyncs made on the loop, as before this module (to compare, or
# to rule it out; docs/operations.md).
WHERE_ENV = "FLEET_JOURNAL_FSYNC"
# Test and benchmark hook (docs/operations.md): milliseconds slept in each fsync of the
# journal, on whichever thread makes it, to emulate a parallel filesystem's latency.
SLEEP_ENV = "FLEET_TEST_FSYNC_SLEEP_MS"


def fsync(fd: int) -> None:
    """os.fsync, slowed by the test hook if it is set."""
    sleep = float(os.environ.get(SLEEP_ENV) or 0) / 1000
    if sleep:
        time.sleep(sleep)
    os.fsync(fd)


class Syncer:
    """One thread that fsyncs file descriptors in the order they are asked."""

    def __init__(self):
        self._cond = threading.Condition()
        self._asked: deque[tuple[int, int]] = deque()  # (ticket, fd) not yet begun
        self._tickets = 0  # the last ticket given
        self._done = 0  # every ticket up to this one is done
        self._errors: dict[int, OSError] = {}  # ticket -> how its fsync failed
        self._stop = False
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self.fd = self._r  # readable when a request was done since the last woken()
        self._thread = threading.Thread(target=self._run, name="fleet-journal-fsync", daemon=True)
        self._thread.start()

    def ask(self, fd: int) -> int:
        """Have `fd` fsync'd; the ticket to ask done() with."""
        with self._cond:
            self._tickets += 1
            self._asked.append((self._tickets, fd))
            self._cond.notify()
            return self._tickets

    def done(self, ticket: int) -> bool:
        """Whether the fsync of `ticket` was made; its OSError if it failed."""
        if ticket > self._done:
            return False
        if self._errors:
            with self._cond:
                e = self._errors.pop(ticket, None)
                for t in [t for t in self._errors if t < ticket]:  # (superseded: never asked about)
                    del self._errors[t]
            if e is not None:
                raise e
        return True

    def idle(self) -> None:
        """Wait until every fsync asked is made (before its file descriptor is closed)."""
        with self._cond:
            while self._done < self._tickets and self._thread.is_alive():
                self._cond.wait(0.5)

    def woken(self) -> None:
        """Empty the wake pipe (the loop's poll found it readable)."""
        try:
            while os.read(self._r, 512):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        """Make what was asked, then stop the thread and close the pipe."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join()
        os.close(self._r)
        os.close(self._w)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._asked and not self._stop:
                    self._cond.wait()
                if not self._asked:
                    return
                ticket, fd = self._asked.popleft()
            error = None
            try:
                fsync(fd)
            except Exception as e:  # (the thread goes on whatever happens: the loop is told)
                error = e if isinstance(e, OSError) else OSError(f"the journal's fsync failed: {e!r}")
            with self._cond:
                if error is not None:
                    self._errors[ticket] = error
                self._done = ticket
                self._cond.notify_all()
            try:
                os.write(self._w, b"\0")
            except BlockingIOError:  # full: the loop is woken already
                pass
