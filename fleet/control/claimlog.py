"""Claims in batches on a shared run directory: one file per loop turn, not per step.

When several fleets (or shards) share a run directory (fleet.control.lease), every
step must still start in exactly one of them. Instead of one claim file per step
(created, read back, refreshed and removed: ~7 metadata operations each), the fleets
append to one log, .fleet/claims/<seq>.json, numbered 0, 1, 2 ... Each file is one
batch: a fleet and the steps it takes (the steps its scheduler decided to start in one
loop turn). A file is put in place whole with link(2), which fails if that number
exists, so exactly one fleet writes each number, and a fleet writes number n only
after reading every file before it. Reading the log in order therefore gives every
fleet the same answer to "who holds step X": the fleet of the last batch naming X. A
batch names X only if, after everything before it, X was free, already the writer's,
or held by a fleet that is gone.

A fleet is live while it holds the lease or its registration (.fleet/fleets/) is
fresh (refreshed every few seconds, judged stale on the reader's own clock:
fleet.control.lease): liveness is per fleet,
not per step, so nothing is refreshed per step. A fleet judged gone (provably dead on
this host, stale, ended, or of another host in a batch job that has ended:
fleet.control.jobwatch) holds nothing: before any of its steps is taken, its
journal is replayed (the markers it owed are written; fleet.control.journal), so a
step it finished is found done and never runs again, and one it had not finished
runs again once, in whichever fleet names it first: a step it had started, only once
its own run of it must have stopped (fences: fleet.control.gonefence). Before anything
of it is taken, a fleet that died holding its lease or a registration is said gone on
disk, so that one only suspended learns it and stops (fleet.control.foundgone).

Per claim turn: one temporary file written, linked and removed, plus one open per
batch another fleet wrote since. Per step claimed, nothing, except a marker check for
a step another fleet held before (it may have finished there).

A batch also says which steps the writer held have ended there (`ended`: their
outcome is final and recorded), so a fleet waiting for steps another live fleet holds
reads nothing per step while they run: it follows the log once per period and reads
the marker (or final record) of a step only once the log says it ended, or once its
holder is gone. A fleet with ended steps to say and no claim to write puts them in a
batch of their own, at most once per period, and at its clean end (so that a fleet
that finds it gone takes its outcomes, not its steps). A step that ended here without
being claimed (blocked, unrunnable: it never started) is said too (`final`), claiming
nothing: a shard waiting for it as another shard's step reads its final record then
(before 2026-12-07 nothing said it, and such a shard waited for ever).

A batch may also say since when its writer is busy (`busy_since`: when its earliest
unfinished submission began, null when it has none): said in the first batch a fleet
writes once the run directory is shared and then whenever it changes (per fleet per
transition, never per step), so that a shard that finds another shard's step failed
before it came can tell that round's failure (its writer busy since before it) from an
earlier round's, which a live fleet may run again (fleet.control.claims).

The log is cleared by a fleet that takes the lease with nobody else on the run
directory (nobody reads it then). Within a shared period it is compacted
(fleet.control.claimsnap): every COMPACT_FILES files, a fleet writes a snapshot of
what the log says as the log's next number, then removes the files before it that
every live fleet has read past, so the log holds a bounded number of files however
long the directory stays shared. A fleet reading in order skips a snapshot (it read
what it holds); one that starts, or finds a listed file gone, starts again from the
lowest file listed and loads the first snapshot it meets.
Per-step claim files of older fleets are still honoured (fleet.control.claims).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Callable

from fleet.control import claimsnap, foundgone, gonefence, store
from fleet.control.lease import _dead, _why
from fleet.control.lease import _refreshed as lease_refreshed
from fleet.wire import ownfiles

CLAIMS = Path(".fleet") / "claims"
MAX_BATCH = 4096  # steps per file: a burst of starts larger than this takes several
AHEAD_MIN = 8     # ready steps claimed ahead at least (fleet.control.claims)
LIVE_S = 1.0      # how long a look at which fleets are live is trusted for a conflict
# Test hook (docs/operations.md): seconds to wait after the batch file is written,
# before the claim is acted on, so that a test can kill a fleet between the two.
PAUSE_ENV = "FLEET_TEST_CLAIM_PAUSE"
_UNLOCKED = contextlib.nullcontext()
log = logging.getLogger("fleet.control.coordinator")


class ClaimLog:
    """This fleet's view of the claims log (see the module's docstring)."""

    def __init__(self, run_dir: Path, fleet_id: str, lease, on_gone: Callable[[str], None]):
        self.root = Path(run_dir) / CLAIMS
        self.fleet_id = fleet_id
        self.lease = lease
        self.on_gone = on_gone  # a fleet found gone: replay its journal (once per fleet)
        self.next = -1          # the first number not read yet (-1: the log not listed)
        self.holder: dict[str, str] = {}  # step -> fleet of the last batch naming it
        self.mine: set[str] = set()
        self.gone: set[str] = set()
        # Gone fleets whose started steps may still be stopping where they ran: fleet ->
        # (until when, this host's clock; those steps). fleet.control.gonefence.
        self.fences: dict[str, tuple[float, frozenset]] = {}
        self.muted = False  # this fleet was found gone itself: it writes nothing more (fleet.control.foundgone)
        self._live: set[str] = set()
        self._looked = -1e9
        self.pause = float(os.environ.get(PAUSE_ENV) or 0.0)
        self.files = 0  # batch files this fleet wrote
        self.taken: set[str] = set()  # of the last claim: steps taken from a gone fleet
        self.ended: set[str] = set()  # steps another fleet's batch said ended there
        # Of those, the ones its record on disk shows ended under another definition (or
        # against other runs of their deps): this fleet's to take (fleet.control.claims).
        # Said ended alone is not enough: the holder says it before its marker is written.
        self.free: set[str] = set()
        # Of watched steps another fleet said ended, the record each ended with, as that
        # fleet said it (`ended_as`, from 2026-12-07): the holder says a step ended before
        # its record is written, so a record on disk is its end only if it is that one.
        self.ended_as: dict[str, str] = {}
        # Steps this fleet held that ended here, to say next, each with the record it ended
        # with (its marker's id, or "final@<at>" of its final record; None: not known).
        self._ending: dict[str, str | None] = {}
        self._final: list[str] = []   # steps that ended here unclaimed, to say next (`final`)
        self.finals: set[str] = set()  # watched steps another fleet said ended unclaimed
        # Compaction (fleet.control.claimsnap): the number of the last snapshot met, whether
        # what this fleet read holds everything from the log's start (it started at 0 or
        # loaded a snapshot), the highest number of the last listing, the steps whose
        # holder said they ended (whichever fleet: a snapshot holds them), and this
        # fleet's read position as it last said it.
        self.snap_at = 0
        self.complete = False
        self._known = -1
        # (a dict as a set: a snapshot copies it in C, and the cycle collector never walks it)
        self.said: dict[str, None] = {}
        self.position = -1
        self.said_at = -1e9
        self.snapshots = 0  # snapshots this fleet wrote
        self._every = max(1, claimsnap.compact_files() // 4)  # said again after this many files
        self._try_at = 0  # the number from which a compaction is tried again after writing
        # Steps someone waits for (fleet.control.claims: its `elsewhere`), and those of
        # them a batch or snapshot read since named: what the claims' upkeep looks at.
        self.watch: dict | set = set()
        self.touched: set[str] = set()
        # A snapshot written by a thread (fleet.control.snapwriter), in a coordinator.
        self.snap_async = False
        self.pending = None
        # fleet -> since when it is busy, as its latest batch said (absent: not said).
        self.busy: dict[str, float | None] = {}
        self.busy_changed: set[str] = set()  # other fleets whose busy_since changed since the claims looked
        self._busy: list = []  # [since]: this fleet's busy_since, to say in the next batch

    def clear(self) -> None:
        """Remove the log (a lone lease holder: nobody else reads or writes it)."""
        shutil.rmtree(self.root, ignore_errors=True)
        store._made.discard(os.fspath(self.root))  # made again when the run directory becomes shared

    # -- reading ----------------------------------------------------------------------------
    def follow(self) -> None:
        """Read the batches written since the last look (the first time: list the log)."""
        if self.next < 0:
            self._list()
        while True:
            if self._read(self.next):
                self.next += 1
            elif self.next < self._known:  # listed, then removed by a compaction: list again
                self._list()
            else:
                break
        if self.next - self.position >= self._every:  # so that compactions need not wait a period
            claimsnap.say_position(self)

    def _list(self) -> None:
        try:
            nums = sorted(int(n[:-5]) for n in os.listdir(self.root) if n.endswith(".json") and n[:-5].isdigit())
        except FileNotFoundError:
            nums = []
        self.next = nums[0] if nums else 0
        self._known = nums[-1] if nums else -1
        if self.pending is not None:
            self.pending.stale = True  # read again from here: the thread's numbers no longer follow
        # Files are removed from the lowest up, and only after the snapshot that holds
        # them: a log starting past 0 has a snapshot ahead, loaded when met.
        self.complete = self.next == 0

    def _read(self, n: int) -> bool:
        try:
            with open(self.root / f"{n:09d}.json", "rb") as f:
                rec = json.loads(f.readline())  # a batch is one line; a snapshot's first line says so
                if rec.get("snapshot"):
                    if self.pending is not None and self.complete:
                        self.pending.consumed(None)  # (a number, no change)
                    elif self.pending is not None:
                        self.pending.stale = True  # loaded: the thread's copies are not this state
                    if not self.complete:
                        claimsnap.load(self, json.loads(f.read()), rec)
                    self.snap_at = n
                    return True
        except FileNotFoundError:
            return False
        except (OSError, ValueError, AttributeError):
            rec = {}  # (never torn: put in place whole) a damaged file holds nothing
        self._apply(rec)
        return True

    def _apply(self, rec: dict) -> None:
        if self.pending is not None:
            self.pending.consumed(rec)  # the snapshot being written takes it in too
        who = str(rec.get("fleet"))
        watch, touched, said = self.watch, self.touched, self.said
        for s in rec.get("steps") or ():
            self.holder[s] = who
            self.ended.discard(s)
            self.free.discard(s)
            self.ended_as.pop(s, None)
            said.pop(s, None)
            if s in watch:
                touched.add(s)
            if who == self.fleet_id:
                self.mine.add(s)
            else:
                self.mine.discard(s)
        tags = rec.get("ended_as") or {}
        for s in rec.get("ended") or ():
            if self.holder.get(s) == who:
                said[s] = None
                if who != self.fleet_id:
                    self.ended.add(s)
                    if s in watch:
                        touched.add(s)
                        if isinstance(tags, dict) and isinstance(tags.get(s), str):
                            self.ended_as[s] = tags[s]
        if "busy_since" in rec and self.busy.get(who, -1.0) != rec["busy_since"]:
            self.busy[who] = rec["busy_since"]
            if who != self.fleet_id:
                self.busy_changed.add(who)
        if who != self.fleet_id:
            for s in rec.get("final") or ():
                if s in watch:  # (only those waited for: kept until settled, fleet.control.claims)
                    self.finals.add(s)
                    touched.add(s)

    # -- saying what ended here -----------------------------------------------------------------
    def said_ended(self, step: str, tag: str | None = None) -> None:
        """A step ended here (final, recorded): said in the next batch this fleet writes,
        as `ended` when this fleet holds it in the log (`tag`: the record it ended with,
        said as `ended_as`), else as `final` (it never ran)."""
        if step in self.mine:
            self._ending[step] = tag
        else:
            self._final.append(step)

    def again(self, step: str) -> bool:
        """This fleet starts a step it holds once more (a later submission runs it again):
        an end of it not said yet is no longer to be said; True when its end was said,
        so it must be named again before it starts (another fleet may take it now)."""
        if self._ending:
            self._ending.pop(step, None)
        return step in self.said

    def say_ended(self) -> None:
        """Put the ended steps not said yet in a batch of their own (once per period)."""
        if (self._ending or self._final) and self.next >= 0:
            while not self._write([]):
                self.follow()

    def say_busy(self, since: float | None) -> None:
        """Say since when this fleet is busy (None: idle), in a batch of its own now: a
        fleet that waits for a step this one failed tells by it whether the failure is
        of the submissions running here (see the module's docstring)."""
        if self.next < 0:
            self.follow()
        self._busy = [since]
        while not self._write([]):
            self.follow()

    # -- who is live --------------------------------------------------------------------------
    def live(self, fleet: str) -> bool:
        """Is the fleet live (it holds the lease or a fresh registration)? A fleet not
        in the last look is always looked for again (it may have joined since: taking a
        live fleet's steps would run them twice); one in it, after LIVE_S. A fleet once
        found gone stays gone (its journal replayed, its steps free)."""
        if fleet == self.fleet_id:
            return True
        if fleet in self.gone:
            return False
        now = time.monotonic()
        if fleet not in self._live or now - self._looked >= LIVE_S:
            self._look(now)
        if fleet in self._live:
            return True
        self.gone.add(fleet)
        if fleet in self.lease.died:  # (it held a lease or registration: said durably before anything of it
            # is taken, so that, if it was only held up, it stops when it resumes; a fleet that ended gave them back)
            foundgone.mark(self.root.parent.parent, fleet, self.fleet_id, self.lease.died[fleet])
        self.on_gone(fleet)
        return False

    def fence(self, fleet: str, died: dict | None, steps) -> None:
        """The gone fleet `fleet` had started `steps` (its journal says): none of them is
        taken before its own copy must have stopped (fleet.control.gonefence)."""
        if not steps:
            return
        now = time.time()
        until = gonefence.until(died, now, self.lease.me.get("stops_s"), self.lease.refresh_s)
        if until > now:
            self.fences[fleet] = (until, frozenset(steps))
            log.error("fleet %s is gone: the %d steps it was running run here (or elsewhere) in %.1f s, once its own "
                      "side must have stopped them", fleet, len(steps), until - now)

    def fenced(self, step: str, fleet: str | None, now: float) -> float | None:
        """Until when a step the gone `fleet` started waits (None: it need not)."""
        f = self.fences.get(fleet) if self.fences and fleet is not None else None
        if f is None or step not in f[1]:
            return None
        if now >= f[0]:
            return None
        return f[0]

    def others_live(self) -> bool:
        """Is a fleet other than this one live? (looked at most every LIVE_S)"""
        now = time.monotonic()
        if now - self._looked >= LIVE_S:
            self._look(now)
        return any(f != self.fleet_id and f not in self.gone for f in self._live)

    def _look(self, now: float) -> None:
        live = set(self.lease.others())
        cur = self.lease._read()
        if cur is not None and cur.rec:
            rec = cur.rec
            if not _dead(rec, self.lease.root.parent) and not self.lease._stale(cur) \
                    and not self.lease.jobwatch.of(rec):
                live.add(str(rec.get("fleet")))
            elif rec.get("fleet") != self.fleet_id:
                # (it holds the lease still: it died, about when it last refreshed it)
                self.lease.died[str(rec.get("fleet"))] = {**rec, "refreshed": lease_refreshed(cur),
                                                          "why": _why(rec, cur, self.lease)}
        self._live, self._looked = live, now

    def holder_of(self, step: str) -> str | None:
        """The live fleet (other than this one) holding the step, after reading the log."""
        self.follow()
        h = self.holder.get(step)
        return h if h is not None and h != self.fleet_id and self.live(h) else None

    # -- claiming -----------------------------------------------------------------------------
    def claim(self, steps: list[str], blocked: Callable[[str], str | None]) -> dict[str, str]:
        """Take every step of `steps` no live fleet holds unended (`blocked`: a reason
        another fleet has it by other means, an old per-step claim). A step whose holder,
        live or this fleet, said it ended there is named again when this fleet runs it
        again, or when the holder's record of it, on disk, shows it ended under another
        definition (`free`): the fleet that names it next runs it (before 2026-12-07 a
        live holder's ended step was never taken, so two fleets of different definitions
        each waited for the other's for ever). Returns
        the steps not taken, each with its holder. One batch file, unless another fleet
        wrote first (then its batch is read and what is left is tried again: so the log
        need not be read before, only once listed)."""
        if self.next < 0:
            self.follow()
        self.taken = set()
        out: dict[str, str] = {}
        while True:
            refused: dict[str, str] = {}
            new: list[str] = []
            taking = set()  # steps another fleet (gone) held
            for s in steps:
                if s in self.mine and s not in self.said:
                    continue
                h = self.holder.get(s)
                if h is not None and h != self.fleet_id and (s not in self.said or s not in self.free) \
                        and (self.live(h) or self.fenced(s, h, time.time()) is not None):
                    refused[s] = h  # (live; or gone, its copy of the step maybe still stopping: gonefence)
                    continue
                why = blocked(s)
                if why is not None:
                    refused[s] = why
                else:
                    new.append(s)
                    if h is not None and h != self.fleet_id:
                        taking.add(s)  # (gone, or said it ended there: its marker is read)
            if not new or self._write(new[:MAX_BATCH]):
                self.taken |= taking.intersection(new[:MAX_BATCH])
                out.update(refused)
                if len(new) > MAX_BATCH:
                    steps = new[MAX_BATCH:]
                    continue
                return out
            self.follow()  # another fleet wrote this number: read it, then try again

    def _write(self, steps: list[str]) -> bool:
        """Put the batch in place as number self.next, whole (link), if nobody did."""
        if self.muted:
            return True  # (found gone: nothing of it is said; nothing starts either)
        store.makedirs(self.root)  # once per process
        tmp = self.root / f".{self.fleet_id}.{os.getpid()}.tmp"
        rec = {"fleet": self.fleet_id, "host": socket.gethostname(), "pid": os.getpid(), "at": time.time(),
               "steps": steps}
        if self._ending:
            rec["ended"] = list(self._ending)
            tags = {k: v for k, v in self._ending.items() if v is not None}
            if tags:
                rec["ended_as"] = tags
        if self._final:
            rec["final"] = self._final
        if self._busy:
            rec["busy_since"] = self._busy[0]
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, ownfiles.MODE)  # (no fstat, as open() makes)
        try:
            data = json.dumps(rec, separators=(",", ":")).encode()
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
        # A snapshot's thread links under the same lock (fleet.control.snapwriter).
        with self.pending.lock if self.pending is not None else _UNLOCKED:
            try:
                os.link(tmp, self.root / f"{self.next:09d}.json")
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
            self.next += 1
            self.files += 1
            self._ending, self._final, self._busy = {}, [], []
            self._apply(rec)
        if self.next - self.snap_at >= self._every * 4 and self.next >= self._try_at:
            self._try_at = self.next + self._every  # (a live fleet not said yet: tried again later)
            claimsnap.upkeep(self)
        if self.pause:
            time.sleep(self.pause)
        return True


def batch_files(run_dir: Path) -> list[Path]:
    """The claims log's files (for tests and audits)."""
    root = Path(run_dir) / CLAIMS
    return sorted(root.glob("*.json")) if root.is_dir() else []


def holders(run_dir: Path) -> dict[str, dict]:
    """step -> the batch record naming it last (readers: fleet audit); a snapshot's
    steps name the snapshot's file."""
    out: dict[str, dict] = {}
    for p in batch_files(run_dir):
        try:
            with open(p, "rb") as f:
                rec = json.loads(f.readline())
                if rec.get("snapshot"):
                    out = {}
                    for who, steps in (json.loads(f.read()).get("holders") or {}).items():
                        for s in steps:
                            out[s] = {"fleet": who, "snapshot": True, "file": p.name}
                    continue
        except (OSError, ValueError, AttributeError):
            continue
        for s in rec.get("steps") or ():
            out[s] = {**rec, "steps": None, "file": p.name}
    return out
