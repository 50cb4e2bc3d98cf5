"""Claims: which fleet runs a step when several share one run directory.

A step is claimed before it starts: on a shared run directory in a batch of the claims
log (fleet.control.claimlog: held while this fleet lives), else, for a step an earlier
fleet left records of, by its own claim file, refreshed while it runs and released when
it ends here. A step decided here that another fleet holds is tracked as "elsewhere"
until its marker, its final record, or its holder's end or stale claim settles it. A
final record that says only that its fleet's allocation could not run the step (it
lost nodes: Claims.verdict) settles nothing: the step runs here. A fleet writes no final
record of a step another fleet holds or succeeded (Claims.final_here).

Methods that need the scheduler's view of what they find yield scheduler events
one at a time; the caller hands each to the core (and acts on what it decides)
before the generator looks further, so every check sees the state the previous
event left.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Iterable, Iterator

from fleet.control import claimlog, claimsnap, heldends, shard, store
from fleet.core import states as S
from fleet.core.scheduler import Elsewhere, Reclaim, Scheduler, Settled, Start, StepExited
from fleet.core.window import Queue
from fleet.wire import events
from fleet.wire import records
from fleet.wire.events import EventLog

FOLLOW_GAP = 0.1  # seconds: final_here reads the claims log at most this often


class Claims:
    """This fleet's claims, and the steps it waits for while other fleets hold them."""

    def __init__(self, run_dir: Path, fleet_id: str, sched: Scheduler, specs: dict, log_: EventLog, *,
                 stale_after: float, max_attempts: int):
        self.run_dir = run_dir
        self.fleet_id = fleet_id
        self.sched = sched
        self.specs = specs  # step id -> StepSpec, shared with the coordinator
        self.events = log_
        self.stale_after = stale_after
        self.max_attempts = max_attempts
        self.elsewhere: dict[str, tuple[str, float, bool]] = {}  # step -> (holder, since, foreign)
        self.claimed: set[str] = set()  # steps whose per-step claim this fleet holds
        self._done: set[str] = set()  # claimed in a batch, found done since submission
        # False while this fleet holds the run directory's lease alone: steps are
        # claimed then only if earlier fleets left records (fleet.control.recording).
        self.shared = True
        self._next_refresh = 0.0
        self._next_say = 0.0
        self._next_poll = 0.0
        self.log = None  # the claims log (fleet.control.claimlog), set by the recorder
        # The upkeep looks only at steps whose claim state may have changed: new ones
        # (_poll, with those whose holder is not in the log and must be read each time),
        # those a batch read since named (the log's `touched`), and those of a holder found
        # gone. The rest wait, quiet, under their holder (None: another shard's step no
        # fleet claimed yet). `examined` counts the steps looked at.
        self._poll: set[str] = set()
        self._quiet: dict[str | None, set[str]] = {}
        # Steps a gone fleet had started, parked until its own copies must have stopped:
        # fleet -> its steps, looked at again once its deadline passed (one per fleet: gonefence).
        self._fenced: dict[str, set[str]] = {}
        # Another shard's steps found ended there, unsuccessfully or under another
        # definition, before this fleet's submission (held_by_other_shards): step -> why.
        self._before: dict[str, str] = {}
        self._ends: dict[str, tuple[str, float]] = {}  # of those looked at: (the final record's fleet, its time)
        self.examined = 0
        # Since when this fleet is busy (its earliest unfinished submission began; None:
        # idle), said in the claims log when shared (the recorder sets it: Submissions.busy_since).
        self.busy = lambda: None
        self._said_busy: list = []  # [what was said last]
        # Steps that ended here on this allocation's verdict, not their own: unrunnable once
        # it lost nodes, or blocked by such a step (verdict). Their final records say so.
        self.lost_here: set[str] = set()
        self._followed = -1e9  # when final_here last read the log

    def run_dir_of(self, step: str) -> Path:
        """Where a step's records live."""
        return self.run_dir

    def claim(self, d: Start, spec) -> store.Claim:
        """Claim a decided step for this attempt (counting attempts across fleets)."""
        c = store.claim(self.run_dir_of(d.step), spec, self.fleet_id, d.attempt, self.stale_after,
                        max(self.max_attempts, spec.retries + 1) if self.max_attempts else 0,
                        generation=self.sched.generation(d.step), live=self._live())
        if c.kind == store.Claim.OURS:
            self.claimed.add(d.step)
        return c

    def batch(self, d: Start, spec, pending: Iterable) -> store.Claim | None:
        """Shared: take the step, and the other steps decided to start in this loop turn
        (`pending` decisions), in one batch of the claims log; None when it is ours."""
        log = self.log
        # (a step of ours run again whose end was said: named again; its own marker is
        # no "done since" here, store.succeeded noted it)
        if d.step not in log.mine or log.again(d.step):
            steps = [d.step]
            for x, _ in itertools.islice(pending, claimlog.MAX_BATCH):
                if isinstance(x, (Start, Queue)) and x.step in self.specs and x.step not in log.mine:
                    steps.append(x.step)
            steps += self._ahead(len(steps))
            refused = log.claim(steps, self._blocked)
            for s in steps:  # another fleet held it (or an older one may have): done there?
                if s not in refused and (s in log.taken or store.existed(self.run_dir, s)) \
                        and store.done_since(self.run_dir, self.specs[s]):
                    self._done.add(s)
                elif s in log.taken and s not in refused:  # (its allocation's final: removed by a success here)
                    final = records.read_final(self.run_dir, s)
                    if records.of_allocation(final) and final.get("fleet") != self.fleet_id:
                        store.final_seen(self.run_dir, s)
            if d.step in refused:
                c = store.Claim(store.Claim.ELSEWHERE, f"claimed by fleet {refused[d.step]}")
                c.holder = refused[d.step]
                return c
        if d.step in self._done:
            self._done.discard(d.step)
            return store.Claim(store.Claim.DONE)
        return None

    def _ahead(self, have: int) -> list[str]:
        """Ready steps this fleet is likely to start next (about as many as it runs now),
        claimed with the ones it starts: a loop turn starts steps one exit at a time, so
        without them a batch would hold one or two steps. Held ahead, another fleet waits
        for them at most about one step's time; exactly-once does not depend on it."""
        room = min(claimlog.MAX_BATCH, max(claimlog.AHEAD_MIN, self.sched.running_count())) - have
        out: list[str] = []
        log = self.log
        # The scheduler's ready steps by class, each a heap: its front is what starts next
        # (read only; fleet.core.scheduler keeps them).
        # The front of a heap's list is nearly in order (steps enter in suite order):
        # its first few hundred, sorted, hold what starts next, past what others hold.
        for cls in list(self.sched._classes.values()):
            for _, _, sid in sorted(itertools.islice(cls.heap, 16 * room + 256)):
                if len(out) >= room:
                    return out
                if sid not in log.holder and sid in self.specs and self.sched.state(sid) == S.READY:
                    out.append(sid)
        return out

    def _live(self):
        """Whether a fleet is live on the run directory, judged per fleet by the claims log
        (its lease or registration: one look for many steps, never one per step), for
        older fleets' per-step claims: one whose fleet is not is free at once."""
        return self.log.live if self.log is not None else None

    def _blocked(self, step: str) -> str | None:
        """An older fleet's per-step claim, live and fresh, on a step that had records."""
        if not store.existed(self.run_dir, step):
            return None
        cur = records.read_claim(self.run_dir, step)
        if cur is None or cur.rec.get("fleet") == self.fleet_id or records.holder_dead(cur.rec) \
                or records.claim_stale(cur, self.stale_after, self._live()):
            return None
        return str(cur[0].get("fleet"))

    def not_ours(self, d: Start, c: store.Claim, now: float) -> Iterator:
        """The step was decided but its claim says otherwise: hand it back."""
        if c.kind == store.Claim.STOPPED:
            yield StepExited(d.step, d.attempt, S.STOPPED, c.detail)
            return
        holder = getattr(c, "holder", None)
        if holder is None:
            holder = (records.read_claim(self.run_dir_of(d.step), d.step) or ({}, 0))[0].get("fleet", "")
        self.elsewhere[d.step] = (holder, now, False)
        self._poll.add(d.step)
        self.events.write(events.Elsewhere(t=now, step=d.step, attempt=d.attempt, holder=holder,
                                           reason=c.detail or "already succeeded"))
        yield Elsewhere(d.step, d.attempt, c.detail or "already succeeded")
        if c.kind == store.Claim.DONE:
            yield Settled(d.step, S.SUCCEEDED)

    def held_by_other_shards(self, steps: set, now: float, ended: dict | None = None) -> None:
        """Steps another shard runs: waited for through their outcomes, never claimed here.
        `ended`: those of them found ended there without a success of this definition
        when the submission was checked (step -> why): settled so once no other fleet
        is live that might run them again (else their dependents would wait for ever)."""
        for f in steps:
            self.elsewhere[f] = ("another shard", now, True)
        self._poll.update(steps)
        if ended:
            self._before.update((k, v) for k, v in ended.items() if k in steps)
            for k in ended:  # (a final record read at an earlier submission's look: read again)
                self._ends.pop(k, None)

    def ours_now(self, deps: dict, foreign) -> frozenset:
        """Steps held here as another shard's that a later submission to this fleet
        runs itself (the other shard's, submitted here: `deps` its steps, `foreign`
        those it waits for): no longer waited for, for the scheduler to run (Submitted.takes).
        O(the steps held as another shard's), once per submission."""
        mine = [s for s, (_, _, far) in self.elsewhere.items() if far and s in deps and s not in foreign]
        for s in mine:
            del self.elsewhere[s]
            self._before.pop(s, None)
            self._ends.pop(s, None)
        return frozenset(mine)

    def release(self, run_dir: Path, step: str, keep_later: bool = True) -> None:
        """Drop our claim on a step that ended here (kept while a later attempt of ours,
        a changed definition's, holds it: fleet.control.store.release)."""
        if store.release(run_dir, step, self.fleet_id, keep_later):
            self.claimed.discard(step)
            self.ended_here(step)  # (recorded in per-step files: claimed so before sharing)

    def verdict(self, step: str, cause: str | None) -> dict:
        """What the final record of a step that ended here adds when its outcome is this
        allocation's, not the step's (`cause`: the step whose verdict it is, itself or the
        dependency that blocked it, unrunnable after this fleet lost nodes; None: another
        end): {"allocation": true}. Other fleets take such a record as a step this one
        could not run, not as its failure, and run it (heldends.other_run; records.of_allocation);
        before 2026-12-07 they failed it (`unrunnable in fleet ...`) though it never ran."""
        if cause is None or (cause != step and cause not in self.lost_here):
            return {}
        self.lost_here.add(step)
        return {records.OF_ALLOCATION: True}

    def final_mark(self, step: str, cause: str | None) -> dict | None:
        """What the final record of a step that ended here adds (verdict), or None: this
        fleet writes none (one it waits for elsewhere, whose outcome is its holder's to
        record; final_here)."""
        mark = self.verdict(step, cause)
        if step not in self.specs or step in self.elsewhere:
            return None
        return mark if self.final_here(step, bool(mark)) else None

    def final_here(self, step: str, allocation: bool = False) -> bool:
        """May this fleet write the final record of a step that ended here without success?
        Alone, yes. Shared, not when another fleet holds it in the claims log or another
        fleet's success of it is on disk: the step is that fleet's. Nor, with another fleet
        live, for an `allocation` verdict (verdict) on a step this fleet does not hold:
        that fleet may run it. Before 2026-12-07 a fleet that lost its nodes wrote its
        `unrunnable` next to the markers of the steps another fleet had run meanwhile.
        The log is followed first (at most every FOLLOW_GAP s: a blocked suite ends many at once)."""
        log = self.log
        if not self.shared or log is None:
            return True
        now = time.monotonic()
        if now - self._followed >= FOLLOW_GAP:
            self._followed = now
            log.follow()
        holder = log.holder.get(step)
        if holder is not None:
            return holder == self.fleet_id
        if allocation and log.others_live():
            return False
        run_dir = self.run_dir_of(step)
        if not store.existed(run_dir, step):  # (no success of it but one claimed in the log since: no read)
            return True
        rec = records.read_done(run_dir, step)
        return rec is None or rec.get("outcome") != "succeeded" or rec.get("fleet") == self.fleet_id

    def _settled(self, step: str) -> None:
        self._ends.pop(step, None)
        if self.log is not None:
            self.log.ended.discard(step)
            self.log.finals.discard(step)
            self.log.ended_as.pop(step, None)

    def ended_here(self, step: str, tag: str | None = None) -> None:
        """A step ended here, final and recorded: said in the claims log when shared, so
        fleets waiting for it read its marker then (fleet.control.claimlog), with the
        record it ended with (`tag`: ended_tag) where known."""
        if self.shared and self.log is not None:
            self.log.said_ended(step, tag)

    def release_all(self) -> None:
        """Claims of steps that will not finish here (stopped mid-run, or a retry that was
        never launched): released, so other fleets need not wait for them to go stale."""
        for step in list(self.claimed):
            self.release(self.run_dir_of(step), step, keep_later=False)

    def period(self) -> float:
        """How often steps held elsewhere are looked at. Shared, at least every
        claimsnap.FOLLOW_S: the log is followed and this fleet's read position said, so
        that the files other fleets write meanwhile (all a compaction must keep) stay few."""
        return min(self._period(), claimsnap.FOLLOW_S) if self.shared else self._period()

    def _period(self) -> float:
        return min(2.0, max(0.2, self.stale_after / 4))

    def tend(self, now: float) -> Iterator:
        """Keep our claims fresh (a few times per stale_after, not every turn: each is a
        read and a utime per running step), keep the claims log (fleet.control.claimsnap),
        and look at the steps other fleets hold whose state may have changed."""
        if self.claimed and now >= self._next_refresh:
            self._next_refresh = now + max(0.2, self.stale_after / 4)
            for v in self.sched.running():
                if v.id in self.claimed:
                    store.refresh(self.run_dir_of(v.id), v.id, self.fleet_id)
        log = self.log
        if log is not None and log.muted:
            return  # this fleet was found gone: it says nothing more (fleet.control.foundgone)
        if log is not None:
            log.watch = self.elsewhere
            if self.shared:
                self.say_busy()
                if now >= self._next_say:  # (a batch of its own: at most every long period)
                    self._next_say = now + self._period()
                    log.say_ended()
                claimsnap.upkeep(log)  # (follows the log)
            elif self.elsewhere:
                log.follow()
        for step in self._changed(now):
            self.examined += 1
            yield from self._look_at(step, now)

    def say_busy(self) -> None:
        """Say in the claims log since when this fleet is busy, when that changed since it
        was last said (and once the run directory is shared): a batch per change, per turn
        O(this fleet's unfinished submissions). See _live_final."""
        since = self.busy()
        if self.log is not None and self._said_busy != [since]:
            self.log.say_busy(since)
            self._said_busy = [since]

    def _changed(self, now: float) -> list[str]:
        """The waiting steps to look at (see __init__), in a deterministic order; those
        read each time, every long period (the short one only follows the log)."""
        todo = set()
        log = self.log
        if now >= self._next_poll:
            self._next_poll = now + self._period()
            todo, self._poll = self._poll, set()
            if self._before and not (self.shared and log is not None and log.others_live()):
                for s in [s for s in self._before if s not in self.elsewhere]:
                    del self._before[s]
                    self._ends.pop(s, None)
                todo |= self._before.keys()  # (settled now: looked at once)
        if log is not None and log.busy_changed:  # (per change of another fleet's busy_since: O(_before))
            changed, log.busy_changed = log.busy_changed, set()
            todo |= {s for s in self._before if self._ends.get(s, ("",))[0] in changed}
        if log is not None:
            todo |= log.touched
            log.touched = set()
            gone = [f for f in self._quiet if f is not None and not log.live(f)]
            if gone:  # (its last batch, written at its clean end, says which of its steps ended)
                log.follow()
                todo |= log.touched
                log.touched = set()
            for fleet in gone:
                todo |= self._quiet.pop(fleet)
            for fleet in [f for f in self._fenced if log.fences[f][0] <= now]:
                todo |= self._fenced.pop(fleet)
        return sorted(s for s in todo if s in self.elsewhere)

    def _fence(self, step: str, fleet: str | None, now: float) -> bool:
        """Whether a gone fleet's step, which it had started, waits until that fleet's
        own copy must have stopped (fleet.control.gonefence): parked under it then."""
        if self.log is None or self.log.fenced(step, fleet, now) is None:
            return False
        self._fenced.setdefault(fleet, set()).add(step)
        return True

    def _wait(self, step: str, holder: str | None) -> None:
        self._quiet.setdefault(holder, set()).add(step)

    def _unclaimed(self, step: str) -> Iterator:
        """Another shard's step no fleet claimed and none said ended unclaimed: waited
        for, unless found ended there before this fleet's submission and no fleet that
        may run it again is live (_live_final)."""
        log = self.log
        if step not in self._before or (self.shared and log.others_live() and not self._live_final(step)):
            return self._wait(step, None)
        self._settled(step)
        yield Settled(step, S.FAILED, self._before.pop(step))

    def _look_at(self, step: str, now: float) -> Iterator:
        if step not in self.elsewhere:
            return  # settled by what an earlier event of this upkeep led to
        holder, since, foreign = self.elsewhere[step]
        log = self.log
        # A live fleet holds it in the log and has not said it ended: nothing to read.
        # Nor for another shard's step nobody claimed: no fleet runs a step on this run
        # directory unclaimed while another is live (fleet.control.lease); unless a fleet
        # said it ended there unclaimed (blocked: its final record is read), or it was
        # found ended there before this fleet's submission and no other fleet is live.
        batch = log.holder.get(step) if log is not None else None
        if batch is None and foreign and log is not None and step not in log.finals:
            yield from self._unclaimed(step)
            return
        self._before.pop(step, None)  # (another fleet took it since: its outcome decides)
        if batch is not None and batch != self.fleet_id and step not in log.ended and log.live(batch):
            return self._wait(step, batch)
        run_dir = self.run_dir_of(step)
        rec = records.read_done(run_dir, step)
        if batch is not None and not heldends.written(self.log, self.fleet_id, step, batch, rec, run_dir):
            self._poll.add(step)  # said ended with a record not on disk yet: read each period until it is
            return
        if store.done_here(run_dir, self.specs[step], rec):
            store.found(run_dir, step, rec)
            self._settled(step)
            yield Settled(step, S.SUCCEEDED)
            return
        final = records.read_final(run_dir, step)
        # Another fleet's allocation could not run it (verdict): no end of the step's. It
        # runs here (heldends.other_run), and its success here removes that record.
        alloc = records.of_allocation(final) and final.get("fleet") != self.fleet_id
        if alloc and not foreign:
            store.final_seen(run_dir, step)
        why = self._ended_there(step, rec, None if alloc else final, since, batch, foreign)
        if why is not None:
            self._settled(step)
            yield Settled(step, S.FAILED, why)
            return
        if foreign:
            if alloc:  # its shard runs it next time (as one it drained): looked at when named again
                return self._wait(step, None)
            self._poll.add(step)  # (a final said, not written yet: read each period until it is)
            return  # another shard's step: only its outcome settles it
        if batch is not None and batch != self.fleet_id:
            if self.log.live(batch):
                yield from self._held_live(step, batch, rec, final, now)
                return
            yield from self._reclaim(step, f"its holder {batch} is gone", batch, now)
            return
        cur = records.read_claim(run_dir, step)
        if cur is None or records.holder_dead(cur.rec) or records.claim_stale(cur, self.stale_after, self._live()):
            yield from self._reclaim(step, self._freed(cur), holder, now)  # (holder: a gone lease holder's, adopted)
        else:
            self._poll.add(step)  # an older fleet's per-step claim: read each period

    def _ended_there(self, step: str, rec: dict | None, final: dict | None, since: float, batch: str | None,
                     foreign: bool) -> str | None:
        """Why a step another fleet holds ends here unsucceeded, by its records (`rec` its
        marker, not done here; `final` its final record), or None. Another shard's step
        settles on its last outcome, whenever it was recorded (before 2026-12-06 only a
        failure after this fleet's submission did, and a success of another definition
        never: its dependents waited for ever); this suite's on another fleet's final
        record of its definition written since this fleet found it held, or its holder's."""
        if foreign:
            return shard.ended_there(rec, final)
        if final is not None and final.get("fleet") != self.fleet_id and (
                final.get("at", 0) >= since or self._holders(step, batch, final)) and heldends.same(final, self.specs[step]):
            return records.ended_in_fleet(final)
        return None

    def _reclaim(self, step: str, why: str, gone: str | None, now: float) -> Iterator:
        """The step is this fleet's to run (its holder, `gone`, is gone or its claim free),
        once that fleet's own run of it must have stopped (_fence)."""
        if self._fence(step, gone, now):
            return
        self.elsewhere.pop(step, None)
        self.events.write(events.Reclaim(t=now, step=step, reason=why))
        yield Reclaim(step, why)

    def _held_live(self, step: str, holder: str, rec: dict | None, final: dict | None, now: float) -> Iterator:
        """A step a live fleet holds, not done here: read each period until it is said
        ended and its record is on disk; this fleet's to run if that record is of
        another run of it (heldends.other_run), which the claims log then lets it take."""
        other = heldends.other_run(self.log, self.specs[step], holder, rec, final)
        if other is None:
            self._poll.add(step)  # said ended, its marker not read yet
            return
        self.elsewhere.pop(step, None)
        self._settled(step)
        self.log.free.add(step)
        self.events.write(events.Reclaim(t=now, step=step, reason=other))
        yield Reclaim(step, other)

    def _freed(self, cur: records.ClaimLook | None) -> str:
        """Why a per-step claim no longer holds its step (a Reclaim's reason)."""
        if cur is None:
            return "its claim was released"
        by = cur.rec.get("fleet")
        if isinstance(by, str) and by and self.log is not None and not self.log.live(by):
            return f"its claim's fleet {by} is gone (no live lease or registration)"
        return f"its claim by {by} went stale"

    def _live_final(self, step: str) -> bool:
        """Was another shard's step, found ended at this submission, ended in this round:
        by a fleet live now, and busy since no later than it recorded the end (its
        unfinished submissions began before: the claims log's busy_since)? Then the shards
        started together and one failed it before the other looked: waiting for that
        fleet, which may wait for us, never ended (before 2026-12-07). An end recorded
        before the fleet's unfinished submissions began, or while it is idle (a long-lived
        `fleet up`, an earlier round), is waited for: that fleet may run the step again
        (2026-12-07, briefly, such an end settled the step at once). Nothing said: wait.
        One read of the final record, at the step's first look; then looked at again only
        when its writer's busy_since changes."""
        end = self._ends.get(step)
        if end is None:
            final = records.read_final(self.run_dir_of(step), step) or {}
            end = self._ends[step] = (str(final.get("fleet") or ""), float(final.get("at") or 0.0))
        writer, at = end
        if not writer or writer == self.fleet_id or not self.log.live(writer):
            return False
        since = self.log.busy.get(writer)
        return since is not None and at >= since

    def _holders(self, step: str, batch: str | None, final: dict) -> bool:
        """Is the final record its holder's outcome of the step? Yes when the fleet that
        holds it in the log said it ended and wrote the record, whenever (before this
        fleet found it held, too: before 2026-12-07 only a record written after counted,
        so two fleets each waited for ever for a step the other had failed). A record of
        another fleet, older, is not: the holder's success, its marker not written yet."""
        return batch is not None and step in self.log.ended and final.get("fleet") == batch
