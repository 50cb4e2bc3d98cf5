"""A fleet's journal: its attempts and outcomes, appended to one file per fleet
(.fleet/journal/<fleet>.jsonl, the format is fleet.wire.records') and made durable in
batches, with the per-step files that other fleets and reruns read written after
(off the loop: fleet.control.markwriter).

Why: a per-step file written aside and renamed costs several metadata operations per
step on the coordinator (on Lustre/GPFS each is a round trip to the metadata server).
A journal line costs none: the lines of a loop turn are one write at its end, fsync'd
at most every FLUSH_S (on a thread of its own, fleet.control.syncer: the loop never
waits for the disk). The journal is the authority; a step's done marker (or
final.json) is written only after the line that records it was fsync'd, with one open
and no rename, by the threads of fleet.control.markwriter (a sealed journal owes
nothing: sealing waits for them), and a fleet that takes over a dead fleet's run
directory writes whatever markers its journal still owed (replay). So a kill -9 at any moment:

- loses no outcome whose line was written (the marker is written on replay); one
  received in the turn the coordinator died in is in no file: the step runs again;
- never leaves a marker without its line, so never marks done a step that did not
  finish, and never runs again a step that is recorded done.

A crash of the machine may also lose lines written but not yet fsync'd (at most
FLUSH_S of outcomes): their markers were not written either, so those steps run again.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from fleet.control import store, syncer
from fleet.control.linetext import esc
from fleet.wire import appends, ownfiles, records

log = logging.getLogger("fleet.control.journal")
FLUSH_S = 0.1
_dumps = json.JSONEncoder(separators=(",", ":")).encode  # made once: json.dumps(separators=...) makes one per call
encode = _dumps  # a record as a line holds it (and a marker file, written from the same text)
# Test hook (documented in docs/operations.md): seconds for which the journal's lines
# are not even written, so that a test can kill the coordinator while an outcome it
# received is in no file yet (the window between a step's exit and the next flush).
DELAY_ENV = "FLEET_TEST_JOURNAL_DELAY"
# Test hook: "1" writes no marker or final file after a flush (the journal alone holds
# them), so that a test can kill the coordinator between the journal and the markers.
HOLD_ENV = "FLEET_TEST_HOLD_MARKERS"
# Test and benchmark hook (docs/operations.md): milliseconds slept in each per-step
# file's write, on whichever thread writes it, to emulate a parallel filesystem's
# metadata latency (an emulation: the sleep lets go of the interpreter's lock as a
# blocking open does).
SLEEP_ENV = "FLEET_TEST_MARKER_SLEEP_MS"
_SLEEP = float(os.environ.get(SLEEP_ENV) or 0) / 1000
CLOSE_S = 60.0  # at most this long a close waits for the files queued (then: left unsealed, replayed)


def path_of(run_dir: Path, fleet_id: str) -> Path:
    return Path(run_dir) / records.JOURNALS / f"{fleet_id}.jsonl"


def write_sealed(run_dir: Path, header: dict, lines: list[dict]) -> None:
    """A whole journal written at once and sealed (`fleet step --record`: outcomes written
    outside any fleet), fsync'd before the files it records are written, so that the fleets
    that read journals for markers (fleet.control.journalmarks) learn of them."""
    # Named as a sealed segment of its fleet's (fleet.control.fold.journals_of): a pid comes again.
    path = Path(run_dir) / records.JOURNALS / f"{header['fleet']}.{time.time_ns()}.jsonl"
    store.makedirs(path.parent)
    t = time.time()
    text = "".join(_dumps(x) + "\n" for x in [{"k": "fleet", **header, "t": t}, *lines,
                                              {"k": "sealed", "by": "itself", "t": t}])
    # Written aside and renamed: a fleet listing the journals meanwhile finds it whole or not at all.
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, ownfiles.MODE)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)  # (the rename durable before the files it records are written)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class Journal:
    """This fleet's journal: lines buffered in a loop turn and written at its end (one
    write), fsync'd at most every FLUSH_S, and after each fsync the files they owe
    handed to the writer's threads."""

    def __init__(self, run_dir: Path, fleet_id: str, header: dict, writer=None, syncer=None):
        self.writer = writer  # fleet.control.markwriter.Writer (None: the files written here, on the loop)
        self.syncer = syncer  # fleet.control.syncer.Syncer (None: each fsync made here, on the loop)
        self._flight: tuple[int, list, int] | None = None  # (the syncer's ticket, the files owed until it is
        # done, the bytes it covers)
        self._synced = 0  # bytes of this file durable, the files their lines owe handed over (settled())
        self.path = path_of(run_dir, fleet_id)
        store.makedirs(self.path.parent)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, ownfiles.MODE)
        self._lines: list[str] = []
        self._starts: list[list] = []  # [step, attempt, generation] started this turn: one line
        self._hashes: list = []  # each one's definition (records.spec_hash), in the same order
        self._owed: list[tuple] = []  # (path, record, drop done, step, node) to write once durable
        self._unsynced = False
        self._rest = b""  # what a failed write left unwritten (_write)
        self.delay = float(os.environ.get(DELAY_ENV) or 0.0)
        self.hold = os.environ.get(HOLD_ENV) == "1"
        self._last = time.monotonic()
        self.header = header
        self.bytes = 0  # written by this process (rotated past fleet.control.fold.rotate_bytes())
        self.append({"k": "fleet", **header})
        self.sync()

    def append(self, line: dict) -> None:
        """Buffer one line (written at the end of the loop turn)."""
        if self._starts:  # the turn's starts so far precede it, as they happened
            self._start_line()
        line["t"] = time.time()  # (the callers' dicts are made for this line)
        self._lines.append(_dumps(line))

    def start(self, step: str, attempt: int, generation: int, spec: str | None = None) -> None:
        """An attempt starts: the turn's starts are one `starts` line (fleet.wire.records
        reads it as one `start` line each), one encoding per turn, not one per step.
        `spec`: its definition's hash, so that a fleet replaying this journal after a
        crash counts the attempt toward --max-attempts (fleet.control.recording)."""
        self._starts.append([step, attempt, generation])
        self._hashes.append(spec)

    def _start_line(self) -> None:
        # The hashes beside the starts, not in them: readers before 2026-12-03 unpack three.
        self._lines.append(_dumps({"k": "starts", "s": self._starts, "h": self._hashes, "t": time.time()}))
        self._starts, self._hashes = [], []

    def done(self, step: str, rec: str, att: dict | str | None, drop: bool = False) -> None:
        """A success's line, its marker's record `rec` already encoded (the marker file
        is written from the same text: one encoding for both) and, on the same line,
        its attempt record `att` (encoded already, if text; fleet.wire.records reads
        both from it); drop: the step's final.json goes with the marker's write."""
        if self._starts:
            self._start_line()
        att_text = "" if att is None else ',"att":' + (att if isinstance(att, str) else _dumps(att))
        drop_text = ',"drop":true' if drop else ""
        # (json writes a float as its repr)
        self._lines.append(f'{{"k":"done","step":{esc(step)},"rec":{rec}{att_text}{drop_text},"t":{time.time()!r}}}')

    def owe(self, path: str, rec: dict | str, step: str, drop: bool = False, node: str | None = None) -> None:
        """A file (a marker, a final.json: its path as text) of `step` to write once what
        precedes it is durable; drop: what it replaces goes then (a final outcome's: the
        step's marker; a success's: the final.json of the failure before it). The fleet's own reads see it at once (the writer's view),
        not only from the flush that hands it over: a suite submitted again within
        that flush's wait finds the step done instead of running it again."""
        item = (path, rec, drop, step, node)  # node: the one that ran a success, which may write its marker
        self._owed.append(item)
        if self.writer is not None:
            self.writer.owed(item)

    def turn(self, now: float) -> None:
        """At the end of each loop turn (before the event stream's write, which must not
        say more than the journal): write its lines; fsync, and write the files owed,
        when FLUSH_S passed since the last fsync."""
        if self.delay and now - self._last < self.delay:
            return  # the test hook's window
        self._write()
        if self._flight is not None and not self._landed():
            return  # (the next fsync is asked once this one is made)
        if (self._unsynced or self._owed) and now - self._last >= max(FLUSH_S, self.delay):
            if self.syncer is None:
                self.sync(now)
            else:
                self._ask(now)

    def _ask(self, now: float) -> None:
        """The fsync of what is written, asked of the syncer's thread; the files owed so
        far wait for it (handed over by _landed, on a later turn)."""
        self._last = now
        owed = []
        if not self.hold:
            owed, self._owed = self._owed, []
        self._unsynced = False
        self._flight = (self.syncer.ask(self._fd), owed, self.bytes)

    def _landed(self) -> bool:
        """Whether the fsync in flight was made; if so, its files handed over. Its OSError
        is raised with nothing lost: its lines count as unsynced again and its files wait
        for the next fsync, as when the fsync failed on the loop."""
        ticket, owed, upto = self._flight
        try:
            if not self.syncer.done(ticket):
                return False
        except OSError:
            self._flight, self._owed, self._unsynced = None, owed + self._owed, True
            raise
        self._flight = None
        self._hand(owed)
        self._synced = max(self._synced, upto)
        return True

    def _write(self) -> None:
        """Write the buffered lines. An OSError (a full disk) is raised with nothing lost:
        the rest is written first next time, so no line is torn or dropped, and what the
        failed write wrote is taken back (fleet.wire.appends)."""
        if self._starts:
            self._start_line()
        if self._lines or self._rest:
            whole = self._rest + (("\n".join(self._lines) + "\n").encode() if self._lines else b"")
            self._lines.clear()
            data, written = whole, 0
            try:
                while data:
                    n = os.write(self._fd, data)
                    data, written = data[n:], written + n
            except OSError:
                if written and appends.take_back(self._fd, written):
                    data, written = whole, 0
                raise
            finally:
                self.bytes += written
                self._rest, self._unsynced = data, True

    def sync(self, now: float | None = None) -> None:
        """Write and fsync every buffered line, then hand the files they owe to the
        writer's threads (none: write them here)."""
        self._last = time.monotonic() if now is None else now
        self._write()
        if self._unsynced or self._flight is not None:  # (this fsync covers the lines of one in flight)
            syncer.fsync(self._fd)
            self._unsynced = False
        if self._flight is not None:  # its files first, in the order they were owed
            self._owed, self._flight = self._flight[1] + self._owed, None
        self._synced = self.bytes
        if self.hold:
            return
        owed, self._owed = self._owed, []
        self._hand(owed)

    def settle(self, now: float) -> int:
        """Without waiting for the disk: write the buffered lines and, unless an fsync is
        in flight, ask the syncer for theirs; a mark that settled() says is reached once
        they are durable and their files handed over (no syncer: made so here). For a
        finished submission's progress answer, asked at each poll until it is reached."""
        if self.syncer is None:
            self.sync(now)
            return self.bytes
        self._write()
        if (self._flight is None or self._landed()) and (self._unsynced or (self._owed and not self.hold)):
            self._ask(now)
        return self.bytes

    def settled(self, mark: int) -> bool:
        """Whether the lines written up to `mark` (settle's) are durable, their files handed over."""
        return self._synced >= mark

    def _hand(self, owed: list) -> None:
        """Files owed by durable lines to their writers (none: written here)."""
        if self.writer is not None:
            if owed:
                self.writer.add(owed)
            return
        for path, rec, drop, *_ in owed:
            put(path, rec)
            if drop:
                store.unlink_replaced(path, drop)

    def handed(self):
        """Flush, and where the files it owes end in the writer's queues (a ticket; None:
        written already, on the loop): a rotated segment is sealed once that is reached."""
        self.sync()
        return self.writer.ticket() if self.writer is not None else None

    def finish(self, seal: bool) -> bool:
        """Close a journal whose files are all written (seal) or not (left for replay);
        whether it was sealed."""
        sealed = seal and not self.hold and (self.writer is None or not self.writer.failed)
        if sealed:
            self.append({"k": "sealed", "by": "itself"})
            self.sync()
        self._release()
        return sealed

    def close(self, seal: bool = True) -> bool:
        """Flush, wait (at most CLOSE_S) for what is owed to be written and (seal) say
        so: a sealed journal is never replayed. Returns whether it was sealed: not when
        files are still queued or could not be written (the next fleet replays it)."""
        self.sync()
        sealed = seal and not self.hold
        w = self.writer
        if sealed and w is not None:
            failed = w.failed
            if not w.drain(CLOSE_S) or failed:
                log.error("%s: %d files still queued, %d not written: left for the next fleet to write",
                          self.path, w.figures()["markers_queued"], failed)
                sealed = False
        if sealed:
            self.append({"k": "sealed", "by": "itself"})
            self.sync()
        self._release()
        return sealed

    def drop(self) -> None:
        """Close without writing anything more: no buffered line, no owed file, no seal
        (its fleet was found gone by another: fleet.control.foundgone)."""
        self._lines, self._starts, self._hashes, self._owed, self._rest = [], [], [], [], b""
        self._flight = None
        self._release()

    def _release(self) -> None:
        if self.syncer is not None:
            self.syncer.idle()  # (an fsync superseded by sync() may still be under way on this file)
        os.close(self._fd)


