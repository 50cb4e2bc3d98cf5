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

import pytest

from fleetharness import assert_nothing_left, env, fleet, wait_for, write_suite
from fleetharness import records as event_records

from fleet.control import journal, markwriter, nodemarkers, store
from fleet.wire import events as E
from fleet.node import markers as node_markers
from fleet.wire import messages as P
from fleet.wire import records


def _item(run_dir: Path, step: str, final: bool = False, drop: bool = False) -> tuple:
    d = records.fleet_dir(run_dir, step)
    name = records.FINAL if final else records.DONE
    rec = {"outcome": "failed" if final else "succeeded", "step": step}
    return (f"{d}/{name}", rec if final else journal.encode(rec), drop, step, None)


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
        path, rec, *_ = _item(tmp_path, "a")
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


OPENS_SUITE = """
[suite]
name = "off-loop"
[[steps]]
id = "s/{i}"
array = "1-30"
call = "fleet_steps:count_runs"
[[steps]]
id = "bad"
call = "fleet_steps:always_fails"
"""


def _opens(tmp_path, started, extra: dict) -> tuple[Path, list]:
    """A 2-node `fleet run` of OPENS_SUITE with the audit hook: (run_dir, [(pid, thread, path)])."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    opens = tmp_path / "opens.txt"
    suite = write_suite(tmp_path / "s.toml", OPENS_SUITE)
    run_dir = tmp_path / "run"
    e = env()
    p = started("run", str(suite), "--run-dir", str(run_dir), "--nodes", "2",
                extra_env={"PYTHONPATH": f"{hook}{os.pathsep}{e['PYTHONPATH']}", "FLEET_TEST_OPEN_LOG": str(opens),
                           **extra})
    out, err = p.communicate(timeout=120)
    assert p.returncode == 1, out + err  # `bad` failed
    assert_nothing_left(run_dir)
    return run_dir, [(int(pid), who, path) for pid, who, path in
                     (line.split(" ", 2) for line in opens.read_text().splitlines())]


def test_each_done_marker_is_written_by_the_agent_of_the_node_that_ran_its_step_not_by_the_coordinator(
        tmp_path, started):
    """Fails on the code before fleet.control.nodemarkers: there the coordinator's threads wrote them."""
    run_dir, seen = _opens(tmp_path, started, {})
    recs = event_records(run_dir)
    coord = [r.pid for r in recs if isinstance(r, E.FleetStarting)][0]
    agent_of = {r.pid: r.node for r in recs if isinstance(r, E.NodeJoined)}
    ran_on = {r.step: r.node for r in recs if isinstance(r, E.Exit) and r.outcome == "succeeded"}
    assert len(ran_on) == 30 and len(set(ran_on.values())) == 2, ran_on  # both nodes ran some
    mine = [(who, Path(path).name) for pid, who, path in seen if pid == coord]
    assert mine and {name for _, name in mine} == {"final.json"}, mine  # `bad`'s, on a writer thread
    assert {who for who, _ in mine} <= {f"fleet-markers-{i}" for i in range(markwriter.THREADS)}
    by_agents = {(agent_of.get(pid), Path(path).parent.parent.relative_to(run_dir / "steps").as_posix(), who)
                 for pid, who, path in seen if path.endswith("done.json")}
    assert {(node, step) for node, step, _ in by_agents} == set((n, s) for s, n in ran_on.items())
    assert {who for _, _, who in by_agents} <= {"main", "fleet-agent-markers"}  # (its loop; its thread once slow)
    assert all((run_dir / "steps" / step / ".fleet" / records.DONE).exists() for step in ran_on)


