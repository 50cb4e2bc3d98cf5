"""Done markers of versions before 2026-12-06, rewritten once with the current definition hash.

Why: on 2026-12-06 the scheduling fields (priority, estimate, retries, concurrent, task)
left a step's definition hash (fleet.core.suite.SCHEDULING). A marker written before
names the old hash (fleet.wire.spechash.legacy_hash), which a submission still counts
done (fleet.wire.records.succeeded_as). Left so, the first change of a scheduling field
after the upgrade matched neither hash and ran again every step an older version
finished: what the change of 2026-12-06 was made to stop.

So a step a submission skipped through the old hash (Checked.legacy) has its marker
rewritten once, the same record with the new hash, as any success's marker is written:
a journal `done` line (no attempt on it: nothing ran), then the file, by the marker
threads (fleet.control.markwriter). The record is read from the marker's file, a BATCH
at a time, on a thread of its own: at a million such steps on a parallel file system (a
few ms an open) the reads take about that many seconds of that thread, once, and the
loop pays one journal line a step. Each batch is put in on the loop, and a step is
left as it is where anything happened to it since it was skipped (it ran again, a
marker or final is queued for it, another marker is known for it). Only while this
fleet is alone in its run directory: shared, others write markers too (such a step's
marker is rewritten by a later run alone). A fleet going down waits (bounded) for the
batch being read and puts it in; the rest waits for the next run.
"""

from __future__ import annotations

import logging
import os
import select
import time
from collections import deque

from fleet.control import journal, markwriter
from fleet.control.worker import Worker
from fleet.core import states as S
from fleet.wire import records, spechash

log = logging.getLogger("fleet.control.legacymarks")
BATCH = 1000  # markers read per job on the thread (and put in on the loop per turn)
CLOSE_S = 5.0  # at most this long a fleet going down waits for the batch being read


def legacy(done, foreign, by_id: dict, markers: dict) -> dict:
    """Of the steps a submission counts done (not another shard's), those whose marker
    names another hash than the definition's now: step id -> its StepSpec. Done, such a
    marker names the old hash (records.succeeded_as). Off the loop (submissions.check)."""
    out = {}
    for sid in done:
        if sid in foreign:
            continue
        rec, spec = markers.get(sid), by_id[sid]
        if rec is not None and rec.get("spec") != records.spec_hash(spec):
            out[sid] = spec
    return out


def read(run_dir, batch: list) -> list:
    """(On the thread) each step's marker, if it still names the old hash: (step, its id,
    the record with the new hash, that record's text)."""
    out = []
    for sid, spec in batch:
        rec = records.read_done(run_dir, sid)
        if rec is None or rec.get("outcome") != "succeeded" or rec.get("spec") != spechash.legacy_hash(spec):
            continue
        # A marker of fleet 0.1 has no id: its dependents' markers name the one made of
        # its fields (records.marker_id), kept as its id (the journal keeps no other).
        new = dict(rec, spec=records.spec_hash(spec), id=records.marker_id(rec))
        out.append((sid, new["id"], new, journal.encode(new)))
    return out


class Remarker:
    """The recorder's markers to rewrite (see the module's docstring)."""

    def __init__(self, recorder):
        self.rec = recorder
        self.todo: deque = deque()  # (step, StepSpec) not yet read
        self.worker: Worker | None = None  # made at the first batch
        self.busy = False  # a batch is being read
        self.rewritten = 0

    def add(self, steps: dict) -> None:
        """Steps a submission skipped through the old hash (step -> StepSpec); the first
        batch is read at once (a fleet run that skips everything goes down soon after)."""
        if steps and self.rec.alone:
            self.todo.extend(steps.items())
            self.turn()

    def turn(self) -> None:
        """Once per loop turn: put in the batch read; hand the thread the next one."""
        if self.busy:
            for done in self.worker.collect():
                self.busy = False
                if done.error is not None:
                    log.error("reading markers to rewrite failed: %r", done.error)
                else:
                    self._put(done.value)
        if self.busy or not self.todo:
            return
        if not self.rec.alone:  # shared: a later run alone rewrites them
            self.todo.clear()
            return
        batch = [self.todo.popleft() for _ in range(min(BATCH, len(self.todo)))]
        if self.worker is None:
            self.worker = Worker("fleet-legacy-markers")
        self.worker.put(None, read, self.rec.run_dir, batch)
        self.busy = True

    def _put(self, found: list) -> None:
        """(On the loop) each marker read, rewritten unless something happened to its
        step since it was skipped."""
        r = self.rec
        if not r.alone:
            return
        state, queued, known, claimed = r.sched.state_of, markwriter.queued_in(r.run_dir), r.known, r.claims.claimed
        for sid, mid, new, text in found:
            if state(sid) != S.SKIPPED or sid in queued or sid in claimed:
                continue
            k = known.get(sid) if known is not None else None
            if k is not None and k.get("id") != mid:
                continue
            r.journal.done(sid, text, None)
            if known is not None:
                known.done(sid, new)
            r.journal.owe(os.path.join(records.fleet_dir(r.run_dir, sid), records.DONE), text, sid)
            self.rewritten += 1

    def close(self) -> None:
        """At teardown, before the journal closes: the batch being read put in (a bounded wait)."""
        if self.worker is None:
            return
        self.todo.clear()
        end = time.monotonic() + CLOSE_S
        # poll, not select: with its open-file limit raised (fleet.wire.fdlimit) a big fleet's
        # descriptors pass 1,024, which select refuses (ValueError, at teardown).
        waiter = select.poll()
        waiter.register(self.worker.fd, select.POLLIN)
        while self.busy and (left := end - time.monotonic()) > 0:
            waiter.poll(left * 1000)
            self.turn()
        self.worker.close(0.1)
        if self.rewritten:
            log.info("%d done markers of versions before 2026-12-06 rewritten with the current definition hash",
                     self.rewritten)
