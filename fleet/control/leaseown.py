"""A lease holder's own writes of its lease (fleet.control.lease), made only while the
lease is still its own, with every take-over kept off.

A taker replaces a dead or stale lease only after creating, exclusively, the adoption
file named by the lease's generation and holder (lease.adopt.<generation>.<fleet>), and
reading the lease again (fleet.control.lease.Lease._take_over). The holder creates that
same file (`holding`) before it rewrites its lease (to say it is shared, or after a
hold-up: Lease.keep) or removes it (at its end), reads the lease again, and removes the
file once done. So no take-over lands between the holder's read and its write: a taker
that read the lease before finds it changed (a rewrite is a new file: not stale) or
removed, or else it holds the file, and the holder waits for it to go (a take-over holds
it for milliseconds; HOLD_WAIT_S at most) and reads in the lease whether the take-over
landed. (Before 2026-12-07 a holder resumed from a hold-up rewrote, unread, a lease
another fleet had just taken over, naming itself again, then found itself gone and
removed the lease as its own: the taker ran on with no lease, and a third fleet took
the run directory alone, running the same steps.)

A holder whose lease is not there at all (removed by hand; before 2026-12-07, by a gone
fleet) creates it again, exclusively, and says so in coordinator.log: a lease that
another fleet created meanwhile is that fleet's, and this fleet has lost the run
directory.

A file left behind (its writer died, or was frozen, in the middle) must stop neither
side for good: the holder goes on without it after HOLD_WAIT_S (a taker frozen that long
and resumed then replaces the lease as it would have without the file: the fleets' gone
records and fences settle it, fleet.control.foundgone); a taker contends for
lease.adopt.<generation>.<fleet>.1 instead once the file's writer is gone or the taker
has seen it unchanged for LEFT_S on its own clock (adopt_file). Before the evening of
2026-12-07 a taker's file of another host stopped a healthy holder, which then kept its
lease at its end, and a holder of another host killed holding its file kept its takers
waiting for ever.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from fleet.control import identity, store
from fleet.wire import ownfiles
from fleet.wire.records import holder_dead, zombie
from fleet.wire.sightings import SEEN

log = logging.getLogger("fleet.control.coordinator")

HOLD_WAIT_S = 2.0  # how long a holder waits for a taker's adoption file to go (a take-over holds it for ms)
LEFT_S = 10.0  # an adoption file a taker sees unchanged this long, on its own clock, was left behind
MAX_LEFT = 16  # left-behind adoption files of one lease passed over, at most


def dead(rec: dict, run_dir: Path) -> bool:
    """A lease holder or registered fleet provably gone: no such process on this host,
    a zombie (unlike a claim's holder: a coordinator that exited holds nothing), or a
    process that got its pid since (fleet.control.identity: before 2026-12-06 such a
    lease was waited for until --stale-after)."""
    return holder_dead(rec) or zombie(rec) or identity.gone_here(rec, run_dir, rec.get("at"))


def _file(lease, gen: int, fleet) -> Path:
    return lease.root / f"lease.adopt.{gen}.{fleet or 'unnamed'}"


def hold_off(lease) -> Path | None:
    """Keep every take-over of `lease` (this fleet's fleet.control.lease.Lease, its
    holder) off while it writes: the file to remove once done, or None when another
    fleet's file stands there (nothing to remove). A take-over holds its file for a read
    and a write: the holder waits for it to go, at most HOLD_WAIT_S on its own clock, and
    then reads the lease (a take-over that landed: the lease names its taker). A file
    still there after that, or one whose writer is gone, was left by a take-over that did
    not end, and the holder goes on without it (before, it stopped itself, and kept its
    lease at its end); its own file left from an earlier write is its own again."""
    lock = _file(lease, lease.generation, lease.fleet_id)
    deadline = time.monotonic() + HOLD_WAIT_S
    while True:
        made = _make(lock, {**lease.me, "at": time.time(), "holding": True})
        if made is None:
            return None  # (no file can be made there: a full or read-only disk; the lease's own write fails too)
        if made:
            return lock
        try:
            rec = json.loads(lock.read_text())
        except FileNotFoundError:
            continue  # (gone this moment: create it)
        except (OSError, ValueError):
            rec = None  # (being written: a taker's, this moment)
        if isinstance(rec, dict) and rec.get("fleet") == lease.fleet_id:
            return lock  # (its own, left by a write whose unlink failed)
        if isinstance(rec, dict) and rec and dead(rec, lease.root.parent):
            return None
        if time.monotonic() >= deadline:
            who = rec if isinstance(rec, dict) else {}
            log.warning("%s has been there %g s (fleet %s, pid %s on %s): left by a take-over of this fleet's lease "
                        "that did not end; going on without it", lock, HOLD_WAIT_S, who.get("fleet"), who.get("pid"),
                        who.get("host"))
            return None
        time.sleep(0.02)


def _make(lock: Path, rec: dict) -> bool | None:
    """Create the file exclusively: True; False when one is there; None when none can be
    made (ENOSPC, EROFS, EDQUOT: its end, giving back the lease, must not fail on it)."""
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, ownfiles.MODE)
    except FileExistsError:
        return False
    except OSError as e:
        log.warning("cannot create %s (%s): writing the lease without keeping take-overs off", lock, e)
        return None
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(rec, f)
    except OSError as e:  # (made, but not written: its own, removed)
        lock.unlink(missing_ok=True)
        log.warning("cannot write %s (%s): writing the lease without keeping take-overs off", lock, e)
        return None
    return True


def restate(lease, shared: bool) -> str | None:
    """Write the holder's lease again (`shared`), only while it is still its own (at its
    generation), or create it again if it is not there. None, or the fleet that holds or
    is taking it now ("": not known). An OSError: it cannot tell now."""
    lock = hold_off(lease)
    try:
        rec = {**lease.me, "at": time.time(), "generation": lease.generation, "shared": shared}
        try:
            with open(lease.path) as f:
                cur = json.loads(f.read())
        except FileNotFoundError:
            if not store._write_new(lease.path, rec):
                return lease.holder_id() or ""  # (another fleet created one this moment)
            log.warning("this fleet's lease on %s was not there (removed by hand?): created it again, naming this "
                        "fleet (generation %d)", lease.root.parent, lease.generation)
            return None
        except ValueError:
            cur = {}  # (only a lease being created is seen part-written: another fleet's)
        if not isinstance(cur, dict) or (cur.get("fleet"), int(cur.get("generation", 1))) != \
                (lease.fleet_id, lease.generation):
            return str(cur.get("fleet") or "") if isinstance(cur, dict) else ""
        store._replace(lease.path, rec)
        return None
    finally:
        if lock is not None:
            lock.unlink(missing_ok=True)


def remove(lease) -> None:
    """Give the holder's lease back, if it is still its own (a taker between the read and
    the unlink would have lost its new lease); a lease being taken over is left to its taker."""
    lock = hold_off(lease)
    try:
        cur = lease._read()
        if cur is not None and cur.rec.get("fleet") == lease.fleet_id:
            lease.path.unlink(missing_ok=True)
    finally:
        if lock is not None:
            lock.unlink(missing_ok=True)


def adopt_file(lease, rec: dict, gen: int) -> Path:
    """The file a taker of the lease `rec` (generation `gen`) creates first: the one its
    holder creates too (hold_off), unless one left there would keep the lease from ever
    being taken over: written by a process that is gone (a holder or a taker that died
    in the middle; its job ended), or seen unchanged by this fleet for LEFT_S on its own
    clock (a writer of another host, whose pid cannot be looked up here: a write holds it
    for milliseconds). Then the next name, lease.adopt.<generation>.<fleet>.1, .2, ...
    (each judged so), which takers contend for as for the first."""
    base = _file(lease, gen, rec.get("fleet"))
    for n in range(MAX_LEFT + 1):
        adopt = base if n == 0 else base.with_name(f"{base.name}.{n}")
        try:
            st = adopt.stat()
        except OSError:
            return adopt
        try:
            held = json.loads(adopt.read_text())
        except (OSError, ValueError):
            held = None  # (being written, or left empty: watched as any other)
        left = isinstance(held, dict) and (dead(held, lease.root.parent) or lease._job_ended(held))
        if not (left or SEEN.unchanged_for(adopt, st) >= LEFT_S):
            return adopt
    return adopt  # (MAX_LEFT files left behind for one lease: say so by waiting on the last; never seen)
