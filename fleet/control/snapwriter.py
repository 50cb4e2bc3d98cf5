"""A claims snapshot (fleet.control.claimsnap) written off the coordinator's loop.

Written on the loop, a snapshot held it for one whole turn: grouping a million held
steps by fleet, one json.dumps call of ~20 MB (which never lets go of the interpreter's
lock), the write and the fsync (163 ms at 1,000,000 held steps on a quiet machine). Now
the loop copies the two tables it owns (C copies) and goes on; a thread groups, encodes
in pieces of PIECE steps (each json.dumps call short, so the loop gets the lock back
within the switch interval, 0.2 ms in a coordinator: fleet.control.worker), writes the
temporary file, fsyncs it and links it as the log's next number.

The loop keeps claiming meanwhile. Every number it consumes (a batch it wrote or read)
is handed to the thread (`deltas`, in order), which applies them to its copies and
re-encodes only the pieces they touch (each step is in exactly one holder's list, so
the lists' order does not matter), then writes again: the snapshot holds exactly what
the numbers before its own say, as the format has always said, so fleets of earlier
versions read it. The check "nothing consumed since" and the link are made under
`lock`, which the loop's own batch link takes too: a batch and the snapshot never take
one number. If the first write is overtaken, the next round is written under the lock
(a claim then waits for one write of the file, not for the grouping and encoding); a
batch of another fleet at that number means this snapshot lost the race, as one on the
loop could: dropped, tried again at the next upkeep. The loop listing the log again, or
loading a snapshot, makes the copies no longer its state: dropped too.

Then the directory is fsync'd and the files before the snapshot removed, on the thread.
Crash safety is the loop's version's: every stage leaves what it left there (the module
docstring of fleet.control.claimsnap); the fault hooks fire in the thread, which kills
the process all the same."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time

from fleet.wire import ownfiles

_log = logging.getLogger("fleet.control.snapwriter")
PIECE = 4096  # steps per json.dumps call in the thread
# Test hook: a threading.Event the thread waits for before its first link, so that a
# test can claim while a snapshot is being written.
HOLD: threading.Event | None = None


class Pending:
    """A snapshot written aside, linked and the files before it removed, by a thread."""

    def __init__(self, log, bound: int, live: set):
        self.of, self.root, self.fleet_id = log.next, log.root, log.fleet_id
        self.tmp = log.root / f".{log.fleet_id}.{os.getpid()}.snap.tmp"
        self.lock = threading.Lock()  # a batch's link by the loop; the thread's check and link
        self.deltas: list = []  # per number the loop consumed since `of`: its record (None: no change)
        self.stale = False  # the loop's tables were replaced (listed again, a snapshot loaded)
        self.at: int | None = None  # the number linked
        self.counted = False  # the loop took the outcome in (claimsnap.settle)
        self.decided = threading.Event()  # linked, lost or failed
        # C copies (a still picture) of two dicts of strings, which the cycle collector
        # does not track (a young set of a million would be walked whole by it, lock held).
        holder, said = log.holder.copy(), log.said.copy()
        self.busy = dict(log.busy)  # each fleet's busy_since at `of` (the deltas' since: _write)
        self.thread = threading.Thread(target=self._run, args=(holder, said, bound, live), name="fleet-claimsnap",
                                       daemon=True)
        self.thread.start()

    @property
    def linked(self) -> bool:
        return self.at is not None

    def consumed(self, rec: dict | None) -> None:
        """The loop read or wrote the log's next number (its record; None: no change)."""
        self.deltas.append(rec)

    def _run(self, holder: dict, said: dict, bound: int, live: set) -> None:
        from fleet.control import claimsnap
        try:
            try:
                self._rounds(claimsnap, _Encoded(holder, said))
            finally:
                self.decided.set()
            if self.linked:
                claimsnap._sync_dir(self.root)
                claimsnap._remove(self, min(bound, self.at), live)
        except OSError as e:
            _log.error("could not compact the claims log %s: %s", self.root, e)

    def _rounds(self, claimsnap, enc: "_Encoded") -> None:
        applied, locked = 0, False
        while not self.stale:
            applied = enc.catch_up(self.deltas, applied)
            if locked:
                with self.lock:
                    if self.stale:
                        break
                    applied = enc.catch_up(self.deltas, applied)
                    self._write(enc, self.of + applied)
                    return self._link(claimsnap, self.of + applied)
            self._write(enc, self.of + applied)
            if HOLD is not None:
                HOLD.wait()
            with self.lock:
                if len(self.deltas) == applied and not self.stale:
                    return self._link(claimsnap, self.of + applied)
            locked = True  # overtaken: the next round is written under the lock
        if self.tmp.exists():
            os.unlink(self.tmp)

    def _write(self, enc: "_Encoded", at: int) -> None:
        from fleet.control import claimsnap
        busy = dict(self.busy)
        for rec in self.deltas[:at - self.of]:
            if rec and "busy_since" in rec:
                busy[str(rec.get("fleet"))] = rec["busy_since"]
        head = {"fleet": self.fleet_id, "host": socket.gethostname(), "pid": os.getpid(), "at": time.time(),
                "snapshot": True, "steps": [], "of": at, "busy": busy}
        with ownfiles.open(self.tmp, "wb") as f:
            f.write(json.dumps(head).encode() + b"\n")
            for part in enc.parts():
                f.write(part)
            f.flush()
            os.fsync(f.fileno())
        claimsnap._fault("written")

    def _link(self, claimsnap, at: int) -> None:
        try:
            os.link(self.tmp, self.root / f"{at:09d}.json")
            self.at = at
        except FileExistsError:
            pass  # another fleet's batch: lost the race
        finally:
            os.unlink(self.tmp)
        if self.linked:
            claimsnap._fault("linked")

    def done(self) -> bool:
        return not self.thread.is_alive()


