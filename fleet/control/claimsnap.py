"""Compacting the claims log (fleet.control.claimlog): a bounded number of files in
.fleet/claims however long a run directory stays shared.

The log gets one numbered file per claim turn; left alone, hours of sharing at
thousands of steps per second leave hundreds of thousands of files in one directory
(slow to list on a parallel filesystem) and every fleet that starts reads them all.
So, once COMPACT_FILES files were written since the last snapshot, a fleet (in its
claims upkeep, once per period) writes a snapshot of what the log says, who holds
each step and which of them their holder said ended, as the log's next number:

1. the snapshot is written aside (a temporary file) and fsync'd;
2. it is linked in place as number N, like any batch: exactly one fleet writes each
   number, and it wrote N having read everything before N, so the snapshot holds
   exactly what files 0..N-1 say (a fleet that loses the race reads the winner's and
   does not compact); the directory is fsync'd;
3. then the files before N are removed, lowest first, but only those every live
   fleet has read past: each fleet says where it reads (.fleet/claims/read.<fleet>,
   when it read a quarter of COMPACT_FILES more, which it looks for every FOLLOW_S
   while shared, and every SAY_S when it moved at all), and a live fleet that has not
   said so yet holds every file. The log therefore holds about 1.25 x COMPACT_FILES
   files plus what the fleets write in FOLLOW_S (more only while a fleet's loop is held
   up), whatever the length of the run.

Why this keeps exactly-once: a fleet writes number n only after failing to open n, and
n is never removed under a live fleet that has not read past it, so a number is never
written twice. A fleet that starts (or finds a file it listed gone: it started while a
compaction removed files) lists the log and reads from its lowest file; files go
lowest first and only after their snapshot is in place, so either it starts at 0 or a
snapshot lies ahead, which it loads (a fleet reading in order skips a snapshot: it
read what the snapshot holds). A kill -9 at any stage leaves the log readable: the
temporary file (removed by a later compaction), the snapshot with the files it holds
(both read the same), or some of them removed.

Cost: one snapshot every COMPACT_FILES claim turns (one write of the whole state: in a
coordinator by a thread, fleet.control.snapwriter, the loop only copying its two tables
and linking nothing; a few hundred ms of that thread at a million steps), one
failed open every FOLLOW_S and a small write of the position at most every SAY_S or
quarter of COMPACT_FILES, per fleet, and nothing per step.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import time

from fleet.control import snapwriter
from fleet.wire import ownfiles

_log = logging.getLogger("fleet.control.claimsnap")
COMPACT_FILES = 512  # files written since the last snapshot before a fleet compacts
FOLLOW_S = 0.25      # a fleet on a shared run directory follows the log this often
SAY_S = 2.0          # and says where it reads at least this often when it moved (else every quarter COMPACT_FILES)
READ = "read."       # .fleet/claims/read.<fleet>: where the fleet reads (its next number)
# Test hooks (docs/operations.md): kill this process with SIGKILL at a stage of a
# compaction ("written": the snapshot written aside; "linked": in place, nothing
# removed; "removed": one file removed), and a smaller compaction threshold.
FAULT_ENV = "FLEET_TEST_CLAIMS_COMPACT_FAULT"
FILES_ENV = "FLEET_TEST_CLAIMS_COMPACT_FILES"


def compact_files() -> int:
    return int(os.environ.get(FILES_ENV) or COMPACT_FILES)


def _fault(stage: str) -> None:
    if os.environ.get(FAULT_ENV) == stage:
        os.kill(os.getpid(), signal.SIGKILL)


def load(log, data: dict, head: dict | None = None) -> None:
    """A fleet that did not read the log from its start meets a snapshot: what it read
    before is replaced by what the snapshot holds (`head`, its first line: each fleet's
    busy_since, fleet.control.claimlog; none in a snapshot of a version before 2026-12-07)."""
    holder: dict[str, str] = {}
    for who, steps in (data.get("holders") or {}).items():
        for s in steps:
            holder[s] = who
    said: dict[str, None] = {}  # (a set, as ClaimLog.said)
    for who, steps in (data.get("ended") or {}).items():
        said.update((s, None) for s in steps if holder.get(s) == who)
    log.holder, log.said, log.complete = holder, said, True
    log.mine = {s for s, who in holder.items() if who == log.fleet_id}
    log.ended = {s for s in said if holder[s] != log.fleet_id}
    log.touched.update(s for s in log.watch if s in holder)
    log.busy = dict((head or {}).get("busy") or {})
    log.busy_changed.update(f for f in log.busy if f != log.fleet_id)


def _state(log) -> bytes:
    """What the log says now, by fleet: holders and the steps said ended."""
    holders: dict[str, list] = {}
    ended: dict[str, list] = {}
    for s, who in log.holder.items():
        holders.setdefault(who, []).append(s)
        if s in log.said:
            ended.setdefault(who, []).append(s)
    return json.dumps({"holders": holders, "ended": ended}, separators=(",", ":")).encode()


def say_position(log) -> None:
    """Say where this fleet reads (a file of its own, written in place when it moved)."""
    if log.next == log.position or log.next <= 0:
        return  # (an empty log: nothing to remove under this fleet yet)
    from fleet.control import store
    store.makedirs(log.root)
    fd = os.open(log.root / f"{READ}{log.fleet_id}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, ownfiles.MODE)
    try:
        os.write(fd, str(log.next).encode())
    finally:
        os.close(fd)
    log.position, log.said_at = log.next, time.monotonic()


def positions(log) -> dict[str, int]:
    """fleet -> the position it said (a file being written reads as none)."""
    out: dict[str, int] = {}
    try:
        names = [n for n in os.listdir(log.root) if n.startswith(READ)]
    except FileNotFoundError:
        return out
    for n in names:
        try:
            with open(log.root / n) as f:
                out[n[len(READ):]] = int(f.read())
        except (OSError, ValueError):
            continue
    return out


def upkeep(log) -> bool:
    """Once per claims period on a shared run directory: follow the log, say where this
    fleet reads, and compact when due. True when this fleet wrote a snapshot. A failing
    filesystem is logged, not raised: the log stays readable at every step of it."""
    try:
        return _upkeep(log)
    except OSError as e:
        _log.error("could not keep the claims log %s: %s", log.root, e)
        return False


def _upkeep(log) -> bool:
    wrote = settle(log)
    log.follow()  # (says the position when it moved by a quarter of COMPACT_FILES)
    if time.monotonic() - log.said_at >= SAY_S:
        say_position(log)
    if log.pending is not None or log.next - log.snap_at < compact_files():
        return wrote  # (one snapshot at a time: the last one's thread is still at work)
    log._look(time.monotonic())
    others = {f for f in log._live if f != log.fleet_id}
    pos = positions(log)
    if others - set(pos):
        return wrote  # a live fleet has not said where it reads: it may read anything
    if log.snap_async:  # written, linked and the files before removed by a thread
        log.pending = snapwriter.Pending(log, min([log.next, *(pos[f] for f in others)]), others)
        return wrote
    if not _snapshot(log):
        return False
    bound = min([log.snap_at, *(pos[f] for f in others)])
    _remove(log, bound, others)
    return True


def settle(log, wait: bool = False) -> bool:
    """Take in what the snapshot thread decided (fleet.control.snapwriter): True once,
    when its snapshot was linked. `wait`: until it is decided."""
    p = log.pending
    if p is None:
        return False
    if wait:
        p.decided.wait()
    if not p.decided.is_set():
        return False
    wrote = p.linked and not p.counted
    if wrote:  # (the loop may have read it already: it is then where the log's reading is)
        log.snap_at = max(log.snap_at, p.at)
        log.next = max(log.next, p.at + 1)
        log.snapshots += 1
    p.counted = True
    if p.done():
        log.pending = None  # (its removals done too: the next snapshot may start)
    return wrote


def _head(log) -> bytes:
    return json.dumps({"fleet": log.fleet_id, "host": socket.gethostname(), "pid": os.getpid(), "at": time.time(),
                       "snapshot": True, "steps": [], "of": log.next, "busy": log.busy}).encode() + b"\n"


def _snapshot(log) -> bool:
    """Write the snapshot as the log's next number (see the module's docstring)."""
    tmp = log.root / f".{log.fleet_id}.{os.getpid()}.snap.tmp"
    while True:
        with ownfiles.open(tmp, "wb") as f:
            f.write(_head(log) + _state(log))
            f.flush()
            os.fsync(f.fileno())
        _fault("written")
        try:
            os.link(tmp, log.root / f"{log.next:09d}.json")
            break
        except FileExistsError:
            log.follow()  # another fleet wrote this number (perhaps its snapshot)
            if log.next - log.snap_at < compact_files():
                os.unlink(tmp)
                return False
    os.unlink(tmp)
    _sync_dir(log.root)
    log.snap_at = log.next
    log.next += 1
    log.snapshots += 1
    _fault("linked")
    return True


def _remove(log, bound: int, live: set) -> None:
    """Remove the numbered files below `bound`, lowest first; and what fleets no longer
    live left (their read positions, their temporary files)."""
    try:
        names = os.listdir(log.root)
    except FileNotFoundError:
        return
    nums = sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())
    for n in nums:
        if n >= bound:
            break
        try:
            os.unlink(log.root / f"{n:09d}.json")
        except FileNotFoundError:
            pass
        _fault("removed")
    keep = live | {log.fleet_id}
    for n in names:
        who = n[len(READ):] if n.startswith(READ) else _tmp_owner(n) if n.endswith(".tmp") else None
        if who is not None and who not in keep:
            try:
                os.unlink(log.root / n)
            except FileNotFoundError:
                pass


def _tmp_owner(name: str) -> str:
    """The fleet of a temporary file, .<fleet>.<pid>[.snap].tmp (a fleet id may hold dots)."""
    base = name[1:-4]
    if base.endswith(".snap"):
        base = base[:-5]
    return base.rsplit(".", 1)[0]


def _sync_dir(root) -> None:
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
