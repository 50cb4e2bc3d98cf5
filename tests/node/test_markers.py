"""The agent's writer of done markers (fleet.node.markers): real files, its real thread."""

from __future__ import annotations

import select

from fleet.node import markers


def _woken(w: markers.Writer, timeout: float = 10.0) -> bool:
    return bool(select.select([w.wake_r], [], [], timeout)[0])


def test_the_agents_writer_writes_in_order_says_how_far_it_got_and_which_it_could_not_write(tmp_path):
    w = markers.Writer()
    try:
        (tmp_path / "plain").write_text("a file, not a directory")
        files = [[str(tmp_path / "a" / ".fleet" / "done.json"), '{"n":1}'],   # its directory made
                 [str(tmp_path / "plain" / "x" / "done.json"), '{"n":2}'],    # cannot be written
                 [str(tmp_path / "b" / "done.json"), '{"n":3}']]
        w.add(files[:2], last=2)
        w.add(files[2:], last=3)
        assert w.drain(10) and _woken(w)
        assert w.progress() == (3, [2])
        assert w.progress() is None  # nothing new since
        assert (tmp_path / "a" / ".fleet" / "done.json").read_text() == '{"n":1}'
        assert (tmp_path / "b" / "done.json").read_text() == '{"n":3}'
        w.add([[str(tmp_path / "c"), "c"]], last=4)
        assert w.drain(10)
        said = w.progress()
        assert said == (4, [])
        w.unsay(said)  # the message that carried it was not sent
        assert w.progress() == (4, [])
    finally:
        w.close()


def test_a_marker_written_again_over_a_torn_one_holds_only_the_new_text(tmp_path):
    path = tmp_path / "done.json"
    path.write_text("x" * 100)  # longer than what comes
    markers.put(str(path), '{"ok":1}')
    assert path.read_text() == '{"ok":1}'
