"""A fleet found gone by another fleet on a shared run directory, and what each side does.

A fleet is judged gone by the others when its lease or registration goes unrefreshed
(fleet.control.lease, fleet.wire.sightings), its process is gone, or its batch job
ended; they then replay its journal and run its unfinished steps themselves
(fleet.control.claimlog, fleet.control.claims). A fleet that was only held up (its job
suspended: SIGSTOP of the whole job, or a coordinator held up longer than the others
wait) is not dead: before 2026-12-07, resumed, it ran its steps to their end (twice:
the other fleet ran them too), recorded their outcomes over the other fleet's
(a `lost` or `terminated` final.json, and the other fleet's done.json removed with it)
and, as a lone lease holder whose lease had been taken over, went on starting steps
without claims. Nothing told it, and it never looked.

So:
- The finder leaves a durable record before it takes anything of the gone fleet:
  .fleet/gone/<fleet>.json, created exclusively (the first finder's stays), naming the
  finder, when, and when the gone fleet was last refreshed (mark). A fleet that takes a
  lease over also replaces it (the lease names the taker), and one that finds a stale
  registration removes it.
- Each fleet, at every refresh of its lease or registration (one stat of its gone record;
  a holder's read of its lease and utime, a sharer's utime, whose ENOENT says its
  registration was removed: three calls at most every refresh interval, nothing per
  step), and at the start of every loop turn once a
  refresh is due (so before anything the turn would record after the coordinator was
  held up), checks that its lease still names it, or that its registration is still
  there, and that no gone record names it (lost). If any says otherwise its steps
  belong to the fleets that took them: it stops them at once through its agents, as
  `fleet down` does but with no grace (SIGTERM, then SIGKILL, to each step's process
  group), records no outcome of anything (mute: no journal line, no marker, no
  final.json, no claims batch, no per-step claim released), gives back its lease if the
  lease still names it, and stops, saying why in coordinator.log and in its `fleet_down`
  record, which its `fleet run` prints on stderr.

Only a fleet found gone still holding its lease or a registration is said gone (a
fleet that ended gave them back, and never comes back). What it had started waits, in
the finder, until it must have stopped there (fleet.control.gonefence).

The check is made at the start of a loop turn once a refresh is due, not before each
record: a fleet held up in the middle of a turn finishes that turn before it looks.
After a refresh gap long enough for another fleet to have found it stale
(sightings.confirm_s) it looks again DOUBT_S later, and the loop turn waits for that
second look (fleet.control.lease.Lease.stand: nothing started, shared or recorded
meanwhile): a finder that looked just before this fleet's refresh writes its record a
moment after this fleet's check. A holder also writes its lease again then, and only
while the lease is its own with every take-over kept off (fleet.control.leaseown).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from fleet.control import store

log = logging.getLogger("fleet.control.coordinator")

GONE = Path(".fleet") / "gone"  # under the run directory: <fleet>.json, one per fleet found gone
DOUBT_S = 0.5  # after a long refresh gap, how soon a fleet looks again at whether it was found gone


def path_of(run_dir: Path | str, fleet: str) -> Path:
    return Path(run_dir) / GONE / f"{fleet}.json"


def mark(run_dir: Path | str, fleet: str, by: str, died: dict | None, why: str = "") -> None:
    """Say, durably, that `by` found `fleet` gone (`died`: its lease or registration as
    last seen, with `refreshed`: about when it last refreshed it, on this host's clock).
    The first finder's record stays. Made before anything of the gone fleet is taken."""
    if not fleet or fleet == "None":
        return
    died = died or {}
    rec = {"fleet": fleet, "by": by, "at": time.time(), "refreshed": died.get("refreshed"),
           "host": died.get("host"), "pid": died.get("pid"), "why": why or died.get("why") or ""}
    try:
        store.makedirs(Path(run_dir) / GONE)
        store._write_new(path_of(run_dir, fleet), rec)
    except OSError as e:  # (the gone fleet then learns it from its lease or registration, if at all)
        log.error("cannot record that fleet %s is gone in %s: %s", fleet, Path(run_dir) / GONE, e)


def read(run_dir: Path | str, fleet: str) -> dict | None:
    """The record that `fleet` was found gone (one stat when there is none), or None.

    The record's being there says it (the finder creates it exclusively): one that cannot
    be read or parsed (being written, damaged, or no file descriptor free to open it) is
    found gone all the same. Only a stat that fails other than by the file's absence (the
    file server's moment) says nothing: looked at again at the next refresh. Before
    2026-12-07 (evening) the record was opened first, and a fleet out of file descriptors
    (EMFILE: a job of ~1,000 nodes under a soft limit of 1,024) took that open's failure
    for being found gone, stopped its steps and recorded nothing."""
    path = path_of(run_dir, fleet)
    try:
        os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("cannot tell whether this fleet was found gone (%s: %s); looking again at the next refresh",
                    path, e)
        return None
    try:
        with open(path) as f:
            rec = json.loads(f.read() or "{}")
    except FileNotFoundError:  # (removed by hand since: no record)
        return None
    except (OSError, ValueError):
        return {}  # there, but being written, damaged or not openable now: found gone all the same
    return rec if isinstance(rec, dict) else {}


def _clock(t) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) if isinstance(t, (int, float)) else "?"


