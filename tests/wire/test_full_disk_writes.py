"""The coordinator's own appends on a file system that runs out of blocks (a real small
tmpfs): the event stream and the journal raise, keep what they could not write, and
write it first once there is room: no line torn, dropped or written twice."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

from fleetharness import small_tmpfs

from fleet.control import journal
from fleet.wire import events as E


def _fill(mnt: Path, leave: int) -> Path:
    """A filler file taking all but about `leave` bytes (removed to make room)."""
    filler = mnt / "filler"
    st = os.statvfs(mnt)
    filler.write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))
    return filler


def _until_refused(add, flush) -> int:
    """add(i) records and flush() every 50 until the file system refuses (ENOSPC): how many were added."""
    n = 0
    while n < 10_000:
        for _ in range(50):
            add(n)
            n += 1
        try:
            flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC
            return n
    raise AssertionError("the file system never filled")


def test_the_event_stream_keeps_what_a_full_disk_refused_and_writes_it_once_there_is_room(tmp_path):
    with small_tmpfs(tmp_path / "mnt", size="64k") as mnt:
        log = E.EventLog(mnt / "events.jsonl", fleet="f")
        filler = _fill(mnt, 8192)
        n = _until_refused(lambda i: log.write(E.Wait(t=float(i), step=f"s/{i}", reason="x" * 40)), log.flush)
        # What is there meanwhile is whole lines: the failed write's part was taken back
        # (fleet.wire.appends), so a fleet that never writes again leaves none torn.
        text = (mnt / "events.jsonl").read_text()
        assert text.endswith("\n") and all(json.loads(x) for x in text.splitlines()), text[-200:]
        filler.unlink()
        log.write(E.Wait(t=float(n), step="last", reason="x"))
        log.close()
        steps = [d["step"] for d in E.read_events(mnt / "events.jsonl")]
        assert steps == [f"s/{i}" for i in range(n)] + ["last"]  # each once, in order, none torn


def test_the_journal_keeps_what_a_full_disk_refused_and_writes_it_once_there_is_room(tmp_path):
    with small_tmpfs(tmp_path / "mnt", size="64k") as mnt:
        j = journal.Journal(mnt, "f1", {"fleet": "f1"})
        filler = _fill(mnt, 8192)
        n = _until_refused(lambda i: j.append({"k": "attempt", "step": f"s/{i}", "rec": {"pad": "x" * 40}}), j.sync)
        text = journal.path_of(mnt, "f1").read_text()
        assert text.endswith("\n") and all(json.loads(x) for x in text.splitlines()), text[-200:]
        filler.unlink()
        assert j.close()  # sealed: everything written
        lines = [json.loads(x) for x in journal.path_of(mnt, "f1").read_text().splitlines()]
        assert [x["step"] for x in lines if x["k"] == "attempt"] == [f"s/{i}" for i in range(n)]
        assert lines[-1]["k"] == "sealed"


def test_a_fleet_appending_to_a_stream_whose_last_line_was_torn_starts_a_line_of_its_own(tmp_path):
    # A fleet that died mid-write (or an older version's full disk) left half a record:
    # the next fleet's first record (fleet_starting: a session to every reader) stays whole.
    path = tmp_path / "events.jsonl"
    path.write_text('{"t":1.0,"kind":"wait","step":"a","reason":"x"}\n{"t":2.0,"kind":"wa')
    log = E.EventLog(path, fleet="next")
    log.write(E.Wait(t=3.0, step="b", reason="y"))
    log.close()
    assert path.read_text().splitlines()[-1].startswith('{"t":3.0')
    assert [d["step"] for d in E.read_events(path)] == ["a", "b"]  # the torn one skipped, not the new one
    before = path.read_text()
    E.EventLog(path, fleet="third").close()  # (a whole last line: nothing added)
    assert path.read_text() == before
