"""Where the coordinator records a step's attempts and outcomes: the recording paths of
its loop (start, exit, lost attempt, final outcome, once per turn, teardown).

Holding the run directory's lease alone (fleet.control.lease), the common case, a
fleet takes no per-step claim and writes no attempt file: it appends to its journal
(fleet.control.journal), flushed once per loop turn at most every FLUSH_S; each step's
done marker (or final.json) is written after the flush, in one open, by the threads of
fleet.control.markwriter, off the loop. Attempts count toward --max-attempts from
memory (fleet.control.tally): the journals and the attempt files of older fleets, read
once; a step the user asked for again (--force, or its directory removed) counts from
a `reset` line this fleet writes for it. When the run directory is shared (another
fleet or shard registered), every step is claimed first, in batches
(fleet.control.claimlog), and recorded the same way. A step that runs again is
recorded the same way; only one whose directory held a per-step claim when it was
submitted (fleet.control.leftovers) is claimed per step while alone, and its records
go to per-step files (fleet.control.claims, store).

At start, the journals of fleets that are gone and did not seal theirs are replayed:
the markers and finals they owed are written, and the steps they were running are
adopted (an `adopted` record names the dead fleet) when they start here.
"""

from __future__ import annotations

import logging
import os
import time

from fleet.control import (doneline, fold, foundgone, gonefence, journal, journalmarks, legacymarks, markwriter,
                           outcomes, store, syncer, tally)
from fleet.control.claimlog import ClaimLog
from fleet.control.lease import Lease
from fleet.core import attempts
from fleet.core import states as S
from fleet.wire import events, gcpause, records

log = logging.getLogger("fleet.control.recording")
_OURS = store.Claim(store.Claim.OURS)  # a start's answer, alone (read, never changed: one for all)


