"""The agent's writer of done markers (fleet.node.markers): real files, its real thread."""

from __future__ import annotations

import os
import select

from fleet.node import markers


def _woken(w: markers.Writer, timeout: float = 10.0) -> bool:
    """Whether the writer woke the loop within timeout (what it wrote to the pipe read, as the agent does)."""
    woken = bool(select.select([w.wake_r], [], [], timeout)[0])
    if woken:
        os.read(w.wake_r, 512)
    return woken


def _three(tmp_path) -> list:
    (tmp_path / "plain").write_text("a file, not a directory")
    return [[str(tmp_path / "a" / ".fleet" / "done.json"), '{"n":1}'],   # its directory made
            [str(tmp_path / "plain" / "x" / "done.json"), '{"n":2}'],    # cannot be written
            [str(tmp_path / "b" / "done.json"), '{"n":3}']]


def test_the_agents_writer_writes_in_order_and_says_how_far_it_got_and_what_it_could_not_write(tmp_path):
    w = markers.Writer()
    try:
        w.add(_three(tmp_path)[:2], last=2)
        w.add(_three(tmp_path)[2:], last=3)
        assert w.drain(10)
        assert w.progress() == (3, [2]) and w.progress() is None  # nothing new since
        assert (tmp_path / "a" / ".fleet" / "done.json").read_text() == '{"n":1}'
        assert (tmp_path / "b" / "done.json").read_text() == '{"n":3}'
        w.add([[str(tmp_path / "c"), "c"]], last=4)
        assert w.drain(10)
        said = w.progress()
        assert said == (4, [])
        w.unsay(said)  # the message that carried it was not sent
        assert w.progress() == (4, [])
        assert not w.pending()
    finally:
        w.close()


def test_after_one_slow_write_the_agents_writer_writes_on_its_thread_and_wakes_an_idle_loop(tmp_path, monkeypatch):
    monkeypatch.setattr(markers, "SLOW_S", 0.0)  # every write counts as slow: a remote filesystem
    w = markers.Writer()
    try:
        files = _three(tmp_path)
        w.add(files, last=3)  # the first is written here; it was slow: the rest go to the thread
        assert w.drain(10) and _woken(w)
        assert w.progress() == (3, [2])
        assert (tmp_path / "b" / "done.json").read_text() == '{"n":3}'
        w.wake_when_written(False)  # a step under way: its report will carry the progress
        w.add([[str(tmp_path / "d"), "d"]], last=4)
        assert w.drain(10) and not _woken(w, 0.3)
        assert w.unsaid() and w.progress() == (4, [])
    finally:
        w.close()


def test_a_marker_written_again_over_a_torn_one_holds_only_the_new_text(tmp_path):
    path = tmp_path / "done.json"
    path.write_text("x" * 100)  # longer than what comes
    markers.put(str(path), '{"ok":1}')
    assert path.read_text() == '{"ok":1}'


def test_after_enough_fast_writes_the_loop_writes_them_itself_until_one_is_slow(tmp_path, monkeypatch):
    w = markers.Writer()
    try:
        n = markers.FAST_N
        monkeypatch.setattr(markers, "SLOW_S", 60.0)  # every write is fast, however busy the machine
        w.add([[str(tmp_path / f"f{i}"), "x"] for i in range(n)], last=n)  # on the thread, all fast
        assert w.drain(10) and w.inline
        w.add([[str(tmp_path / "g"), "g"]], last=n + 1)  # written before add returns
        assert w.progress() == (n + 1, []) and (tmp_path / "g").read_text() == "g"
        monkeypatch.setattr(markers, "SLOW_S", 0.0)  # the next write is slow: back to the thread
        w.add([[str(tmp_path / "h"), "h"], [str(tmp_path / "i"), "i"]], last=n + 3)
        assert not w.inline and w.drain(10)
        assert w.progress() == (n + 3, []) and (tmp_path / "i").read_text() == "i"
    finally:
        w.close()


def test_a_closed_writer_never_wakes_into_the_file_that_took_its_pipes_number(tmp_path, monkeypatch):
    # The thread is in a write when the agent closes the writer; the pipe's write end's
    # number then belongs to another file (here forced with dup2; in CI it was a step's
    # stdout and the next test's pipe). The thread's wake-up must not land there.
    import threading
    entered, release = threading.Event(), threading.Event()

    def slow_put(path, text):
        entered.set()
        release.wait(10)

    monkeypatch.setattr(markers, "put", slow_put)
    w = markers.Writer()
    old = w._wake_w
    w.add([[str(tmp_path / "a"), "a"]], last=1)
    assert entered.wait(10)
    w.close()
    r, wr = os.pipe()
    try:
        if wr != old:
            os.dup2(wr, old)  # the next file opened takes the closed number
        release.set()
        w._thread.join(10)
        assert not w._thread.is_alive()
        assert not select.select([r], [], [], 0.2)[0]  # nothing written into it
    finally:
        for fd in {r, wr, old}:  # (the pipe usually takes the very numbers: then dup2 does nothing)
            os.close(fd)
