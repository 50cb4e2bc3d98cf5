"""Done markers and final.json written off the coordinator's loop (fleet.control.markwriter):
the writer's threads on real files (order per step, back-pressure, what the fleet's own
reads see while a file is queued), and real fleets through real processes: the loop's
thread opens no marker, a kill -9 while the writer is behind loses nothing and runs
nothing twice, a step submitted again while its marker is queued is not run again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from fleetharness import assert_nothing_left, env, fleet, wait_for, write_suite
from fleetharness import records as event_records

from fleet.control import journal, markwriter, store
from fleet.wire import events as E
from fleet.wire import records


def _item(run_dir: Path, step: str, final: bool = False, drop: bool = False) -> tuple:
    d = records.fleet_dir(run_dir, step)
    name = records.FINAL if final else records.DONE
    rec = {"outcome": "failed" if final else "succeeded", "step": step}
    return (f"{d}/{name}", rec if final else journal.encode(rec), drop, step)


def test_the_writer_keeps_each_steps_files_in_order_and_makes_the_loop_wait_only_past_its_bound(tmp_path):
    w = markwriter.Writer(tmp_path, journal.put, store.unlink_done, n=4, bound=16)
    try:
        steps = [f"s/{i}" for i in range(300)]
        owed = []
        for i, s in enumerate(steps):
            owed.append(_item(tmp_path, s))
            if i % 2 == 0:  # a final that replaces the success: its marker goes, after it was written
                owed.append(_item(tmp_path, s, final=True, drop=True))
        w.add(owed)
        assert w.depth() <= 16  # the loop came back once the queue was under its bound
        assert w.drain(60)
        f = w.figures()
        assert f["markers_queued"] == 0 and f["markers_waits"] == 1 and f["markers_queued_most"] == len(owed)
        for i, s in enumerate(steps):
            d = records.fleet_dir(tmp_path, s)
            assert (d / records.DONE).exists() == (i % 2 == 1), s
            assert (d / records.FINAL).exists() == (i % 2 == 0), s
        assert not w.queued
    finally:
        w.close(5)


def test_the_fleets_own_reads_see_a_queued_marker_as_written_and_a_queued_drop_as_gone(tmp_path):
    gate = threading.Event()

    def slow_put(path, rec):
        gate.wait(30)
        journal.put(path, rec)

    w = markwriter.Writer(tmp_path, slow_put, store.unlink_done, n=1, bound=100)
    try:
        journal.put(_item(tmp_path, "b")[0], _item(tmp_path, "b")[1])  # an older success on disk
        w.add([_item(tmp_path, "a"), _item(tmp_path, "b", final=True, drop=True)])
        assert records.read_done(tmp_path, "a") is None  # not on disk yet
        assert markwriter.read_done(tmp_path, "a")["outcome"] == "succeeded"
        assert records.read_done(tmp_path, "b") is not None and markwriter.read_done(tmp_path, "b") is None
        assert sorted(w.steps()) == ["a", "b"]
        gate.set()
        assert w.drain(30)
        assert markwriter.read_done(tmp_path, "a") == records.read_done(tmp_path, "a")
        assert records.read_done(tmp_path, "b") is None and not w.steps()
    finally:
        gate.set()
        w.close(5)
    assert markwriter.queued_in(tmp_path) == {}


def test_a_marker_owed_but_not_yet_flushed_is_already_seen_by_the_fleets_own_reads(tmp_path):
    """Between a step's exit and the journal's next fsync (up to a loop turn after
    FLUSH_S), its marker is owed but not handed to the threads; a suite submitted again
    in that window must find the step done (it ran again, before, now and then)."""
    w = markwriter.Writer(tmp_path, journal.put, store.unlink_done, n=1, bound=100)
    j = journal.Journal(tmp_path, "f1", {"k": "fleet", "fleet": "f1"}, writer=w)
    try:
        path, rec, _, _ = _item(tmp_path, "a")
        j.owe(path, rec, "a")
        assert records.read_done(tmp_path, "a") is None  # nothing durable, nothing written
        assert markwriter.read_done(tmp_path, "a")["outcome"] == "succeeded"
        j.sync()
        assert w.drain(30)
        assert records.read_done(tmp_path, "a") == markwriter.read_done(tmp_path, "a")
        assert not w.steps()
    finally:
        j.close()
        w.close(5)


# An audit hook (PEP 578) in every process of the fleet: each open of a done marker or a
# final.json for writing is noted with the process and whether its thread is the main one
# (the coordinator's loop). It sees os.open and open() whatever fleet's version does.
SITECUSTOMIZE = '''
import os, sys, threading
_path = os.environ.get("FLEET_TEST_OPEN_LOG")
if _path:
    _fd = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    def _hook(event, args):
        if event != "open" or not args or not isinstance(args[0], str):
            return
        if not args[0].endswith(("/.fleet/done.json", "/.fleet/final.json")):
            return
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        mode = args[1] if len(args) > 1 and isinstance(args[1], str) else ""
        if flags & (os.O_WRONLY | os.O_RDWR) or any(c in mode for c in "wax+"):
            t = threading.current_thread()
            who = "main" if t is threading.main_thread() else t.name
            os.write(_fd, ("%d %s %s\\n" % (os.getpid(), who, args[0])).encode())
    sys.addaudithook(_hook)
'''


def test_the_coordinators_loop_thread_opens_no_done_marker_or_final_file(tmp_path, started):
    """Fails on the code before fleet.control.markwriter: there the loop wrote them."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    opens = tmp_path / "opens.txt"
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "off-loop"
[[steps]]
id = "s/{i}"
array = "1-30"
call = "fleet_steps:count_runs"
[[steps]]
id = "bad"
call = "fleet_steps:always_fails"
""")
    run_dir = tmp_path / "run"
    e = env()
    p = started("run", str(suite), "--run-dir", str(run_dir), "--nodes", "2",
                extra_env={"PYTHONPATH": f"{hook}{os.pathsep}{e['PYTHONPATH']}", "FLEET_TEST_OPEN_LOG": str(opens)})
    out, err = p.communicate(timeout=120)
    assert p.returncode == 1, out + err  # `bad` failed
    coord = [r.pid for r in event_records(run_dir) if isinstance(r, E.FleetStarting)][0]
    seen = [line.split(" ", 2) for line in opens.read_text().splitlines()]
    mine = [(who, path) for pid, who, path in seen if int(pid) == coord]
    assert sorted(Path(path).name for _, path in mine) == ["done.json"] * 30 + ["final.json"]
    on_loop = [path for who, path in mine if who == "main"]
    assert not on_loop, f"the loop's thread opened {len(on_loop)} of them, e.g. {on_loop[:3]}"
    assert {who for who, _ in mine} <= {f"fleet-markers-{i}" for i in range(markwriter.THREADS)}
    assert_nothing_left(run_dir)


def journal_done(run_dir: Path) -> set:
    out = set()
    for p in (run_dir / records.JOURNALS).glob("*.jsonl"):
        for raw in p.read_text().splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if line.get("k") == "done":
                out.add(line["step"])
    return out


BEHIND = """
[suite]
name = "behind"
[[steps]]
id = "f/{i}"
array = "1-20"
call = "fleet_steps:count_runs"
[[steps]]
id = "slow"
call = "fleet_steps:nap"
args = { seconds = SECONDS }
"""


def test_a_coordinator_killed_while_its_marker_writer_is_behind_loses_no_success_and_runs_nothing_twice(
        tmp_path, started):
    """The writer made slow (1 s a file, one thread: fleet.control.journal's
    emulation hook), SIGKILL once every fast step's success is in the journal and most
    of their markers are not on disk; `slow` is running. The rerun writes the missing
    markers from the journal (replay) and skips every fast step; `slow`, which never
    finished, was not marked done and runs again."""
    suite = write_suite(tmp_path / "s.toml", BEHIND.replace("SECONDS", "60"))
    run_dir = tmp_path / "run"
    fast = {f"f/{i}" for i in range(1, 21)}
    p = started("run", str(suite), "--run-dir", str(run_dir), "--nodes", "2",
                extra_env={journal.SLEEP_ENV: "1000", markwriter.THREADS_ENV: "1"})
    wait_for(lambda: journal_done(run_dir) >= fast, 60, "every fast step's success in the journal")
    on_disk = {s for s in fast if records.read_done(run_dir, s) is not None}
    os.kill([r.pid for r in event_records(run_dir) if isinstance(r, E.FleetStarting)][0], signal.SIGKILL)
    assert_nothing_left(run_dir, timeout=10.0)
    p.communicate(timeout=30)
    assert len(on_disk) < len(fast) - 5, f"the writer was not behind: {len(on_disk)} markers written"
    assert records.read_done(run_dir, "slow") is None  # never done: it did not finish
    assert sorted((run_dir / "runs.txt").read_text().split()) == sorted(fast)

    again = write_suite(tmp_path / "again.toml", BEHIND.replace("SECONDS", "0.2"))  # the fast steps as they were
    r = fleet("run", str(again), "--run-dir", str(run_dir), "--nodes", "2", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted((run_dir / "runs.txt").read_text().split()) == sorted(fast)  # skipped: done, from the journal
    for s in fast:
        assert records.read_done(run_dir, s)["outcome"] == "succeeded"
    assert records.read_done(run_dir, "slow")["outcome"] == "succeeded"  # ran again, to its end
    a = json.loads(fleet("audit", str(run_dir), "--json", cwd=tmp_path, timeout=60).stdout)
    assert {s: a["steps"][s]["successes"] for s in fast} == dict.fromkeys(fast, 1)
    assert not a["duplicates"]
    assert_nothing_left(run_dir)


def test_a_step_submitted_again_while_its_marker_is_queued_is_not_run_again(tmp_path):
    """`fleet up` whose writer takes 8 s a file: a step succeeds, and the same suite is
    submitted again while its marker is still queued (its Submitted record is older than
    the marker file). The fleet's own check sees the queued marker: the step is kept,
    not run again."""
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "again"
[[steps]]
id = "a"
call = "fleet_steps:count_runs"
""")
    run_dir = tmp_path / "run"
    e = {**env(), journal.SLEEP_ENV: "8000", markwriter.THREADS_ENV: "1"}
    up = subprocess.run([sys.executable, "-m", "fleet", "up", "--run-dir", str(run_dir), "--nodes", "1"], cwd=tmp_path,
                        env=e, capture_output=True, text=True, timeout=60, start_new_session=True)
    assert up.returncode == 0, up.stdout + up.stderr
    clients = []
    try:
        argv = [sys.executable, "-m", "fleet", "run", str(suite), "--run-dir", str(run_dir)]
        clients.append(subprocess.Popen(argv, cwd=tmp_path, env=env(), stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, start_new_session=True))
        wait_for(lambda: [r for r in event_records(run_dir) if isinstance(r, E.Exit) and r.step == "a"], 60,
                 "a to succeed")
        assert records.read_done(run_dir, "a") is None  # queued
        clients.append(subprocess.Popen(argv, cwd=tmp_path, env=env(), stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, start_new_session=True))
        outs = [c.communicate(timeout=90) for c in clients]
        assert [c.returncode for c in clients] == [0, 0], outs
        subs = [r for r in event_records(run_dir) if isinstance(r, E.Submitted)]
        marker = records.fleet_dir(run_dir, "a") / records.DONE
        assert len(subs) == 2 and subs[1].t < marker.stat().st_mtime  # checked while queued
        assert (run_dir / "runs.txt").read_text().split() == ["a"]
        assert len([r for r in event_records(run_dir) if isinstance(r, E.Start) and r.step == "a"]) == 1
    finally:
        for c in clients:
            if c.poll() is None:
                os.killpg(c.pid, signal.SIGKILL)
                c.communicate()
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
    assert_nothing_left(run_dir)