class Recorder:
    """The coordinator's records of attempts and outcomes (see the module's docstring)."""

    gone_why: str | None = None  # why this fleet no longer stands on its run directory (fleet.control.foundgone)

    def __init__(self, coordinator):
        c = coordinator
        self.run_dir, self.fleet_id, self.claims = c.run_dir, c.fleet_id, c.claims
        self.sched, self.submissions = c.sched, c.submissions
        self.lease = Lease(self.run_dir, self.fleet_id, self.claims.stale_after, gonefence.stops_here(c))
        self.lease.acquire()
        self.coord = c  # (its events; stopped if found gone: fleet.control.foundgone)
        gone = self.lease.took_from
        if gone is not None and gone.get("fleet"):  # (before our fleet_starting: it ends that one's session)
            c.events.write(events.FleetGone(t=gone["refreshed"], gone=str(gone["fleet"]),
                                            pid=int(gone.get("pid") or 0), host=str(gone.get("host") or "")))
        self.adopt: dict[str, dict] = {}  # step -> the dead fleet's attempt it was running
        self._started = time.time()
        with gcpause.paused():  # (the journals read, replayed and folded: millions of plain objects)
            js, live, replayed = self._replay()
            # Shared, claims are taken in batches (fleet.control.claimlog); alone, nobody
            # else reads the log of an earlier shared period (it goes) or folds journals.
            self.log = self.claims.log = ClaimLog(self.run_dir, self.fleet_id, self.lease, self._gone)
            self.log.snap_async = True  # claims snapshots off the loop (fleet.control.snapwriter)
            gonefence.at_start(self.log, replayed)  # a dead fleet's started steps wait for its side to stop them
            # Alone, a submission takes the markers the journals recorded (fleet.control.journalmarks).
            self.known = journalmarks.start(self.run_dir, js, self.fleet_id) if not self.lease.shared else None
            if not self.lease.shared:
                self.log.clear()
                fold.at_start(self.run_dir, js, live, replayed)
            del js, live, replayed
        self._rotate = fold.rotate_bytes()
        self.sealing: list[tuple] = []  # (rotated segment's journal, its writer ticket) to seal (fleet.control.fold)
        self._seal_at = 0.0
        self._pending = lambda: c._todo  # the loop turn's other decisions: one batch
        self._cannot_write = lambda e: c.drain.cannot_write("journal", e, time.time())  # a full disk drains
        n = markwriter.threads()  # (0: the files written on the loop, as before)
        self.writer = markwriter.Writer(self.run_dir, journal.put, store.unlink_done, n) if n > 0 else None
        # The journal's fsyncs off the loop (fleet.control.syncer; FLEET_JOURNAL_FSYNC=loop: on it, as before).
        self.syncer = syncer.Syncer() if os.environ.get(syncer.WHERE_ENV) != "loop" else None
        self.journal = journal.Journal(self.run_dir, self.fleet_id, {**self.lease.me, "shared": self.lease.shared},
                                       self.writer, self.syncer)
        self.legacy = legacymarks.Remarker(self)  # markers of versions before 2026-12-06, rewritten once
        for step, rec in self._lost_at_start:  # (read before this journal was made)
            self.journal.append({"k": "lost", "step": step, "rec": rec})
        del self._lost_at_start
        self.claims.shared = self.lease.shared
        self.claims.busy = self.submissions.busy_since  # (said in the claims log: fleet.control.claims)
        self.base: dict[str, int] = {}  # step -> attempts recorded when its generation began
        self.parents: dict[str, tuple] = {}  # a parent's success, recorded at its Finished (parent_ended)
        # step -> attempt whose exit went on (wait, next, restart) but the coordinator failed it (overrule)
        self.overruled: dict[str, int] = {}
        # Steps started here without a claim: their directories are this fleet's doing,
        # so a later submission's finding them is no reason to claim them.
        self.ran: set[str] = set()
        # Queued steps taken back from their node (a node window's Unqueued), by attempt:
        # that attempt's start is journaled already; started elsewhere, it is not again.
        self.taken_back: dict[str, int] = {}
        self._held: tuple | None = None  # (step, attempt record) of a success, for its done line
        self._steps = f"{self.run_dir}/steps/"  # a marker's path as text: records.fleet_dir's, without a Path
        # `fleet run` hears a submission finished only once its outcomes are on disk.
        self.submissions.durable = self.durable
        self.submissions.reset = self.reset
        # submission -> [its steps finished, the journal then, its mark there, the writer's ticket once reached]
        self._tickets: dict[int, list] = {}

    @property
    def alone(self) -> bool:
        """No per-step claims: this fleet holds the lease and nobody shares it."""
        return not self.lease.shared

    def _replay(self) -> tuple:
        js = records.read_journals(self.run_dir)
        live = {self.fleet_id} | set(self.lease.others())
        holder = self.lease.holder_id()
        if holder and not self.lease.holder:
            live.add(holder)
        done = journal.replay(self.run_dir, js, live, self.fleet_id)
        replayed = {j.path for j in done}
        self._lost_at_start = self._lost(done, js, self.lease.died)
        for step, rec in self._lost_at_start:  # (counted with the rest by tally.replayed below)
            js.attempts.setdefault(step, {})[(rec["fleet"], rec["generation"], rec["attempt"])] = rec
        # What crashed fleets were running (replayed now, or earlier by another fleet:
        # a shard restarted after its peers did), unless a later journal ran it since.
        for j in sorted(js.each, key=lambda j: float(j.fleet.get("t") or 0.0)):
            for step in j.touched:
                self.adopt.pop(step, None)
            if j.path in replayed or (j.sealed and j.sealed_by != "itself"):
                self._adopting(j)
        tally.replayed(js, self._key)
        return js, live, done

    def _key(self, step: str) -> str:
        return store.key(self.run_dir, step)

    def _adopting(self, j: records.Journal) -> None:
        """The steps a crashed fleet's journal says were running: adopted when they start here."""
        for step, line in j.running.items():
            was = line.get("was") or {**{k: j.fleet.get(k) for k in ("fleet", "host", "pid")}, "journal": j.path.name}
            self.adopt[step] = {**was, "attempt": line.get("attempt"), "generation": line.get("generation")}

    def _gone(self, fleet: str) -> None:
        """A fleet sharing the run directory is gone (fleet.control.claimlog): write the
        markers its journal owed before any of its steps is taken, note what it was
        running (adopted), and count the attempts (and resets) it recorded since this fleet started."""
        died = self.lease.died.get(fleet)
        if died is not None and (self.lease.took_from or {}).get("fleet") != fleet:
            # Its end, for the event stream's readers (fleet report): it wrote no fleet_down,
            # and no fleet may ever take its lease over to say so (said again then: read once).
            self.coord.events.write(events.FleetGone(t=float(died.get("refreshed") or time.time()), gone=fleet,
                                                pid=int(died.get("pid") or 0), host=str(died.get("host") or "")))
        js = records.read_journals(self.run_dir, only=fold.journals_of(self.run_dir, fleet))
        done = journal.replay(self.run_dir, js, {self.fleet_id}, self.fleet_id)
        for j in done:
            self._adopting(j)
        # (replayed here or by another fleet first: what it started waits for its side to stop it, gonefence)
        self.log.fence(fleet, died, {s for j in js.each if j.fleet.get("fleet") == fleet for s in j.running})
        tally.since(js, self._started, self._key)
        # Not added to js: since() would count again one that began after this fleet did.
        for step, rec in self._lost(done, js, self.lease.died):
            self.journal.append({"k": "lost", "step": step, "rec": rec})
            tally.ended(self._key(step), rec)

    @staticmethod
    def _lost(done: list, js: records.Journals, died: set) -> list[tuple[str, dict]]:
        """The attempts the journals `done` (of dead fleets, replayed by this fleet: no
        other fleet recorded their ends) say began and never ended, of the fleets that
        `died` (found gone still holding the lease or a registration: killed, their node
        failed, or a step took them down; a fleet that ended gave them back, and one that
        could not seal its journal, on a full disk, had interrupted what ran). Each
        counts toward --max-attempts as a lost attempt (fleet.core.attempts: a step that takes its fleet
        down in every fleet that runs it must not run forever in a job that resubmits
        itself). Returned as (step, attempt record), to be counted here and recorded in
        this fleet's journal for later fleets (a `lost` line: it touches nothing, so the
        step is still adopted where it runs next, fleet.wire.records). An attempt some
        journal of `js` recorded the end of is not lost (a rotated segment's start, ended
        in the journal begun after it). A start line of a fleet before 2026-12-03 names no
        definition: it counts for none."""
        out, seen = [], set()
        for j in done:
            who = {k: j.fleet.get(k) for k in ("fleet", "host", "pid")}
            if who["fleet"] not in died:
                continue
            for step, line in j.running.items():
                key = (who["fleet"], line.get("generation"), line.get("attempt"))
                if not line.get("spec") or key in js.attempts.get(step, ()) or (step, key) in seen:
                    continue
                seen.add((step, key))
                rec = {"fleet": who["fleet"], "attempt": line.get("attempt"), "generation": line.get("generation"),
                       "outcome": S.LOST, "spec": line["spec"], "started_at": line.get("t"), "ended_at": line.get("t"),
                       "reason": f"its fleet ({who['fleet']}, pid {who['pid']} on {who['host']}) ended while it ran or "
                                 "was handed to a node: nothing recorded its end (the coordinator was killed, its "
                                 "node failed, or the step took it down)"}
                out.append((step, rec))
        return out

    # -- the recording paths ----------------------------------------------------------------
    def claim(self, d, spec) -> store.Claim:
        """May this attempt start here? Shared: its batch claim (fleet.control.claimlog);
        alone, for a step with a per-step claim on disk when it was submitted
        (fleet.control.leftovers): its per-step claim (fleet.control.claims)."""
        if self.adopt and self.log.fences and (c := gonefence.waits(self.log, d.step, self.adopt)) is not None:
            return c  # a dead fleet's step, its run there maybe stopping still
        if not self.alone:
            c = self.claims.batch(d, spec, self._pending())
            if c is not None:
                return c
        elif store.per_step(self.run_dir, d.step) and d.step not in self.ran:
            c = self.claims.claim(d, spec)
            if c.kind == store.Claim.OURS and c.adopted is None:
                c.adopted = self.adopt.pop(d.step, None)
            return c
        gen = self.sched.generation(d.step)
        m = self.claims.max_attempts
        limit = max(m, spec.retries + 1) if m else 0
        key = store.key(self.run_dir, d.step)  # (one for the store's two looks)
        if limit:
            n = tally.count(key, spec)
            if gen > 1 and d.attempt == 1:  # a new generation counts from here
                self.base[d.step] = n
            if (counted := n - self.base.get(d.step, 0)) >= limit:
                mine = min(counted, tally.count(key, spec, by_fleet_step=True))  # (its reason says where they came from)
                return store.Claim(store.Claim.STOPPED, attempts.stopped(counted, limit, mine))
        if self.taken_back and self.taken_back.pop(d.step, None) == d.attempt:
            return _OURS  # (journaled when it was first handed to a node)
        h = records.spec_hash(spec)
        store.flying(self.run_dir, spec, d.attempt, gen, key, h)
        self.ran.add(d.step)
        self.journal.start(d.step, d.attempt, gen, h)
        adopted = self.adopt.pop(d.step, None) if self.adopt else None
        return store.Claim(store.Claim.OURS, adopted=adopted) if adopted is not None else _OURS

    def _files(self, step: str) -> bool:
        """Recorded in per-step files: this fleet holds the step's per-step claim (an
        older fleet's records were on disk); otherwise in the journal, shared or not."""
        return step in self.claims.claimed

    def exited(self, node: str, msg, rec, spec) -> None:
        """A reported exit: its attempt record, and a success's marker. A step that
        submitted children: held until the scheduler says how it ended (parent_ended)."""
        if msg.outcome == S.SUCCEEDED and msg.control.get("submitted") and spec is not None:
            self.parents[msg.step] = (node, msg, rec, spec)
            return
        self._exited(node, msg, rec, spec)

    def _exited(self, node: str, msg, rec, spec) -> None:
        subs = self.submissions.step_subs.get(msg.step)
        # Why a step that had succeeded runs again, for its attempt record (fleet audit).
        rerun = self.submissions.rerun.get(msg.step, "")
        files = msg.step in self.claims.claimed  # (_files)
        if msg.outcome == S.SUCCEEDED and spec is not None and not files:  # the common case, by shape
            self._succeeded(node, msg, rec, spec, rerun, subs[-1] if subs else None)
            return
        if files and self.known is not None:  # its files are written here, not from the journal: read again
            self.known.forget(msg.step)
        if outcomes.store_reported(self.run_dir, self.fleet_id, node, msg, rec, spec, rerun=rerun,
                                   submission=subs[-1] if subs else None, sink=store if files else self) and files:
            self.claims.release(self.run_dir, msg.step)
        if self._held is not None:  # a success without its marker (no spec): its attempt alone
            self.journal.append({"k": "attempt", "step": self._held[0], "rec": self._held[1]})
            self._held = None

    def parent_ended(self, d, now: float) -> None:
        """The scheduler's Finished `d` of a step whose success is held here: its records.
        A parent succeeds only with its children, waited for or not (fleet.core.phases):
        its marker, written at its own exit, would make a rerun after a crash skip it
        while children it submitted never ran (it runs again instead, and the children
        that succeeded are kept). Refused children fail it; cancelled while its children
        ran, it did not succeed: no marker then either."""
        held = self.parents.pop(d.step, None)
        if held is None or held[1].attempt != d.attempt:
            return
        if d.outcome == S.SUCCEEDED:
            self._exited(*held)
        elif d.outcome != S.CANCELLED:
            self.record_attempt(self.run_dir, d.step, self.fleet_id, d.attempt,
                                {"outcome": d.outcome, "reason": d.reason, "ended_at": now})

    def _succeeded(self, node: str, msg, rec, spec, rerun: str, submission) -> None:
        """A success recorded in the journal: as record_attempt and write_done would,
        its texts put together by shape (fleet.control.doneline) and its marker's path
        made as text (no Path a step)."""
        d, ran, deps, gen, mid = store.succeeded(self.run_dir, spec, msg.attempt)
        marker, att = doneline.texts(self.fleet_id, node, msg, rec.work_s, rec.reason, ran, deps, gen, mid, rerun,
                                     submission, records.spec_hash(spec), getattr(rec, "spelt", None))
        tally.succeeded(d, msg.ended_at)
        drop = store.replaces_final(d)  # (a failure's final.json goes with its marker: rare)
        self.journal.done(spec.id, marker, att, drop)
        if self.known is not None:
            self.known.done_as(spec.id, ran, mid, deps, rec.work_s)
        self.journal.owe(f"{self._steps}{spec.id}/.fleet/{records.DONE}", marker, spec.id, drop, node)  # (d's)
        self.claims.ended_here(spec.id, mid)  # shared: said in the claims log (fleet.control.claimlog)

    def overrule(self, step: str, attempt: int) -> None:
        """The coordinator fails an attempt whose exit said it went on (fleet.control.children:
        a wait that loops, children refused): its record is written again at its Finished."""
        self.overruled[step] = attempt

    def ended_here(self, d, now: float) -> None:
        """The scheduler's Finished `d` of an attempt whose end no agent's record says: one
        lost, or one whose record said it went on and that ends failed instead (a restart
        past the limit: d.overrules; or an overrule). Its record is written (again: the
        same key, so it replaces the one that went on, in the journal as in a file), so that
        --max-attempts counts it (fleet.core.attempts; before 2026-12-06 it stayed "restart"
        or "wait", counted by none, and a resubmitted loop ran in every run). Only at a
        loop's end: the cost of a lookup of its submission is nothing here."""
        if self.overruled and self.overruled.pop(d.step, None) == d.attempt:
            overruled = d.outcome != S.CANCELLED  # (a cancel as it went on is recorded as one: Cancelled)
        else:
            overruled = d.overrules
        if d.outcome != S.LOST and not overruled:
            return
        record = {"outcome": d.outcome, "reason": d.reason, "ended_at": now}  # (its definition: what ran, store)
        if overruled:
            subs = self.submissions.step_subs.get(d.step)
            record.update(rerun=self.submissions.rerun.get(d.step, ""), submission=subs[-1] if subs else None)
        self.record_attempt(self.run_dir, d.step, self.fleet_id, d.attempt, record)

    def record_attempt(self, run_dir, step_id: str, fleet: str, attempt: int, record: dict) -> None:
        """An attempt's record: a file, or (alone) a journal line."""
        if self._files(step_id):
            store.record_attempt(run_dir, step_id, fleet, attempt, record)
            return
        _, rec = store.attempt_record(run_dir, step_id, fleet, attempt, record)
        if record.get("outcome") == S.SUCCEEDED:  # one line with its marker's (write_done)
            self._held = (step_id, rec)
        else:
            self.journal.append({"k": "attempt", "step": step_id, "rec": rec})
        tally.ended(store.key(run_dir, step_id), rec)  # (counted when it ends, not as it goes on)

    def interrupted(self, step: str) -> None:
        """The drain interrupted the step: an `interrupted` line, so that a fleet replaying
        this journal finds it ended, not lost (it is no attempt)."""
        self.journal.append({"k": "interrupted", "step": step})

    def reset(self, steps) -> None:
        """The user asked for these steps again (fleet.control.submissions): said in the
        journal, so that every later fleet counts their attempts from here too."""
        for step in steps:
            self.journal.append({"k": "reset", "step": step})

    def write_done(self, run_dir, spec, record: dict) -> None:
        """(Alone) a success: its journal line, and its marker once that is durable."""
        path, rec = store.done_record(run_dir, spec, record)
        att = None
        if self._held is not None and self._held[0] == spec.id:
            att, self._held = self._held[1], None
        text = journal.encode(rec)
        drop = store.replaces_final(os.path.dirname(path))
        self.journal.done(spec.id, text, att, drop)
        if self.known is not None:
            self.known.done(spec.id, rec)
        self.journal.owe(path, text, spec.id, drop)
        self.claims.ended_here(spec.id, records.marker_id(rec))  # shared: said in the claims log (fleet.control.claimlog)

    def final(self, step: str, outcome: str, record: dict) -> None:
        """A step that ended here without success and will not run again here."""
        spec = self.submissions.specs[step]
        if self.known is not None:  # whether this final removes the marker or not, its file says (finals are few)
            self.known.forget(step)
        if self._files(step):
            store.write_final(self.run_dir, spec, outcome, record)
            if "attempt" in record:
                self.claims.release(self.run_dir, step)
            return
        path, rec, drop = store.final_record(self.run_dir, spec, outcome, record)
        self.journal.append({"k": "final", "step": step, "rec": rec, "drop": drop})
        self.journal.owe(path, rec, step, drop)
        self.claims.ended_here(step, records.final_tag(rec))

    # -- each turn, and the end -----------------------------------------------------------------
    def stand(self, now: float) -> None:
        """At each loop turn's start: when its refresh is due, whether this fleet still stands
        on the run directory (foundgone; after a hold-up, a second look: Lease.stand); if not, it stops."""
        if self.gone_why is None and (why := self.lease.stand(now)) is not None:
            foundgone.mute(self, why)

    @property
    def shutdown_grace(self) -> float | None:
        """Its agents' Shutdown grace: each step's own (None), none for a fleet found gone."""
        return None if self.gone_why is None else 0.0

    def fds(self) -> tuple:
        """What the loop's poll should watch for the recorder: the syncer's wake pipe."""
        return () if self.syncer is None else (self.syncer.fd,)

    def turn(self, ready=()) -> None:
        """Once per loop turn: flush the journal when due (and hand over the files of an
        fsync the syncer made: `ready`, what the loop's poll found readable); seal rotated
        segments whose files are written; let in a fleet that wants to share."""
        now = time.monotonic()
        if self.syncer is not None and self.syncer.fd in ready:
            self.syncer.woken()
        if self.gone_why is not None:
            return  # (found gone: nothing more is written, nor the lease touched)
        try:
            if self.legacy.busy or self.legacy.todo:
                self.legacy.turn()
            self.journal.turn(now)
            if self.sealing and now >= self._seal_at:  # (a look costs O(nodes): twice a second)
                self._seal_at = now + 0.5
                self._seal_segments()
            # The segment waits for the next lone fleet's fold (fleet.control.fold). Only once the threads' files
            # are written (then the segment owes them one flush's at most); what nodes still have to write is
            # never at rest under load, and the segment's seal waits for it (_seal_segments).
            if self.journal.bytes >= self._rotate and (self.writer is None or not self.writer.depth(threads=True)):
                fold.rotate(self)  # fleet.control.fold: sealed and moved aside, folded by the next lone fleet
        except OSError as e:  # a full or failing filesystem: said (a full one drains), not fatal to the loop
            self._cannot_write(e)
        if self.lease.wants_sharing(now):
            self._share()

    def _share(self) -> None:
        """Another fleet registered: make every outcome durable, claim every step running
        here and every step whose marker is still queued (fleet.control.markwriter) in
        one batch, the latter said ended (the newcomer then waits for their markers, never
        runs them again), then say the run directory is shared."""
        self.journal.sync()
        queued = [j.spec.id for j in self.sched.window.next.values()]  # fleet.core.window
        unwritten = self.writer.steps() if self.writer is not None else []
        for step, holder in self.log.claim([*(v.id for v in self.sched.running()), *queued, *unwritten],
                                           lambda s: None).items():
            log.error("step %s runs here but fleet %s claimed it", step, holder)
        for step in unwritten:
            self.log.said_ended(step)
        self.journal.append({"k": "shared"})  # (its time precedes anything the newcomer starts)
        journalmarks.off(self.run_dir, self.known)  # other fleets write markers from now on
        self.known = None
        self.claims.say_busy()  # (before the newcomer starts: it may find a step this fleet failed)
        if (taker := self.lease.share()) is not None:  # (its lease is no longer its own: it stops)
            return foundgone.mute(self, foundgone.taken(self.lease, taker, None))
        self.claims.shared = True
        log.info("run directory %s is shared from now on: every step is claimed", self.run_dir)

    def durable(self, sub) -> bool:
        """Every outcome of a finished submission durable, and the files they owe written:
        asked again until then (their fsync and the files are made off the loop, never waited for).
        On a file system too full for the journal, or read-only, or failing (the fleet
        drained for it: fleet.control.drain.cannot_write): as durable as it will get, so
        said finished; its unrecorded outcomes run again next time. (Before 2026-12-06 a
        read-only one was asked again for ever: `fleet run` never returned.)"""
        j, t = self.journal, self._tickets.get(sub.id)
        try:  # (the fsync asked of the syncer's thread: the loop never waits for it; fleet.control.journal)
            if t is None or t[0] != len(sub.finished) or t[1] is not j:  # (children came since; a rotation)
                t = self._tickets[sub.id] = [len(sub.finished), j, j.settle(time.monotonic()), None]
            elif not j.settled(t[2]):
                j.settle(time.monotonic())  # (asks again once the fsync in flight, which may not cover it, is made)
        except OSError as e:
            return self._cannot_write(e)
        if not j.settled(t[2]):
            return False
        if self.writer is not None:
            if t[3] is None:  # (its files handed over: where they end in the writer's queues)
                t[3] = self.writer.ticket()
            if not self.writer.reached(t[3]):
                return False
        del self._tickets[sub.id]  # (asked again: settled at once)
        return True

    def figures(self) -> dict:
        """The writer's queue, for status answers (fleet.control.markwriter)."""
        return self.writer.figures() if self.writer is not None else {}

    def _seal_segments(self, last: bool = False) -> None:
        """Seal each rotated segment whose files are written (last: close the rest unsealed)."""
        for j, ticket in list(self.sealing):
            done = ticket is None or self.writer.reached(ticket, hurry=False)
            if done or last:
                self.sealing.remove((j, ticket))
                j.finish(seal=done)

    def close(self) -> None:
        """At teardown: the journal flushed, its markers written and sealed; claims and
        the lease given back (markers first: another fleet may be waiting for them)."""
        if self.gone_why is not None:
            journalmarks.off(self.run_dir, self.known)
            return foundgone.close(self)
        try:
            if self.log.pending is not None:
                self.log.pending.thread.join()  # a claims snapshot too
            try:
                self.legacy.close()  # (the batch being read: its lines before the seal)
                self.journal.close()  # (waits for the files queued, bounded: fleet.control.markwriter)
                self._seal_segments(last=True)  # (their files are written now, unless the wait ran out)
            except OSError as e:  # a full disk: left unsealed, the next fleet replays what was written
                log.error("cannot close the journal %s: %s (left for the next fleet to replay)", self.journal.path, e)
            if self.writer is not None:
                self.writer.close(0)
            if self.syncer is not None:
                self.syncer.close()
            if self.claims.shared:  # its files written: a fleet that finds this one gone takes its outcomes
                try:  # (not its steps: fleet.control.claims)
                    self.log.say_ended()
                except OSError as e:
                    log.error("cannot say in the claims log which steps ended here: %s", e)
        finally:
            journalmarks.off(self.run_dir, self.known)
            self.claims.release_all()
            self.lease.release()

