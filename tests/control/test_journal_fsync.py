"""The journal's fsync on the syncer's thread (fleet.control.syncer): the loop's turn
does not wait for the disk, and a done marker is still handed over only after the line
that owes it is durable. Real files, a real thread; the thread's fsync is held by a gate
(as a parallel filesystem's slow one would be): os.fsync, patched for this thread only."""

from __future__ import annotations

import json
import os
import statistics
import threading
import time

import pytest
from fleetharness import assert_nothing_left, finish, fleet, write_suite

from fleet.control import journal, markwriter, store, syncer
from fleet.control.client import Client, FleetError, find
from fleet.wire import messages as P
from fleet.wire import records


def _success(j, run_dir, step: str) -> str:
    """A success's journal line and the marker it owes (as recording does); the marker's path."""
    d = store.key(run_dir, step)
    os.makedirs(d, exist_ok=True)
    path, rec = f"{d}/{records.DONE}", journal.encode({"step": step, "outcome": "succeeded"})
    j.done(step, rec, None)
    j.owe(path, rec, step)
    return path


@pytest.fixture
def gated(monkeypatch):
    """os.fsync held on a gate on the syncer's thread (the loop's own fsyncs are not)."""
    gate, entered, real = threading.Event(), threading.Event(), os.fsync

    def fsync(fd):
        if threading.current_thread().name == "fleet-journal-fsync":
            entered.set()
            assert gate.wait(30)
        real(fd)
    monkeypatch.setattr(syncer.os, "fsync", fsync)
    yield gate, entered
    gate.set()


def _turn_until(j, deadline_s: float, done) -> None:
    deadline = time.monotonic() + deadline_s
    while not done():
        assert time.monotonic() < deadline, "not done in time"
        j.turn(time.monotonic())
        time.sleep(0.005)


def test_a_turn_goes_on_while_the_fsync_is_made_and_the_marker_waits_for_it(tmp_path, gated):
    gate, entered = gated
    s = syncer.Syncer()
    j = journal.Journal(tmp_path, "f1", {"fleet": "f1"}, writer=None, syncer=s)
    try:
        path = _success(j, tmp_path, "a")
        t0 = time.monotonic()
        j.turn(t0 + journal.FLUSH_S)  # the line written, its fsync asked of the thread
        assert entered.wait(10)
        for _ in range(5):  # turns while the fsync is held: none waits for it
            j.turn(time.monotonic() + journal.FLUSH_S)
        assert time.monotonic() - t0 < 5
        assert '"k":"done","step":"a"' in j.path.read_text()  # written (not yet durable)
        assert not os.path.exists(path)  # the marker waits for the fsync
        gate.set()
        _turn_until(j, 10, lambda: os.path.exists(path))
        assert records.read_done(tmp_path, "a")["outcome"] == "succeeded"
    finally:
        gate.set()
        j.close()
        s.close()


def test_a_sync_on_the_loop_covers_an_fsync_in_flight_and_hands_its_files_over_first(tmp_path, gated):
    """A step's success then its failure's final record (which drops the marker), owed
    across two flushes: the first fsync held on the thread, the second made on the loop
    (as at a rotation, or at `fleet down`). The marker is written, then dropped, in
    that order, whatever the held fsync does after."""
    gate, entered = gated
    s = syncer.Syncer()
    w = markwriter.Writer(tmp_path, journal.put, store.unlink_done, n=1, bound=100)
    j = journal.Journal(tmp_path, "f1", {"fleet": "f1"}, writer=w, syncer=s)
    try:
        path = _success(j, tmp_path, "a")
        j.turn(time.monotonic() + journal.FLUSH_S)
        assert entered.wait(10)
        final = f"{store.key(tmp_path, 'a')}/{records.FINAL}"
        j.append({"k": "final", "step": "a", "rec": {"outcome": "failed"}, "drop": True})
        j.owe(final, {"outcome": "failed"}, "a", drop=True)
        j.sync()  # on the loop, while the thread's fsync is held
        assert w.drain(30)
        assert os.path.exists(final) and not os.path.exists(path)
        gate.set()
        s.idle()
        j.turn(time.monotonic() + journal.FLUSH_S)  # the superseded fsync's end hands nothing again
        assert w.drain(30) and not os.path.exists(path)
    finally:
        gate.set()
        j.close()
        w.close(5)
        s.close()


def test_a_settle_asks_for_the_fsync_and_its_mark_is_reached_only_once_a_later_fsync_covers_it(tmp_path, gated):
    """What a finished submission's progress answer asks (fleet.control.recording.durable):
    lines written after the fsync in flight was asked are not covered by it."""
    gate, entered = gated
    s = syncer.Syncer()
    j = journal.Journal(tmp_path, "f1", {"fleet": "f1"}, writer=None, syncer=s)
    try:
        first = _success(j, tmp_path, "a")
        assert not j.settled(j.settle(time.monotonic()))  # asked at once, not after FLUSH_S
        assert entered.wait(10)
        second = _success(j, tmp_path, "b")  # written while the first fsync is held
        mark = j.settle(time.monotonic())
        assert not j.settled(mark) and not os.path.exists(first)
        gate.set()
        s.idle()
        deadline = time.monotonic() + 10
        while not j.settled(mark):
            assert time.monotonic() < deadline, "the second line's fsync was never asked"
            j.settle(time.monotonic())
            time.sleep(0.005)
        assert os.path.exists(first) and os.path.exists(second)  # (no writer: written on landing)
        assert j.settled(j.settle(time.monotonic()))  # nothing new: reached without another fsync
    finally:
        gate.set()
        j.close()
        s.close()


