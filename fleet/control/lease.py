"""The run directory's lease: one fleet per run directory, the common case, takes no
per-step claim.

A fleet starting on a run directory creates .fleet/lease exclusively (O_EXCL), naming
its fleet id, host and pid and how often it refreshes it (`refresh_s`: REFRESH_S, or
stale_after/4 if that is shorter, but at least 1 s; stale_after/4 before 2026-12-07),
and refreshes its mtime so. While it holds the lease alone it starts steps without
claims (fleet.control.recording).

Another fleet (a second `fleet run`, a shard) that finds the lease held by a live
fleet shares the run directory instead: it registers itself (.fleet/fleets/<fleet>.json,
refreshed like a claim) and waits, before it starts anything, until the lease says
`"shared": true`. The holder looks for registrations every LOOK_S; when it finds a live
one it makes its outcomes durable and writes the markers it owes, claims every step it
is running, and only then rewrites the lease as shared. From then on every fleet on the
run directory claims the steps it starts, in batches (fleet.control.claimlog). A
holder that finds live registrations when it takes the lease is shared from the start.
Registering before reading the lease, and creating the lease before listing the
registrations, make sure that of two fleets starting together at least one sees the
other.

A fleet that waits longer than NOTE_AFTER_S for a holder that does not share (one on
another host that crashed is waited for until it is stale, or until its job ended) says
so: whose lease, when it was refreshed and when it will be taken over, in its
registration (`waiting`: what `fleet up` and `fleet run` tell the user,
fleet.control.client) and in its log.

A fleet refreshes its lease or registration from its loop (keep), and first checks it
still stands there: its lease still names it (another fleet may have taken it over
from it, stale: the holder was only suspended), its registration is still there
(another fleet removes a stale one), and no other fleet found it gone
(fleet.control.foundgone). If not it stops, recording nothing (since 2026-12-07;
before, such a fleet ran on). The holder rewrites or removes its lease only while it is
its own, every take-over kept off meanwhile, and creates it again if it is not there
(fleet.control.leaseown). The lease and registration say `stops_s` too: how long
after this fleet's last sign of life its steps may still run on its nodes, which a
fleet that finds it gone waits before running them (fleet.control.gonefence).

A lease whose holder is provably dead (same host, no such pid), whose holder's batch
job has ended (a holder of another host, in another job of this fleet's Slurm cluster:
fleet.site.jobstate, asked every JOB_LOOK_S while waiting), or that is stale is taken
over. Stale is judged on this fleet's own monotonic clock, never by its clock against
the lease's mtime alone (fleet.wire.sightings: seen unchanged for stale_after, or for
twice the holder's refresh interval and more while its mtime says stale_after; before
2026-12-07 a fleet whose clock was stale_after ahead of the holder's took a live
fleet's lease over at its first look). The taker first creates
.fleet/lease.adopt.<generation>.<holder> exclusively, then reads the lease again and,
finding the same one (holder and generation) still dead or stale, replaces it with
generation + 1, as claims are adopted; then it removes the adoption file. Exactly one
fleet takes each lease: another one that read it can create the file only once it is
removed, so after the lease was replaced, and then finds a lease that is not the one it
read; it removes the file it made and starts over. (The file is named by the holder too
because a lease given back starts again at generation 1: files named by the generation
alone piled up, one a take-over, and the next take-over of a generation-1 lease found
its file taken and waited forever.) A file left behind by a taker (or a holder) that died
in the middle is passed over: the next takers contend for the next name
(fleet.control.leaseown.adopt_file).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import NamedTuple

from fleet.control import foundgone, leaseown, store
from fleet.control.jobwatch import JobWatch
from fleet.control.leaseown import dead as _dead
from fleet.site import jobstate
from fleet.wire import sightings
from fleet.wire.connection import this_cluster, this_job
from fleet.wire.sightings import SEEN



LOOK_S = 1.0  # how often a lease holder looks for fleets that want to share (one listing)
JOB_LOOK_S = 10.0  # how often a waiting fleet asks the batch system whether the holder's job ended
NOTE_AFTER_S = 2 * LOOK_S  # a live holder lets a fleet in within about LOOK_S: longer, and the wait is said
# How often a holder refreshes its lease (and a fleet its registration), at most: one
# utime. Stale is judged by watching it unchanged for a few of these (fleet.wire.sightings).
REFRESH_S = 5.0


def refresh_s(stale_after: float) -> float:
    """How often a fleet with this --stale-after refreshes its lease or registration."""
    return min(REFRESH_S, max(1.0, stale_after / 4))


class Look(NamedTuple):
    """A lease or registration as read: its record, its age by its mtime (this host's clock
    against the one that set it: a hint only), and how long this process has seen it unchanged."""

    rec: dict
    age: float
    unchanged: float

log = logging.getLogger("fleet.control.coordinator")


def waiting_line(wait: dict, run_dir: Path | str, now: float) -> str:
    """One line for the user: the lease a fleet waits for, and when it takes it over
    (`watched`, since 2026-12-07: since when the waiting fleet has seen it unchanged)."""
    watched = "" if wait.get("watched") is None else \
        f"; unchanged for {max(0.0, now - wait['watched']):.0f} s as this fleet watched it"
    return (f"fleet: waiting for the lease on {run_dir}, held by pid {wait.get('pid')} on host {wait.get('host')} "
            f"(last refreshed {max(0.0, now - wait['refreshed']):.0f} s ago by its mtime{watched}): "
            f"this fleet takes it over in "
            f"{max(0.0, wait['takeover_at'] - now):.0f} s unless it is refreshed"
            + (f", or at once when its batch job ({wait['job']}) ends" if wait.get("job") else "")
            + f" (--stale-after {wait['stale_after']:g}; "
            + ("a smaller --stale-after waits less; " if _shorter(wait) else "")
            + "fleet down stops this fleet)")


def _shorter(wait: dict) -> bool:
    """Would a smaller --stale-after take the lease over sooner? Not once the wait is the
    floor (a lease is never stale before twice its holder's refresh interval: `floor`,
    since 2026-12-07): a smaller one than that waits no less, nor does any once the
    lease's mtime already says it is --stale-after old (the take-over then comes at the
    floor; before 2026-12-07 the line suggested it all the same)."""
    floor = wait.get("floor", 0.0)
    if wait.get("watched") is not None:
        return wait["takeover_at"] - wait["watched"] > floor + 0.5
    return wait["stale_after"] > floor


class Lease:
    """This fleet's standing on its run directory: the lease holder (alone, or shared),
    or a fleet sharing a run directory another fleet holds."""

    def __init__(self, run_dir: Path, fleet_id: str, stale_after: float, stops_s: float | None = None):
        self.root = Path(run_dir) / ".fleet"
        self.path = self.root / "lease"
        self.fleets = self.root / "fleets"
        self.fleet_id = fleet_id
        self.stale_after = stale_after
        self.refresh_s = refresh_s(stale_after)
        self.me = {"fleet": fleet_id, "host": socket.gethostname(), "pid": os.getpid(), "refresh_s": self.refresh_s}
        if stops_s is not None:  # (how long its steps may run on after its last sign of life: fleet.control.gonefence)
            self.me["stops_s"] = stops_s
        if this_job():  # (a holder's job that ended frees its lease at once: _job_ended)
            self.me.update(job=this_job(), cluster=this_cluster())
        self._jobs: dict[str, tuple[float, bool | None]] = {}  # job -> (asked at, ended): waiting, before the loop
        self.jobwatch = JobWatch()  # the same, asked from the loop: registrations, a sharing holder (claimlog)
        self.holder = False      # this fleet holds the lease
        self.shared = False      # every fleet claims each step
        self.took_from: dict | None = None  # the lease of a dead or stale holder taken over
        # Fleets found gone without giving back their lease or registration (dead, stale,
        # their job ended): they died, and what their journals say ran, died with them
        # (fleet.control.recording counts it lost). A fleet that ended gave them back.
        self.died: dict[str, dict] = {}  # fleet -> its lease or registration, "refreshed": about when it died
        self.generation = 1
        self._next_look = 0.0
        self._next_refresh = 0.0
        self._refreshed = time.monotonic()  # when this fleet last refreshed its lease or registration
        self.doubt: float | None = None  # after a hold-up, till the second look: when it last refreshed before it

    # -- taking it ---------------------------------------------------------------------
    def acquire(self, poll_s: float = 0.05) -> None:
        """Hold the lease, or share the run directory with its live holder (waiting for
        it to say so: about LOOK_S, longer only while its loop is held up)."""
        store.makedirs(self.root)
        since, noted = time.monotonic(), None
        while True:
            if self._create(1):
                break
            cur = self._read()
            if cur is None:
                continue  # released a moment ago: try again
            rec = cur.rec
            if self._takeable(cur):
                if self._take_over(cur):
                    break
            elif rec.get("shared") and self._registered():
                if noted is not None:  # waiting no more
                    store._replace(self._reg_path(), {**self.me, "at": time.time()})
                self.shared = True
                break
            elif rec:
                self._register()
                if time.monotonic() - since >= NOTE_AFTER_S:
                    noted = self._note(cur, noted)
                self._touch(time.monotonic())  # (keeps the registration fresh while it waits)
            time.sleep(poll_s)
        self._refreshed = time.monotonic()
        self._next_refresh = self._refreshed + self.refresh_s

    def _note(self, cur: Look, noted: float | None) -> float:
        """Say, in the registration and the log, whose lease this fleet waits for and
        when it takes it over (again when that changes: the holder refreshed it); when
        its mtime says it was refreshed, and since when this fleet saw it unchanged."""
        rec, now = cur.rec, time.time()
        takeover_at = now + sightings.stale_in(cur.unchanged, cur.age, self.stale_after, self._refresh_of(rec))
        if noted is not None and abs(takeover_at - noted) < 1.0:
            return noted
        wait = {"fleet": rec.get("fleet"), "host": rec.get("host"), "pid": rec.get("pid"), "refreshed": now - cur.age,
                "watched": now - cur.unchanged, "takeover_at": takeover_at, "stale_after": self.stale_after,
                "floor": sightings.confirm_s(self._refresh_of(rec)),
                "job": rec.get("job") if self._asks_job(rec) else None}
        store._replace(self._reg_path(), {**self.me, "at": now, "waiting": wait})
        log.warning("%s", waiting_line(wait, self.root.parent, now))
        return takeover_at

    def _refresh_of(self, rec: dict) -> float:
        """How often the record's writer refreshes it. An older fleet's record does not
        say (it refreshed every stale_after/4): taken as ours (REFRESH_S), so one whose
        mtime says --stale-after is taken over after a short watch, as a newer fleet's is
        (before, 2 x stale_after/4 + 2 s: five minutes of the allocation, by default, to
        resume a run directory an older fleet died on). What this gives up: an older
        fleet still alive on a host whose clock is --stale-after behind this one's is
        taken over (docs/operations.md, upgrading)."""
        return sightings.refresh_of(rec, self.refresh_s)

    def _stale(self, cur: Look) -> bool:
        """Seen unchanged long enough on this fleet's own clock (fleet.wire.sightings)."""
        return sightings.stale(cur.unchanged, cur.age, self.stale_after, self._refresh_of(cur.rec))

    def _takeable(self, cur: Look) -> bool:
        """The lease's holder is provably dead (here, its pid; elsewhere, its batch job
        ended), or the lease is stale (an empty lease seen for seconds: its holder died
        while writing it)."""
        rec = cur.rec
        return (not rec and cur.unchanged > 5.0) or bool(rec and (_dead(rec, self.root.parent) or self._stale(cur)
                                                                  or self._job_ended(rec)))

    @staticmethod
    def _asks_job(rec: dict) -> bool:
        """Whether the holder's batch job can tell if it is gone (fleet.site.jobstate.tells)."""
        return jobstate.tells(rec.get("host"), rec.get("job"), rec.get("cluster"))

    def _job_ended(self, rec: dict) -> bool:
        """The holder's batch job has ended (fleet.site.jobstate), asked at most every JOB_LOOK_S."""
        if not self._asks_job(rec):
            return False
        job, now = rec["job"], time.monotonic()
        at, said = self._jobs.get(job, (-JOB_LOOK_S, None))
        if now - at >= JOB_LOOK_S:
            said = jobstate.ended(job)
            self._jobs[job] = (now, said)
        return said is True

    def _take_over(self, look: Look) -> bool:
        """Take over the dead or stale lease as looked at: True if this fleet now holds
        it, False if another fleet takes it or took it (see the module's docstring)."""
        rec, age = look.rec, look.age
        gen = int(rec.get("generation", 1))
        adopt = leaseown.adopt_file(self, rec, gen)
        dead = _dead(rec, self.root.parent)
        ended = not dead and not self._stale(look) and self._job_ended(rec)
        if not store._write_new(adopt, {**self.me, "at": time.time(), "from": rec, "stale_s": age,
                                        "unchanged_s": look.unchanged, "dead": dead}):
            return False
        try:
            cur = self._read()
            if cur is None or not self._takeable(cur) or \
                    (cur.rec.get("fleet"), cur.rec.get("generation")) != (rec.get("fleet"), rec.get("generation")):
                return False
            # (before the lease changes hands: the holder, if only held up, learns why it lost it)
            foundgone.mark(self.root.parent, str(rec.get("fleet")), self.fleet_id,
                           {**rec, "refreshed": _refreshed(look)}, _why(rec, look, self))
            store._replace(self.path, {**self.me, "at": time.time(), "generation": gen + 1, "shared": False})
        finally:
            adopt.unlink(missing_ok=True)
        log.info("took over the run directory's lease (generation %d) of fleet %s, pid %s on host %s: %s", gen,
                 rec.get("fleet"), rec.get("pid"), rec.get("host"),
                 "its holder is gone" if dead else f"its batch job ({rec.get('job')}) has ended" if ended
                 else f"unchanged for {look.unchanged:.0f} s as this fleet watched it (last refreshed {age:.0f} s "
                      f"ago by its mtime)")
        self.took_from = {**rec, "refreshed": _refreshed(look)}  # (about when its holder died)
        self.died[str(rec.get("fleet"))] = self.took_from
        self._held(gen + 1)
        return True

    def _create(self, gen: int) -> bool:
        if not store._write_new(self.path, {**self.me, "at": time.time(), "generation": gen, "shared": False}):
            return False
        self._held(gen)
        return True

    def _held(self, gen: int) -> None:
        self.holder, self.generation = True, gen
        self._unregister()
        if self.others():
            self.share()

    def _read(self) -> Look | None:
        """The lease as looked at now (its record {} while it is being written)."""
        try:
            with open(self.path) as f:
                st = os.fstat(f.fileno())
                text = f.read()
        except OSError:
            SEEN.forget(self.path)
            return None
        try:
            rec = json.loads(text)
        except ValueError:
            rec = {}
        return Look(rec if isinstance(rec, dict) else {}, time.time() - st.st_mtime, SEEN.unchanged_for(self.path, st))

    # -- sharing ---------------------------------------------------------------------------
    def _reg_path(self) -> Path:
        return self.fleets / f"{self.fleet_id}.json"

    def _registered(self) -> bool:
        return self._reg_path().exists()

    def _register(self) -> None:
        if not self._registered():
            store.makedirs(self.fleets)
            store._replace(self._reg_path(), {**self.me, "at": time.time()})

    def _unregister(self) -> None:
        try:
            self._reg_path().unlink()
        except FileNotFoundError:
            pass

    def others(self) -> list[str]:
        """Live fleets registered to share the run directory (dead or stale ones removed)."""
        try:
            names = os.listdir(self.fleets)
        except OSError:
            return []
        live = []
        for name in names:
            p = self.fleets / name
            if not name.endswith(".json") or name == self._reg_path().name:
                continue
            try:
                with open(p) as f:
                    st = os.fstat(f.fileno())
                    rec = json.loads(f.read())
                cur = Look(rec, time.time() - st.st_mtime, SEEN.unchanged_for(p, st))
            except (OSError, ValueError):
                continue  # being written (or gone)
            if not isinstance(rec, dict):
                continue
            if _dead(rec, self.root.parent) or self._stale(cur) or self.jobwatch.of(rec):
                self.died[str(rec.get("fleet"))] = {**rec, "refreshed": _refreshed(cur), "why": _why(rec, cur, self)}
                SEEN.forget(p)
                try:
                    p.unlink()
                except OSError:
                    pass
            else:
                live.append(str(rec.get("fleet")))
        return live

    def share(self) -> str | None:
        """Say the run directory is shared (the holder, once it claimed what it runs), only
        while the lease is still its own (_restate): None, or the fleet that holds or is
        taking it now ("": not known), and then this fleet has lost it. (Before 2026-12-07
        a holder resumed from a hold-up rewrote, unread, a lease another fleet had taken
        over meanwhile, naming itself again: the taker ran on with a lease that named the
        gone fleet, which then removed it as its own.)"""
        taker = leaseown.restate(self, True)
        if taker is None:
            self.shared = True
        return taker

    def holder_id(self) -> str | None:
        """The fleet holding the lease now, if any."""
        cur = self._read()
        return cur.rec.get("fleet") if cur else None

    # -- while running ----------------------------------------------------------------------
    def keep(self, now: float) -> str | None:
        """Refresh the lease or the registration when due (every refresh_s), having first
        made sure this fleet still stands on the run directory: no other fleet found it
        gone (fleet.control.foundgone), its lease still names it (a holder whose lease is
        not there creates it again), or its registration is still there (the utime's
        ENOENT). Returns why it no longer stands (then nothing is refreshed), or None.
        Three calls per refresh, nothing per step.

        After a refresh gap long enough for another fleet to have found it stale (a hold-up:
        sightings.confirm_s) the holder writes its lease again with every take-over kept
        off (_restate: a fleet that read it stale then finds it changed, or has taken it),
        and either one looks again DOUBT_S later (`doubt`: the gap's start, until then; its
        coordinator starts, shares and records nothing meanwhile: Recorder.stand). The gap
        said is the one since the last refresh before the hold-up."""
        if now < self._next_refresh:
            return None
        since = self._refreshed if self.doubt is None else self.doubt
        held_up = now - self._refreshed >= sightings.confirm_s(self.refresh_s)
        why = foundgone.lost(self, now - since)
        if why is None:
            why = self._refresh(now - since, held_up)
        if why is not None:
            return why
        self._refreshed = now
        self.doubt = since if held_up else None
        self._next_refresh = now + (min(self.refresh_s, foundgone.DOUBT_S) if held_up else self.refresh_s)
        return None

    def stand(self, now: float) -> str | None:
        """keep(), and after a hold-up its second look too, DOUBT_S on, waited for here: the
        coordinator's loop turn, and every start, share and record of it, waits with it
        (fleet.control.recording.Recorder.stand). Why this fleet no longer stands, or None."""
        while (why := self.keep(now)) is None and self.doubt is not None:
            time.sleep(max(0.0, self._next_refresh - time.monotonic()))
            now = time.monotonic()
        return why

    def _refresh(self, gap: float, held_up: bool) -> str | None:
        """One refresh: a utime of the lease or the registration; the lease written again
        (_restate) after a hold-up or when it is not there. Why this fleet no longer
        stands, or None (also when it cannot tell now: looked at again at the next one)."""
        try:
            if not (self.holder and held_up):
                try:
                    os.utime(self.path if self.holder else self._reg_path())
                    return None
                except FileNotFoundError:
                    if not self.holder:
                        return foundgone.removed(self, gap)
            taker = leaseown.restate(self, self.shared)
        except OSError:
            return None
        return None if taker is None else foundgone.taken(self, taker, gap)

    def _touch(self, now: float) -> None:
        """Refresh the lease or the registration's mtime (one utime), if due."""
        if now >= self._next_refresh:
            self._next_refresh = now + self.refresh_s
            try:
                os.utime(self.path if self.holder else self._reg_path())
            except OSError:
                pass

    def wants_sharing(self, now: float) -> bool:
        """True (the holder, alone) when a live fleet registered to share; looked at
        every LOOK_S (the lease is refreshed by keep())."""
        if not self.holder or self.shared or now < self._next_look:
            return False
        self._next_look = now + LOOK_S
        return bool(self.others())

    def release(self) -> None:
        """Give the lease back (if it is still ours) and the registration."""
        self._unregister()
        if self.holder:
            leaseown.remove(self)


def give_back(run_dir: Path, fleet_id: str) -> None:
    """Fleet `fleet_id`'s lease and registration in run_dir given back, if they are still
    its: for a coordinator that failed to start after taking them, its Lease lost with the
    object that failed (fleet.control.coordinator_cli; before 2026-12-07 left behind)."""
    lease = Lease(run_dir, fleet_id, stale_after=600.0)
    lease.holder = True  # (release() removes the lease only if it names this fleet)
    lease.release()


def _why(rec: dict, cur: Look, lease: Lease) -> str:
    """Why a lease or registration's fleet is found gone, in words (fleet.control.foundgone)."""
    if _dead(rec, lease.root.parent):
        return "its process is gone"
    if lease._stale(cur):
        return f"unchanged for {cur.unchanged:.0f} s as fleet {lease.fleet_id} watched it"
    return "its batch job ended"


def _refreshed(cur: Look) -> float:
    """About when a lease or registration found gone was last refreshed, on this host's
    clock: by its mtime, but never later than this fleet last saw it change."""
    now = time.time()
    return now - max(cur.age, cur.unchanged)