def put(path: Path | str, rec: dict | str) -> None:
    """Write a per-step file in place: one open, no temporary file and no rename (the
    journal, flushed before, is its authority; a torn one is rewritten on replay). Its
    .fleet directory is made by the step's process on its node (fleet.node.child), so
    the coordinator makes it only for a step that never started there."""
    data = (rec if isinstance(rec, str) else json.dumps(rec)).encode()  # (str: encoded already)
    if _SLEEP:
        time.sleep(_SLEEP)
    records.put(os.fspath(path), data, store.makedirs)


def replay(run_dir: Path, js: records.Journals, live: set, by: str) -> list[records.Journal]:
    """Write the files that unsealed journals of fleets no longer alive (fleet ids not in
    `live`) still owe: a marker or final.json missing or torn on disk for the step's last
    outcome there (what is on disk otherwise is as new or newer: every later fleet
    replayed first). Then seal them. Returns the journals replayed."""
    done = []
    for j in js.each:
        if j.sealed or j.fleet.get("fleet") in live:
            continue
        for step, line in j.last.items():
            rec, d = line.get("rec") or {}, records.fleet_dir(run_dir, step)
            if line["k"] == "done" and records.read_done(run_dir, step) is None:
                put(d / records.DONE, rec)
                if line.get("drop"):  # (the final.json of the failure it follows)
                    records.unlink(os.fspath(d / records.FINAL))
            elif line["k"] == "final" and records.read_final(run_dir, step) is None:
                put(d / records.FINAL, rec)
                if line.get("drop"):  # (true before 2026-12-07: whichever marker; since, the one it replaces)
                    store.unlink_done(d, line["drop"])
        with ownfiles.open(j.path, "a") as f:
            # On a line of its own even after a torn last line (empty lines are skipped).
            f.write("\n" + json.dumps({"k": "sealed", "by": by, "t": time.time()}) + "\n")
        done.append(j)
    return done

