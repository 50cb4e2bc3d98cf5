"""Compacting the claims log (fleet.control.claimsnap) through real processes: a process
killed with SIGKILL at each stage of a compaction leaves a log that the fleets still
live and a fleet starting afresh read alike, and racing over it afterwards they each
take a disjoint share of the steps; racers that compact while they claim (several at
once) end with every step held once, every reading of the log agreeing with the
audit's, and a bounded number of files."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import time
from collections import Counter
from pathlib import Path

import pytest

from fleet.control import claimlog, claimsnap, fold
from fleet.control.lease import Lease

STEPS = [f"s/{i}" for i in range(300)]


def _log(run_dir: str, who: str, snap_async: bool = False) -> claimlog.ClaimLog:
    """`snap_async`: snapshots written by a thread, as in a coordinator (fleet.control.snapwriter)."""
    lease = Lease(Path(run_dir), who, 60.0)
    lease._register()  # live to the others while it runs (gone once its process is)
    log = claimlog.ClaimLog(Path(run_dir), who, lease, lambda fleet: None)
    log.snap_async = snap_async
    return log


def _doomed(run_dir: str, stage: str, wrote, go, snap_async: bool) -> None:
    """Claims the first 200 steps, five to a file, then compacts, killed at `stage`."""
    log = _log(run_dir, "doomed", snap_async)
    for i in range(0, 200, 5):
        log.claim(STEPS[i:i + 5], lambda s: None)
    claimsnap.say_position(log)
    wrote.set()
    go.wait()
    os.environ[claimsnap.FILES_ENV] = "8"
    os.environ[claimsnap.FAULT_ENV] = stage
    claimsnap.upkeep(log)
    if log.pending is not None:  # the thread writes, links and removes: killed there
        log.pending.thread.join()
    os._exit(3)  # not reached: the fault hook kills the process


def _racer(run_dir: str, who: str, steps, ready, barrier, done, results, compact: bool,
           snap_async: bool = False) -> None:
    if compact:
        os.environ[claimsnap.FILES_ENV] = "4"
    log = _log(run_dir, who, snap_async)
    if ready is not None:  # a fleet live before the crash: it read the log and said so
        log.follow()
        claimsnap.say_position(log)
        ready.set()
    barrier.wait()
    most = 0  # the most files this racer saw in the log
    me = int(who[len("racer"):]) if compact else 0
    for i in range(0, len(steps), 3):
        log.claim(steps[i:i + 3], lambda s: None)  # all at once: the race
        if not compact:
            continue
        # In rounds: the claims, then each racer's upkeep and look in turn (the bound
        # asserted by the test follows from this order, not from anyone's speed).
        barrier.wait()
        for turn in range(barrier.parties):
            if turn == me:
                claimsnap.upkeep(log)
                if log.pending is not None and snap_async != "free":  # its thread's work done in its turn
                    log.pending.thread.join()
                    claimsnap.settle(log)
                most = max(most, len(claimlog.batch_files(Path(run_dir))))
            barrier.wait()
    log.follow()
    results.put((who, sorted(log.mine), dict(log.holder), most))
    done.wait()  # stay live until every racer has claimed


def _shuffled(k: int) -> list[str]:
    mine = STEPS[:]
    random.Random(k).shuffle(mine)
    return mine


def _collect(procs, results, done, n: int) -> dict:
    try:
        got = [results.get(timeout=120) for _ in range(n)]
        done.wait(timeout=60)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join(timeout=30)
    return {who: (mine, holder, most) for who, mine, holder, most in got}


def assert_held_once(run_dir: Path, won: dict) -> None:
    held = Counter(s for mine, _, _ in won.values() for s in mine)
    assert set(held) == set(STEPS) and set(held.values()) == {1}, {s: n for s, n in held.items() if n != 1}
    truth = {s: who for who, (mine, _, _) in won.items() for s in mine}
    for who, (_, holder, _) in won.items():
        assert holder == truth, who  # every racer read the log alike
    assert {s: rec["fleet"] for s, rec in claimlog.holders(run_dir).items()} == truth


@pytest.fixture
def forked():
    """The test's forked processes: any still alive when it ends (an assertion failed
    before _collect) is killed, or it would wait at a barrier forever and, being a child
    multiprocessing joins at exit, hold the pytest worker."""
    ps: list = []
    yield ps
    for p in ps:
        if p.is_alive():
            p.kill()
            p.join(timeout=30)


@pytest.mark.parametrize("snap_async", [False, True], ids=["on_the_loop", "by_a_thread"])
@pytest.mark.parametrize("stage", ["written", "linked", "removed"])
def test_a_process_killed_at_each_stage_of_a_compaction_leaves_a_log_that_live_and_new_fleets_read_alike(
        tmp_path, stage, snap_async, forked):
    ctx = multiprocessing.get_context("fork")
    wrote, go, ready = ctx.Event(), ctx.Event(), ctx.Event()
    barrier, done, results = ctx.Barrier(2), ctx.Barrier(3), ctx.Queue()
    doomed = ctx.Process(target=_doomed, args=(str(tmp_path), stage, wrote, go, snap_async))
    forked.append(doomed)
    doomed.start()
    assert wrote.wait(60)
    # A fleet live before the crash, which read the doomed one's batches and said so.
    live = ctx.Process(target=_racer, args=(str(tmp_path), "live", _shuffled(1), ready, barrier, done, results,
                                            False))
    forked.append(live)
    live.start()
    assert ready.wait(60)
    go.set()
    doomed.join(60)
    assert doomed.exitcode == -9
    root = tmp_path / claimlog.CLAIMS
    names = os.listdir(root)
    heads = {n: json.loads((root / n).read_bytes().split(b"\n")[0]) for n in names if n.endswith(".json")}
    snaps = [n for n, h in heads.items() if h.get("snapshot")]
    if stage == "written":
        assert not snaps and [n for n in names if n.endswith(".snap.tmp")]
    else:
        assert snaps == ["000000040.json"]
        assert ("000000000.json" in names) == (stage == "linked")
    # Then the live fleet and a fleet starting now race for every step.
    fresh = ctx.Process(target=_racer, args=(str(tmp_path), "fresh", _shuffled(2), None, barrier, done, results,
                                             False))
    forked.append(fresh)
    fresh.start()
    won = _collect([live, fresh], results, done, 2)
    assert_held_once(tmp_path, won)


@pytest.mark.parametrize("snap_async", [False, True, "free"],
                         ids=["on_the_loop", "by_a_thread", "by_threads_left_to_run_while_they_claim"])
def test_racers_compacting_while_they_claim_hold_each_step_once_and_keep_the_log_bounded(tmp_path, snap_async):
    ctx = multiprocessing.get_context("fork")
    barrier, done, results = ctx.Barrier(4), ctx.Barrier(5), ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(str(tmp_path), f"racer{k}", _shuffled(k), None, barrier, done,
                                              results, True, snap_async)) for k in range(4)]
    for p in procs:
        p.start()
    won = _collect(procs, results, done, 4)
    assert_held_once(tmp_path, won)
    if snap_async == "free":
        return  # (how many files at a moment then depends on the threads' speed)
    files = claimlog.batch_files(tmp_path)
    last = int(files[-1].name[:-5])
    most = max(m for _, _, m in won.values())
    # Over a hundred claim turns were written. The bound holds whatever the timing: a
    # round writes at most 4 batches and 4 snapshots while the racers claim (one each,
    # from the claim's own upkeep) and 4 more in their turns; in the first turn of a round
    # that claimed anything the log has 4 files or more since the last snapshot, so that
    # racer compacts, and every other racer said in its turn of the last round that it
    # read past that round's claims. So a look sees at most the last round's turns'
    # snapshots (3) and this round's files (4 + 4 + 4), beside the 4 before a snapshot: 19.
    assert last >= 100 and len(files) <= most <= 19, (last, len(files), most)


def test_two_fleets_sharing_a_run_directory_for_many_claim_turns_keep_the_claims_log_and_journals_bounded(
        tmp_path, started, monkeypatch):
    """Two real `fleet run`s on one run directory, compacting every 8 claim files and
    rotating their journals every 4 KiB: every step ends once, the claims log is
    compacted again and again while both run and ends with a few files of the
    hundreds written (how many it holds at a moment also counts what a fleet writes
    while the other has not followed yet, up to FOLLOW_S: a burst of short steps
    writes a few hundred files a second, so that is not bounded here), each journal stays
    under its bound with the rest in sealed segments, and a rerun, alone, folds the
    segments and runs nothing again."""
    from fleetharness import assert_nothing_left, fleet, two_fleets_gated
    from test_batch_claims import SEGMENT, assert_each_ended_once, suite_of
    n = 1000
    steps = [f"s/{i}" for i in range(n)]
    # The steps wait at a gate until both fleets have started one: a loaded machine's first
    # fleet could otherwise run most of them alone, the log never shared for many turns.
    gate = tmp_path / "go"
    suite, run_dir = suite_of(tmp_path, n, 0.01, gate), tmp_path / "run"
    env = {claimsnap.FILES_ENV: "8", "FLEET_TEST_JOURNAL_ROTATE_BYTES": "4096"}
    first, second = two_fleets_gated(run_dir, gate, lambda: started("run", str(suite), "--nodes", "2", extra_env=env),
                                     lambda: started("run", str(suite), "--nodes", "2", extra_env=env), first_starts=2)
    most, lowest, removals = 0, 0, 0
    while first.poll() is None or second.poll() is None:  # (each look is a listing)
        files = claimlog.batch_files(run_dir)
        most = max(most, len(files))
        low = int(files[0].name[:-5]) if files else 0
        removals, lowest = removals + (low > lowest), max(lowest, low)
        time.sleep(0.02)
    outs = [p.communicate(timeout=120) for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outs
    assert_each_ended_once(run_dir, steps)
    files = claimlog.batch_files(run_dir)
    last = int(files[-1].name[:-5]) if files else 0
    # Never compacted, the log would hold every file written (most == last + 1).
    # At the end it holds what came after the last compaction: a burst may be dozens,
    # and more while a fleet's loop is held up and has not said it read past them
    # (claimsnap: 141 of 336 once, under the whole suite on 2 cores): so half, not a third.
    assert last >= 150 and removals >= 3 and most <= last and len(files) < last // 2, (last, removals, most, len(files))
    journals = tmp_path / "run" / ".fleet" / "journal"
    segments = [p for p in journals.iterdir() if SEGMENT.search(p.name)]
    sizes = [p.stat().st_size for p in journals.iterdir()]
    # Rotated past 4 KiB (plus the rest of a loop turn's lines): no file holds much of it.
    assert len(segments) >= 4 and max(sizes) <= sum(sizes) // 4, sorted(sizes)
    monkeypatch.setenv(fold.FOLD_FILES_ENV, "1")  # (folded at the next lone start, however few segments)
    rerun = fleet("run", str(suite), "--nodes", "1", cwd=tmp_path, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert (journals / "folded.jsonl").exists() and not [p for p in journals.iterdir() if SEGMENT.search(p.name)]
    assert_each_ended_once(run_dir, steps)  # nothing ran again
    assert_nothing_left(run_dir)


def test_a_coordinators_snapshot_is_written_by_a_thread_so_the_loop_returns_while_its_file_cannot_be_written(
        tmp_path):
    """The snapshot's temporary file is a FIFO nobody reads: opening it to write blocks
    until someone does. On the loop, the upkeep would block there; by a thread
    (fleet.control.snapwriter), the upkeep returns and the loop goes on reading the log
    until the thread is let go; the next snapshot then lands and the log reads alike."""
    import threading
    os.environ[claimsnap.FILES_ENV] = "8"
    try:
        log = _log(str(tmp_path), "loop", snap_async=True)
        log._try_at = 1 << 60  # no compaction while these claims are written
        for i in range(0, 60, 5):
            log.claim(STEPS[i:i + 5], lambda s: None)
        log.said.update(dict.fromkeys(STEPS[:10]))
        fifo = log.root / f".loop.{os.getpid()}.snap.tmp"
        os.mkfifo(fifo)
        upkeep = threading.Thread(target=claimsnap.upkeep, args=(log,), daemon=True)
        upkeep.start()
        upkeep.join(30)
        assert not upkeep.is_alive(), "the upkeep waited for the snapshot's file"
        assert log.pending is not None and not log.pending.decided.is_set()
        assert not [p for p in claimlog.batch_files(tmp_path) if b'"snapshot"' in p.read_bytes().split(b"\n")[0]]
        log.follow()  # the loop goes on meanwhile
        fd = os.open(fifo, os.O_RDONLY)  # let the thread go: it writes, and cannot fsync a FIFO
        try:
            while os.read(fd, 1 << 16):
                pass
        finally:
            os.close(fd)
        log.pending.thread.join(30)
        assert claimsnap.settle(log) is False and log.pending is None  # that one failed: nothing linked
        os.unlink(fifo)
        claimsnap.upkeep(log)  # the next one lands
        log.pending.thread.join(30)
        assert claimsnap.settle(log) is True and log.snapshots == 1
        files = claimlog.batch_files(tmp_path)
        assert len(files) == 1 and json.loads(files[0].read_bytes().split(b"\n")[0])["snapshot"]
        fresh = _log(str(tmp_path), "fresh")
        fresh.follow()
        assert fresh.holder == log.holder and fresh.said == log.said and len(log.holder) == 60
    finally:
        os.environ.pop(claimsnap.FILES_ENV, None)


def test_batches_written_and_read_while_a_snapshot_is_written_go_in_without_waiting_and_the_snapshot_holds_them(
        tmp_path):
    """The snapshot's thread is held (snapwriter.HOLD) after its first write: meanwhile the
    loop claims, says steps ended and reads another fleet's batch, none of it waiting for
    the thread; let go, the thread takes them in and links its snapshot after them, and a
    fleet starting afresh reads what the loop holds."""
    import threading
    from fleet.control import snapwriter
    os.environ[claimsnap.FILES_ENV] = "8"
    snapwriter.HOLD = threading.Event()
    try:
        log = _log(str(tmp_path), "loop", snap_async=True)
        other = _log(str(tmp_path), "other")
        log._try_at = other._try_at = 1 << 60  # no compaction but the one started below
        for i in range(0, 60, 5):
            log.claim(STEPS[i:i + 5], lambda s: None)
        log.said_ended(STEPS[0])
        log.say_ended()
        other.follow()
        claimsnap.say_position(other)
        claimsnap.upkeep(log)
        held = log.pending
        assert held is not None and held.of == log.next
        work = threading.Thread(target=lambda: (log.claim(STEPS[60:70], lambda s: None), log.said_ended(STEPS[1]),
                                                log.said_ended(STEPS[60]), log.say_ended()), daemon=True)
        work.start()
        work.join(30)
        assert not work.is_alive(), "a claim waited for the snapshot's thread"
        other.claim(STEPS[100:110], lambda s: None)
        log.follow()
        assert len(held.deltas) == 3 and not held.decided.is_set()
        snapwriter.HOLD.set()
        held.thread.join(30)
        assert claimsnap.settle(log) is True and held.at == held.of + 3 and log.next == held.at + 1
        files = claimlog.batch_files(tmp_path)
        # Removed: the files before the number it was begun at (where the other fleet had said it read).
        assert [f.name for f in files] == [f"{n:09d}.json" for n in range(held.of, held.at + 1)]
        assert json.loads(files[-1].read_bytes().split(b"\n")[0]) | {"at": 0, "pid": 0, "host": ""} == {
            "fleet": "loop", "snapshot": True, "steps": [], "of": held.at, "at": 0, "pid": 0, "host": "", "busy": {}}
        fresh = _log(str(tmp_path), "fresh")
        fresh.follow()
        assert fresh.holder == log.holder and fresh.said == log.said
        assert len(log.holder) == 80 and set(log.said) == {STEPS[0], STEPS[1], STEPS[60]}
    finally:
        snapwriter.HOLD = None
        os.environ.pop(claimsnap.FILES_ENV, None)