def test_a_fleet_let_into_the_run_directory_while_the_holders_markers_are_queued_runs_none_of_their_steps_again(
        tmp_path, started):
    """The lease holder's writer takes 1 s a file (one thread): when a second fleet
    registers, several steps have succeeded there with their markers still queued. The
    holder claims those too and says them ended, so the newcomer waits for their
    markers instead of running them again: every step runs to its end once."""
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "share-queued"
run_dir = "run"
[[steps]]
id = "s/{i}"
array = "0-11"
call = "fleet_steps:once"
args = { seconds = 0.2 }
""")
    run_dir = tmp_path / "run"
    first = started("run", str(suite), "--nodes", "2", extra_env={journal.SLEEP_ENV: "1000", markwriter.THREADS_ENV: "1"})
    wait_for(lambda: len(journal_done(run_dir)) >= 6, 60, "six successes in the holder's journal")
    queued = {s for s in journal_done(run_dir) if records.read_done(run_dir, s) is None}
    second = started("run", str(suite), "--nodes", "2")
    outs = [p.communicate(timeout=120) for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outs
    assert len(queued) >= 3, f"too few markers were queued when the second fleet came: {queued}"
    ends = [line.split()[1] for line in (run_dir / "evidence.txt").read_text().splitlines() if line.startswith("end ")]
    assert sorted(ends) == sorted(f"s/{i}" for i in range(12))  # each step ran to its end once
    a = json.loads(fleet("audit", str(run_dir), "--json", cwd=tmp_path, timeout=60).stdout)
    assert a["ok"] and not a["duplicates"] and set(v["status"] for v in a["steps"].values()) == {"succeeded"}
    assert_nothing_left(run_dir)