def _held(lease, gap: float) -> str:
    # The gap is named only when it was longer than a refresh's (a gap of one interval is no sign).
    return (f"(this fleet had not refreshed its lease or registration for {gap:.0f} s: was its job suspended, or "
            f"its coordinator held up?)") if gap > 1.5 * lease.refresh_s else \
        "(though it refreshed its lease or registration on time)"


THEN = "its steps run there; it stops them, recording no outcome of theirs"


def lost(lease, gap: float) -> str | None:
    """Why this fleet (`lease`: its fleet.control.lease.Lease) no longer stands on its run
    directory, as far as a gone record or its lease says, or None: a gone record names it,
    or its lease names another fleet (one read). `gap`: seconds since it last refreshed
    them before now (or before its hold-up). Its registration's removal and its lease's
    absence are told by the refresh's utime (Lease.keep)."""
    rec = read(lease.root.parent, lease.fleet_id)
    if rec is not None:
        return (f"this fleet was found gone by fleet {rec.get('by') or '?'} at {_clock(rec.get('at'))} "
                f"{_held(lease, gap)}: {THEN}")
    if lease.holder:
        cur = lease._read()
        # Only a lease that names another fleet says so: one that could not be read (a
        # file server's moment, a write under way) is looked at again at the next refresh.
        taker = cur.rec.get("fleet") if cur is not None and cur.rec else None
        if taker is not None and taker != lease.fleet_id:
            return taken(lease, taker, gap)
    return None


def taken(lease, taker: str | None, gap: float | None) -> str:
    """Why: another fleet (`taker`; "" or None: not known) took over, or is taking over,
    this fleet's lease."""
    by = f"fleet {taker} took it over" if taker else "another fleet is taking it over"
    held = _held(lease, gap) if gap is not None else "(found as this fleet was to share it)"
    return f"this fleet's lease on {lease.root.parent} is no longer its own: {by} {held}; {THEN}"


def removed(lease, gap: float) -> str:
    """Why: another fleet found this fleet's registration stale and removed it."""
    return (f"this fleet's registration on {lease.root.parent} was removed by another fleet, which found it "
            f"stale {_held(lease, gap)}; {THEN}")


# -- the fleet found gone: nothing more recorded, and it stops ----------------------------------
class Silent:
    """The journal of a fleet found gone (fleet.control.journal.Journal's calls): every
    line and every file it would owe is dropped; nothing of it is ever durable (so a
    client waiting for a submission hears that its fleet went down, and why)."""

    path = None
    bytes = 0

    def append(self, line: dict) -> None:
        pass

    def start(self, *args) -> None:
        pass

    def done(self, *args) -> None:
        pass

    def owe(self, *args) -> None:
        pass

    def turn(self, now: float) -> None:
        pass

    def sync(self, now: float | None = None) -> None:
        pass

    def settle(self, now: float) -> int:
        return 1

    def settled(self, mark: int) -> bool:
        return False

    def handed(self):
        return None

    def finish(self, seal: bool) -> bool:
        return False

    def close(self, seal: bool = True) -> bool:
        return False


def mute(rec, why: str) -> None:
    """This fleet (its fleet.control.recording.Recorder, `rec`) no longer stands on its run
    directory (`why`: lost's): from now on it records nothing (its journal's buffered
    lines and owed files, the markers queued, the claims log: dropped), and it stops
    (its coordinator's teardown stops its steps at once: shutdown_grace)."""
    rec.gone_why = why
    log.error("%s", why)
    rec.journal.drop()
    rec.journal = Silent()
    for j, _ in rec.sealing:  # rotated segments: left unsealed (the fleet that found it gone replays them)
        j.finish(seal=False)
    rec.sealing = []
    if rec.writer is not None:
        rec.writer.discard()
    rec.log.muted = True
    rec.claims.claimed.clear()  # (no per-step record either, nor a claim released: they are not its own now)
    rec.coord.stopping = True


def close(rec) -> None:
    """The teardown of a fleet found gone: its threads ended, nothing written, its lease
    (if it still names it) and registration given back."""
    try:
        if rec.log.pending is not None:
            rec.log.pending.thread.join()
        if rec.writer is not None:
            rec.writer.close(0)
        if rec.syncer is not None:
            rec.syncer.close()
    finally:
        rec.lease.release()


def down_why(rec) -> str | None:
    """Its fleet_down record's reason (`fleet run` prints it), if it was found gone."""
    return None if rec.gone_why is None else f"{rec.gone_why}; the fleet stopped itself"