def test_with_markers_on_the_coordinator_its_loop_thread_opens_no_done_marker_or_final_file(tmp_path, started):
    """Fails on the code before fleet.control.markwriter: there the loop wrote them."""
    run_dir, seen = _opens(tmp_path, started, {"FLEET_MARKERS_ON": "coordinator"})
    coord = [r.pid for r in event_records(run_dir) if isinstance(r, E.FleetStarting)][0]
    mine = [(who, path) for pid, who, path in seen if pid == coord]
    assert sorted(Path(path).name for _, path in mine) == ["done.json"] * 30 + ["final.json"]
    on_loop = [path for who, path in mine if who == "main"]
    assert not on_loop, f"the loop's thread opened {len(on_loop)} of them, e.g. {on_loop[:3]}"
    assert {who for who, _ in mine} <= {f"fleet-markers-{i}" for i in range(markwriter.THREADS)}


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


@pytest.mark.parametrize("markers_on", ["nodes", "coordinator"])
def test_a_fleet_let_into_the_run_directory_while_the_holders_markers_are_queued_runs_none_of_their_steps_again(
        tmp_path, started, markers_on):
    """The lease holder's markers take 1 s a file (one thread, on its nodes' agents or
    on the coordinator): when a second fleet registers, several steps have succeeded
    there with their markers still queued. The holder claims those too and says them
    ended, so the newcomer waits for their markers instead of running them again:
    every step runs to its end once."""
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
    first = started("run", str(suite), "--nodes", "2",
                    extra_env={journal.SLEEP_ENV: "1000", markwriter.THREADS_ENV: "1", nodemarkers.ENV: markers_on})
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


def test_the_markers_a_lost_node_had_not_said_written_are_written_by_the_coordinator(tmp_path, started):
    """Each marker write takes 1.5 s (the test hook, on nodes and coordinator alike), so
    a node's agent has markers in hand when it is killed -9. The coordinator loses the
    node (missed heartbeats) and its threads write what that agent had not said written:
    every success ends with its marker, written by the dead node or by the coordinator."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    opens = tmp_path / "opens.txt"
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "lost-markers"
[[steps]]
id = "s/{i}"
array = "1-8"
call = "fleet_steps:count_runs"
""")
    run_dir = tmp_path / "run"
    e = env()
    p = started("run", str(suite), "--run-dir", str(run_dir), "--nodes", "2", "--heartbeat", "0.2",
                "--heartbeat-timeout", "2",
                extra_env={"PYTHONPATH": f"{hook}{os.pathsep}{e['PYTHONPATH']}", "FLEET_TEST_OPEN_LOG": str(opens),
                           journal.SLEEP_ENV: "1500"})
    wait_for(lambda: len(journal_done(run_dir)) == 8, 60, "eight successes in the journal")
    recs = event_records(run_dir)
    ran_on = {r.step: r.node for r in recs if isinstance(r, E.Exit) and r.outcome == "succeeded"}
    victim = ran_on["s/1"]
    agent = [r.pid for r in recs if isinstance(r, E.NodeJoined) and r.node == victim][0]
    os.kill(agent, signal.SIGKILL)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, out + err
    recs = event_records(run_dir)
    assert [r.node for r in recs if isinstance(r, E.NodeLost)] == [victim]
    coord = [r.pid for r in recs if isinstance(r, E.FleetStarting)][0]
    by_coord = {Path(path).parent.parent.name for pid, who, path in
                (line.split(" ", 2) for line in opens.read_text().splitlines()) if int(pid) == coord}
    lost_ones = {s.split("/")[1] for s, n in ran_on.items() if n == victim}
    assert by_coord and by_coord <= lost_ones, (by_coord, lost_ones)  # taken back from the lost node only
    assert all(records.read_done(run_dir, s) is not None for s in ran_on)
    assert_nothing_left(run_dir)