class _Encoded:
    """The snapshot's state, grouped by fleet in pieces of PIECE steps, each encoded."""

    def __init__(self, holder: dict, said: dict):
        self.holder, self.said = holder, said
        self.groups = {"holders": _grouped(holder.items()), "ended": _grouped((s, holder[s]) for s in said)}

    def catch_up(self, deltas: list, applied: int) -> int:
        """Apply the records consumed since `applied`; re-encode the pieces they touch."""
        n = len(deltas)
        if n == applied:
            return n
        holder, said, moved, flipped = self.holder, self.said, set(), set()
        for rec in deltas[applied:n]:
            if not rec:
                continue
            who = str(rec.get("fleet"))
            for s in rec.get("steps") or ():  # as fleet.control.claimlog.ClaimLog._apply
                if holder.get(s) != who:
                    moved.add(s)
                holder[s] = who
                if s in said:
                    del said[s]
                    flipped.add(s)
            for s in rec.get("ended") or ():
                if holder.get(s) == who and s not in said:
                    said[s] = None
                    flipped.add(s)
        _patch(self.groups["holders"], moved, {s: holder[s] for s in moved})
        changed = moved | flipped
        _patch(self.groups["ended"], changed, {s: holder[s] for s in changed if s in said})
        return n

    def parts(self):
        """The state line, as claimsnap._state writes it (the same JSON), in pieces."""
        for key, groups in self.groups.items():
            yield (b'{"' if key == "holders" else b',"') + key.encode() + b'":{'
            for k, (who, pieces) in enumerate(groups.items()):
                yield (b"," if k else b"") + json.dumps(who).encode() + b":[" + b",".join(
                    e for _, e in pieces if e) + b"]"
            yield b"}"
        yield b"}"


def _encode(steps: list) -> bytes:
    return json.dumps(steps, separators=(",", ":"))[1:-1].encode()


def _grouped(pairs) -> dict:
    """(step, fleet) pairs by fleet, in encoded pieces of PIECE steps: plain Python (the
    loop takes the lock between bytecodes), and no list longer than a piece (a young
    list of a million steps is walked whole by each collection of the youngest objects)."""
    groups: dict[str, list] = {}
    filling: dict[str, list] = {}
    for s, who in pairs:
        piece = filling.get(who)
        if piece is None or len(piece) == PIECE:
            piece = filling[who] = []
            groups.setdefault(who, []).append(piece)
        piece.append(s)
    return {who: [(p, _encode(p)) for p in pieces] for who, pieces in groups.items()}


def _pieces(groups: dict) -> dict:
    return {who: [(steps[i:i + PIECE], _encode(steps[i:i + PIECE])) for i in range(0, len(steps), PIECE)]
            for who, steps in groups.items()}


def _patch(groups: dict, out: set, into: dict) -> None:
    """Take the steps `out` out of every piece (re-encoding those that held any), then
    put each of `into` (step -> fleet) in a new piece of its fleet."""
    if not out:
        return
    for pieces in groups.values():
        for i, (steps, _) in enumerate(pieces):
            if not out.isdisjoint(steps):
                kept = [s for s in steps if s not in out]
                pieces[i] = (kept, _encode(kept))
    added: dict[str, list] = {}
    for s, who in into.items():
        added.setdefault(who, []).append(s)
    for who, steps in added.items():
        groups.setdefault(who, []).extend(_pieces({who: steps})[who])