def test_a_failed_fsync_on_the_thread_is_raised_on_the_loop_and_loses_nothing(tmp_path, monkeypatch):
    real, failing = os.fsync, threading.Event()

    def fsync(fd):
        if failing.is_set() and threading.current_thread().name == "fleet-journal-fsync":
            raise OSError(28, "No space left on device")
        real(fd)
    monkeypatch.setattr(syncer.os, "fsync", fsync)
    s = syncer.Syncer()
    j = journal.Journal(tmp_path, "f1", {"fleet": "f1"}, writer=None, syncer=s)
    try:
        path = _success(j, tmp_path, "a")
        failing.set()
        j.turn(time.monotonic() + journal.FLUSH_S)
        s.idle()
        with pytest.raises(OSError, match="No space left on device"):
            j.turn(time.monotonic() + journal.FLUSH_S)
        assert not os.path.exists(path)
        failing.clear()  # the filesystem recovers: the next fsync hands the marker over
        _turn_until(j, 10, lambda: os.path.exists(path))
    finally:
        j.close()
        s.close()


def test_the_syncer_makes_what_was_asked_in_order_and_its_thread_ends_with_it(tmp_path):
    s = syncer.Syncer()
    fds = [os.open(tmp_path / f"f{i}", os.O_WRONLY | os.O_CREAT) for i in range(3)]
    try:
        tickets = [s.ask(fd) for fd in fds]
        s.idle()
        assert all(s.done(t) for t in tickets) and not s.done(tickets[-1] + 1)
    finally:
        s.close()
        for fd in fds:
            os.close(fd)
    assert not s._thread.is_alive()  # (other tests' fleets in this process may hold syncers of their own)


def test_an_fsync_that_fails_oddly_is_an_oserror_for_the_loop_and_the_thread_goes_on(tmp_path, monkeypatch):
    real, calls = os.fsync, []

    def fsync(fd):
        calls.append(fd)
        if len(calls) == 1:
            raise ValueError("not what an fsync raises")
        real(fd)
    monkeypatch.setattr(syncer.os, "fsync", fsync)
    s = syncer.Syncer()
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        first = s.ask(fd)
        s.idle()
        with pytest.raises(OSError, match="not what an fsync raises"):
            s.done(first)
        second = s.ask(fd)
        s.idle()
        assert s.done(second) and len(calls) == 2
    finally:
        s.close()
        os.close(fd)


def _statuses_of_a_slow_run(tmp_path, started, fsync_ms: int, name: str, steps: int, nodes: int) -> list:
    """`fleet up` whose every journal fsync takes fsync_ms (as on a sick parallel
    filesystem), `fleet run` of `steps` steps `name/1..` of 0.1 s, and `fleet status` asked every
    50 ms until the run ends: each answer's (seconds it took, counts). The run succeeded,
    every step was audited and has its marker, and nothing is left."""
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "{name}"
run_dir = "{run_dir}"
[[steps]]
id = "{name}/{{i}}"
array = "1-{steps}"
call = "fleet_steps:nap"
args = {{ seconds = 0.1 }}
""")
    fleet("up", "--local", "--run-dir", str(run_dir), "--nodes", str(nodes), cwd=tmp_path, check=True, timeout=120,
          environ={syncer.SLEEP_ENV: str(fsync_ms)})
    answers = []
    try:
        client = Client(find(run_dir))
        runner = started("run", str(suite), "--run-dir", str(run_dir))
        deadline = time.monotonic() + 120
        while runner.poll() is None and time.monotonic() < deadline:
            t0 = time.monotonic()
            try:
                counts = client.ask(P.Status(), timeout=30).status.get("counts", {})
            except FleetError:
                counts = {}
            answers.append((time.monotonic() - t0, counts))
            time.sleep(0.05)
        code, out, err = finish(runner, timeout=120)
        assert code == 0, out + err
        client.close()
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
    audited = json.loads(fleet("audit", str(run_dir), "--json", cwd=tmp_path, timeout=60).stdout)["steps"]
    assert len(audited) == steps and all(records.read_done(run_dir, f"{name}/{i}") for i in range(1, steps + 1))
    assert_nothing_left(run_dir)
    return answers


def test_a_fleet_whose_journal_fsyncs_take_seconds_answers_status_at_once_and_records_every_step(tmp_path, started):
    """Every fsync of the journal takes 3 s. Made on the loop, each held every status
    answer for up to that long; off it, the answers come at once while the steps run,
    and every step's marker is still written."""
    took = [t for t, _ in _statuses_of_a_slow_run(tmp_path, started, 3000, "slow", 40, nodes=2)]
    assert len(took) >= 10, took
    # Made on the loop, the median answer waited about half of a 3 s fsync.
    assert statistics.median(took) < 1.0, sorted(took)


def test_a_finished_submission_waits_for_its_fsync_without_holding_the_loop(tmp_path, started):
    """A submission whose steps have all ended is said finished only once their lines
    are durable and their markers written. Its client asks at each progress poll; on a
    sick parallel filesystem (every fsync 5 s) that ask used to fsync on the loop, so a
    status answer in the submission's tail waited for it (4.96 s)."""
    answers = _statuses_of_a_slow_run(tmp_path, started, 5000, "tail", 4, nodes=1)
    tail = [t for t, counts in answers if counts.get("succeeded") == 4]  # every step ended: the tail
    # The tail lasts at least one fsync (the steps' lines were written after the last one).
    assert len(tail) >= 5, tail
    assert max(tail) < 2.5, sorted(tail)