def test_a_file_of_a_step_whose_marker_a_node_has_waits_for_it_and_a_gone_nodes_markers_go_to_the_threads(tmp_path):
    """The writer's bookkeeping with nodes (fleet.control.nodemarkers), the node played by
    this test: a success's marker goes to its node, not to the threads; a final that
    drops it waits until the node says it wrote the marker, so the drop is never
    overtaken; a ticket is reached only once both are on disk; and what a node that is
    gone was given and did not say written, the threads write."""
    sent = []

    class Transport:
        ride = None

        def send(self, ident, msg):
            sent.append((ident, msg))
            return True

    agents = {"n1": _Agent(), "n2": _Agent()}
    w = markwriter.Writer(tmp_path, journal.put, store.unlink_done, n=2, bound=100)
    nodes = nodemarkers.attach(w, Transport(), agents)
    d = records.fleet_dir(tmp_path, "a")
    try:
        a = (*_item(tmp_path, "a")[:4], "n1")
        w.add([a])
        assert markwriter.read_done(tmp_path, "a") is not None  # this fleet's reads see it queued
        msg = P.decode(nodes.ride(b"n1"))
        assert msg.files == [[a[0], a[1]]] and msg.last == 1 and not sent
        ticket = w.ticket()
        w.add([_item(tmp_path, "a", final=True, drop=True)])  # `a` ran again here and failed
        time.sleep(0.3)  # (the threads are idle: the final waits for the marker, not for them)
        assert not (d / records.FINAL).exists() and w.depth() == 2 and not w.reached(ticket)
        for path, text in msg.files:  # the node writes it, and says so
            node_markers.put(path, text)
        w.written_on("n1", P.MarkersWritten(upto=1))
        wait_for(lambda: w.reached(ticket), 10, "the final written after the marker")
        assert (d / records.FINAL).exists() and not (d / records.DONE).exists()
        assert markwriter.read_done(tmp_path, "a") is None
        w.add([(*_item(tmp_path, "b")[:4], "n2")])
        P.decode(nodes.ride(b"n2"))
        agents["n2"].alive = False  # lost, before it said anything
        w.node_gone("n2")
        w.add([(*_item(tmp_path, "c")[:4], "n2")])  # nothing more is given to it
        assert b"n2" not in nodes.out
        wait_for(lambda: not w.depth(), 10, "the threads wrote b's and c's markers")
        assert records.read_done(tmp_path, "b") is not None and records.read_done(tmp_path, "c") is not None
        assert (nodes.on_nodes, nodes.taken_back) == (1, 1)
    finally:
        w.close(5)


class _Agent:
    def __init__(self):
        self.alive = True


def test_markers_that_could_not_be_sent_to_a_node_wait_to_be_given_again_with_the_same_numbers():
    """A node's queue full (the transport's send says False): the markers are not counted
    as given, so nothing waits for a node's word on files it never got."""
    answers, sent = [False, True], []

    def send(ident, msg):
        sent.append(msg)
        return answers.pop(0)

    nodes = nodemarkers.NodeMarkers(send, lambda node: True)
    items = [(f"/x/{s}/done.json", "{}", False, s, "n1") for s in ("a", "b")]
    for item in items:
        nodes.add("n1", item)
    nodes.send_all()
    assert nodes.out[b"n1"] == [(1, items[0]), (2, items[1])] and not nodes.sent[b"n1"]
    nodes.send_all()
    assert sent[1].files == sent[0].files and sent[1].last == 2 and b"n1" not in nodes.out
    assert nodes.said("n1", P.MarkersWritten(upto=2)) == (items, []) and nodes.pending == 0


def test_markers_that_found_no_message_to_ride_go_alone_once_they_waited_the_hold_and_not_before(monkeypatch):
    # (A hold long enough that a loaded machine's preemption between n3's add and the
    # tick below cannot make n3's look waited too: 50 ms could.)
    monkeypatch.setattr(nodemarkers, "HOLD_S", 0.5)
    sent = []
    nodes = nodemarkers.NodeMarkers(lambda ident, msg: sent.append(ident) or True, lambda node: True)
    for node in ("n1", "n2"):
        nodes.add(node, (f"/x/{node}/done.json", "{}", False, f"s-{node}", node))
    time.sleep(0.6)  # (past the hold)
    nodes.add("n3", ("/x/n3/done.json", "{}", False, "s-n3", "n3"))
    nodes.tick(time.monotonic())
    assert sent == [b"n1", b"n2"] and list(nodes.out) == [b"n3"]  # n3's has not waited the hold yet
