"""The coordinator's own appends on a file system that runs out of blocks (a real small
tmpfs): the event stream and the journal raise, keep what they could not write, and
write it first once there is room: no line torn, dropped or written twice."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fleet.control import journal
from fleet.wire import events as E


@contextlib.contextmanager
def tiny_tmpfs(path: Path, size: str = "64k"):
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                       text=True, timeout=30)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def _fill(mnt: Path, leave: int) -> Path:
    """A filler file taking all but about `leave` bytes (removed to make room)."""
    filler = mnt / "filler"
    st = os.statvfs(mnt)
    filler.write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))
    return filler


def test_the_event_stream_keeps_what_a_full_disk_refused_and_writes_it_once_there_is_room(tmp_path):
    with tiny_tmpfs(tmp_path / "mnt") as mnt:
        log = E.EventLog(mnt / "events.jsonl", fleet="f")
        filler = _fill(mnt, 8192)
        n, refused = 0, None
        while refused is None and n < 10_000:
            for _ in range(50):
                log.write(E.Wait(t=float(n), step=f"s/{n}", reason="x" * 40))
                n += 1
            try:
                log.flush()
            except OSError as e:
                refused = e
        assert refused is not None and refused.errno == errno.ENOSPC
        lines = (mnt / "events.jsonl").read_text().splitlines(keepends=True)
        assert all(json.loads(x) for x in lines[:-1])  # what is there so far: whole lines but the last write's
        filler.unlink()
        log.write(E.Wait(t=float(n), step="last", reason="x"))
        log.close()
        steps = [d["step"] for d in E.read_events(mnt / "events.jsonl")]
        assert steps == [f"s/{i}" for i in range(n)] + ["last"]  # each once, in order, none torn


def test_the_journal_keeps_what_a_full_disk_refused_and_writes_it_once_there_is_room(tmp_path):
    with tiny_tmpfs(tmp_path / "mnt") as mnt:
        j = journal.Journal(mnt, "f1", {"fleet": "f1"})
        filler = _fill(mnt, 8192)
        n, refused = 0, None
        while refused is None and n < 10_000:
            for _ in range(50):
                j.append({"k": "attempt", "step": f"s/{n}", "rec": {"pad": "x" * 40}})
                n += 1
            try:
                j.sync()
            except OSError as e:
                refused = e
        assert refused is not None and refused.errno == errno.ENOSPC
        filler.unlink()
        assert j.close()  # sealed: everything written
        lines = [json.loads(x) for x in journal.path_of(mnt, "f1").read_text().splitlines()]
        assert [x["step"] for x in lines if x["k"] == "attempt"] == [f"s/{i}" for i in range(n)]
        assert lines[-1]["k"] == "sealed"
