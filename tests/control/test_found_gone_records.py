"""The records around a fleet found gone, on real files (fleet.control.foundgone,
fleet.control.store): the finder's durable record, a fleet's look at its own standing,
a final outcome that removes only the success it replaces, and journal lines written
after another fleet sealed the journal."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from fleet.control import claimlog, foundgone, journal, markwriter, store
from fleet.control.lease import Lease
from fleet.core.suite import parse_suite
from fleet.wire import records


def dead_pid() -> int:
    """A pid no process of this host has (one that ran and was waited for)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(timeout=30)
    return p.pid


def marker(run_dir: Path, step: str, mid: str, fleet: str) -> Path:
    d = records.fleet_dir(run_dir, step)
    d.mkdir(parents=True, exist_ok=True)
    (d / records.DONE).write_text(json.dumps({"outcome": "succeeded", "spec": "x", "fleet": fleet, "id": mid}))
    return d / records.DONE


def spec_of(tmp_path: Path, step: str):
    return parse_suite({"steps": [{"id": step, "command": "true"}]}, tmp_path / "s.toml").steps[0]


def test_a_fleet_found_gone_holding_the_lease_is_said_gone_on_disk_before_its_steps_are_taken(tmp_path):
    root = tmp_path / ".fleet"
    root.mkdir()
    (root / "lease").write_text(json.dumps({"fleet": "held-1-aaa", "host": socket.gethostname(),
                                            "pid": dead_pid(), "generation": 1, "shared": True}))
    seen = []
    lease = Lease(tmp_path, "finder-2-bbb", 60.0)
    log = claimlog.ClaimLog(tmp_path, "finder-2-bbb", lease,
                            lambda fleet: seen.append(foundgone.read(tmp_path, fleet)))  # (what on_gone finds)
    assert not log.live("held-1-aaa")
    assert len(seen) == 1 and seen[0]["fleet"] == "held-1-aaa" and seen[0]["by"] == "finder-2-bbb", seen
    assert seen[0]["why"] == "its process is gone"


def test_a_fleet_that_ended_giving_its_lease_back_is_not_said_gone(tmp_path):
    (tmp_path / ".fleet").mkdir()
    log = claimlog.ClaimLog(tmp_path, "finder-2-bbb", Lease(tmp_path, "finder-2-bbb", 60.0), lambda fleet: None)
    assert not log.live("ended-1-aaa")
    assert foundgone.read(tmp_path, "ended-1-aaa") is None


def test_a_fleet_no_longer_stands_once_its_lease_is_taken_or_it_is_said_gone_or_its_registration_removed(tmp_path):
    holder = Lease(tmp_path, "holder-1-aaa", 60.0)
    holder.acquire()
    assert holder.holder
    later = time.monotonic() + 100  # (a refresh is due)
    before = os.stat(holder.path).st_mtime_ns
    time.sleep(0.01)  # (a later mtime than the lease's creation, on any file system clock)
    assert holder.keep(later) is None and os.stat(holder.path).st_mtime_ns > before  # it stands: refreshed
    sharer = Lease(tmp_path, "sharer-2-bbb", 60.0)
    holder.share()
    sharer.acquire()
    assert not sharer.holder and sharer.keep(later) is None
    os.unlink(sharer._reg_path())  # (another fleet found it stale: fleet.control.lease.others)
    assert "registration" in sharer.keep(later + 100)
    foundgone.mark(tmp_path, "holder-1-aaa", "other-3-ccc", {"refreshed": time.time() - 30})
    assert "found gone by fleet other-3-ccc" in holder.keep(later + 100)
    os.unlink(foundgone.path_of(tmp_path, "holder-1-aaa"))
    (tmp_path / ".fleet" / "lease").write_text(json.dumps({"fleet": "taker-4-ddd", "pid": 1, "generation": 2}))
    mtime = os.stat(holder.path).st_mtime_ns
    assert "fleet taker-4-ddd took it over" in holder.keep(later + 200)
    assert os.stat(holder.path).st_mtime_ns == mtime  # (the taker's lease is not refreshed by it)


def test_a_final_removes_only_the_success_it_replaces_not_one_another_fleet_wrote_since(tmp_path):
    run_dir, spec = tmp_path / "run", spec_of(tmp_path, "s")
    store.submitted(run_dir, "s", (), None)  # no success when this fleet looked
    done = marker(run_dir, "s", "theirs", "other")  # another fleet's, since (this one was found gone)
    store.write_final(run_dir, spec, "terminated", {"attempt": 1, "fleet": "me", "reason": "killed", "at": 1.0})
    assert done.exists()
    # A rerun that fails replaces the success this fleet saw, whoever wrote it (as before).
    store.submitted(run_dir, "s", (), json.loads(done.read_text()))
    store.write_final(run_dir, spec, "failed", {"attempt": 2, "fleet": "me", "reason": "exit 1", "at": 2.0})
    assert not done.exists()


def test_the_marker_threads_and_a_replay_remove_only_the_success_a_final_names(tmp_path):
    run_dir = tmp_path / "run"
    d = records.fleet_dir(run_dir, "s")
    done = marker(run_dir, "s", "newer", "other")
    w = markwriter.Writer(run_dir, journal.put, store.unlink_done, n=1, bound=100)
    try:
        w.add([(f"{d}/{records.FINAL}", {"outcome": "failed"}, "older", "s", None)])
        assert w.drain(30)
    finally:
        w.close(30)
    assert done.exists()
    # A dead fleet's journal replayed: its `final` line names the success it replaced.
    jdir = run_dir / records.JOURNALS
    jdir.mkdir(parents=True)
    (d / records.FINAL).unlink()
    for fleet, drop in (("dead-1-a", "older"), ("dead-2-b", True)):
        (jdir / f"{fleet}.jsonl").write_text(
            json.dumps({"k": "fleet", "fleet": fleet, "host": "h", "pid": 1, "t": 1.0}) + "\n"
            + json.dumps({"k": "final", "step": "s", "rec": {"outcome": "failed", "fleet": fleet}, "drop": drop,
                          "t": 2.0}) + "\n")
        journal.replay(run_dir, records.read_journals(run_dir, only=[f"{fleet}.jsonl"]), set(), "me")
        (d / records.FINAL).unlink()
        assert done.exists() == isinstance(drop, str), fleet  # (true: a fleet's before 2026-12-07, any marker)


def test_lines_a_fleet_wrote_after_another_sealed_its_journal_are_not_read(tmp_path):
    jdir = tmp_path / records.JOURNALS
    jdir.mkdir(parents=True)
    lines = [{"k": "fleet", "fleet": "gone-1-a", "host": "h", "pid": 1, "t": 1.0},
             {"k": "starts", "s": [["s", 1, 1]], "t": 2.0},
             {"k": "sealed", "by": "finder-2-b", "t": 3.0},
             {"k": "final", "step": "s", "rec": {"outcome": "lost", "fleet": "gone-1-a"}, "t": 4.0}]
    (jdir / "gone-1-a.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    js = records.read_journals(tmp_path)
    assert "s" not in js.outcome and js.each[0].sealed_by == "finder-2-b"
    assert "s" in js.each[0].running  # (what it had started before: as replayed)
