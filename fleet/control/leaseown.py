"""A lease holder's own writes of its lease (fleet.control.lease), made only while the
lease is still its own, with every take-over kept off.

A taker replaces a dead or stale lease only after creating, exclusively, the adoption
file named by the lease's generation and holder (lease.adopt.<generation>.<fleet>), and
reading the lease again (fleet.control.lease.Lease._take_over). The holder creates that
same file (`holding`) before it rewrites its lease (to say it is shared, or after a
hold-up: Lease.keep) or removes it (at its end), reads the lease again, and removes the
file once done. So no take-over lands between the holder's read and its write: a taker
that read the lease before finds it changed (a rewrite is a new file: not stale) or
removed, or else it holds the file and the holder learns that it is taking the lease
over. (Before 2026-12-07 a holder resumed from a hold-up rewrote, unread, a lease
another fleet had just taken over, naming itself again, then found itself gone and
removed the lease as its own: the taker ran on with no lease, and a third fleet took
the run directory alone, running the same steps.)

A holder whose lease is not there at all (removed by hand; before 2026-12-07, by a gone
fleet) creates it again, exclusively, and says so in coordinator.log: a lease that
another fleet created meanwhile is that fleet's, and this fleet has lost the run
directory.

A holder that dies while it holds the file leaves it behind; its takers then contend for
lease.adopt.<generation>.<fleet>.1 instead (adopt_file). A taker that dies holding the
file leaves it too: that lease can then not be taken over (as before), and its holder
rewrites and removes it without the file (a taker's file of another host, whose pid
cannot be looked up here, once it is LEFT_S old by its mtime: before, the holder read it
as a take-over under way and stopped itself).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from fleet.control import identity, store
from fleet.wire.records import holder_dead, zombie

log = logging.getLogger("fleet.control.coordinator")

LEFT_S = 120.0  # an adoption file older than this (by its mtime) is a dead taker's, left behind


def dead(rec: dict, run_dir: Path) -> bool:
    """A lease holder or registered fleet provably gone: no such process on this host,
    a zombie (unlike a claim's holder: a coordinator that exited holds nothing), or a
    process that got its pid since (fleet.control.identity: before 2026-12-06 such a
    lease was waited for until --stale-after)."""
    return holder_dead(rec) or zombie(rec) or identity.gone_here(rec, run_dir, rec.get("at"))


def _file(lease, gen: int, fleet) -> Path:
    return lease.root / f"lease.adopt.{gen}.{fleet or 'unnamed'}"


def hold_off(lease) -> tuple[bool, Path | None]:
    """Keep every take-over of `lease` (this fleet's fleet.control.lease.Lease, its
    holder) off: (True, the file to remove once done); (True, None) when a taker that
    died left the file (no fleet can take the lease over then: as good as held);
    (False, None) when a taker has it: it is taking the lease over now."""
    lock = _file(lease, lease.generation, lease.fleet_id)
    if store._write_new(lock, {**lease.me, "at": time.time(), "holding": True}):
        return True, lock
    try:
        rec = json.loads(lock.read_text())
        age = time.time() - lock.stat().st_mtime
    except (OSError, ValueError):
        return False, None  # (being written: a taker's, this moment)
    # A take-over holds the file for a read and a write: one left for minutes is a dead
    # taker's, of another host too (whose pid this host cannot look up), by the file's mtime.
    return isinstance(rec, dict) and bool(rec) and (dead(rec, lease.root.parent) or age > LEFT_S), None


def restate(lease, shared: bool) -> str | None:
    """Write the holder's lease again (`shared`), only while it is still its own (at its
    generation), or create it again if it is not there. None, or the fleet that holds or
    is taking it now ("": not known). An OSError: it cannot tell now."""
    ok, lock = hold_off(lease)
    if not ok:
        return ""
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
    ok, lock = hold_off(lease)
    if not ok:
        return
    try:
        cur = lease._read()
        if cur is not None and cur.rec.get("fleet") == lease.fleet_id:
            lease.path.unlink(missing_ok=True)
    finally:
        if lock is not None:
            lock.unlink(missing_ok=True)


def adopt_file(lease, rec: dict, gen: int) -> Path:
    """The file a taker of the lease `rec` (generation `gen`) creates first: the one its
    holder creates too (hold_off), unless a holder that died holding it left it (it would
    keep the lease from ever being taken over; the holder cannot come back)."""
    adopt = _file(lease, gen, rec.get("fleet"))
    try:
        held = json.loads(adopt.read_text())
    except (OSError, ValueError):
        return adopt
    if isinstance(held, dict) and held.get("holding") and held.get("fleet") == rec.get("fleet") \
            and (dead(rec, lease.root.parent) or lease._job_ended(rec)):
        return adopt.with_name(adopt.name + ".1")
    return adopt
