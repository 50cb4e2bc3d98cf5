"""A full run directory through the real CLI, on a real file system that runs out: a
tmpfs mounted with few inodes (a file-count quota's EDQUOT and a full disk's ENOSPC take
the same path: fleet.node.diskfull). The first step whose set-up finds no room drains
the fleet (fleet.control.drain): nothing more starts, the step already running goes on
and succeeds, nothing is counted as an attempt or ends failed, and `fleet run` exits 4.
With room again, the rerun runs exactly the steps that had not succeeded."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from fleetharness import assert_nothing_left, events, finish, fleet, small_tmpfs, spawn, wait_for, write_suite
from fleetharness import records as event_records

from fleet.control.drain import FULL
from fleet.wire import events as E
from fleet.wire import records

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "5"]
STEPS = 120
IDS = [f"c{i:03d}" if i % 2 else f"p{i:03d}" for i in range(STEPS)]  # command and call steps, alternating


def full_suite(tmp_path: Path, flag: Path) -> Path:
    """`long` (first: priority 1) runs until the flag exists; then call and command steps
    that each need a few files of their own (directory, records, log)."""
    lines = ['[suite]', 'name = "full"', '[[steps]]', 'id = "long"', 'priority = 1',
             f'command = "while [ ! -e {flag} ]; do sleep 0.05; done"']
    for sid in IDS:
        lines += ['[[steps]]', f'id = "{sid}"', 'command = "true"' if sid[0] == "c" else 'call = "os:getpid"']
    return write_suite(tmp_path / "full.toml", "\n".join(lines) + "\n")


def test_a_full_run_directory_starts_nothing_more_lets_the_running_step_finish_uses_no_attempt_and_exits_4(tmp_path):
    flag = tmp_path / "flag"
    suite = full_suite(tmp_path, flag)
    with small_tmpfs(tmp_path / "mnt", inodes=300) as mnt:
        run_dir = mnt / "run"
        p = spawn("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--max-attempts", "1", *HB,
                  cwd=tmp_path)
        try:
            drained = wait_for(lambda: [e for e in events(run_dir) if e["kind"] == "drained"], timeout=90,
                               what="the fleet to drain on a full run directory")
            assert not [e for e in events(run_dir) if e["kind"] == "exit" and e["step"] == "long"]  # it runs on
        except BaseException:
            flag.touch()
            finish(p, timeout=90)  # (it ends once `long` does; killed by group if not) before the unmount
            raise
        flag.touch()
        code, out, err = finish(p, timeout=90)
        assert code == 4, out + err
        assert FULL in err and "free space" in err, err
        recs = event_records(run_dir)
        exits = {e.step: e for e in recs if isinstance(e, E.Exit)}
        assert exits["long"].outcome == "succeeded"  # started before, not stopped by the drain
        outcomes = {e.outcome for e in exits.values()}
        assert outcomes <= {"succeeded", "interrupted"}, outcomes  # nothing failed, nothing cancelled
        full = [e for e in exits.values() if e.outcome == "interrupted"]
        assert full and all(FULL in e.reason for e in full), full
        assert any("No space left on device" in e.reason for e in full), full
        [d] = [e for e in recs if isinstance(e, E.Drained)]
        assert FULL in d.reason and d.reason == drained[0]["reason"]
        done = {s for s, e in exits.items() if e.outcome == "succeeded"}
        assert 1 < len(done) < STEPS + 1, len(done)
        [ns] = [e for e in recs if isinstance(e, E.NotStarted)]
        assert ns.steps == STEPS + 1 - len(done) - len(full)
        for s in IDS:
            if s not in done:
                assert records.attempts(run_dir, s) == [], s     # no attempt used
                assert records.read_final(run_dir, s) is None, s  # nothing on disk stops the rerun
        assert_nothing_left(run_dir, tag=str(flag))

        # Room again (as after freeing space): the rerun runs the rest, each step once in all.
        r = subprocess.run(["mount", "-o", "remount,nr_inodes=20000", str(mnt)], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 0, r.stderr
        r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--max-attempts", "1", *HB,
                  cwd=tmp_path, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"{len(done)} already done" in r.stdout, r.stdout
        for s in IDS + ["long"]:
            assert [a["outcome"] for a in records.attempts(run_dir, s)] == ["succeeded"], s
        assert_nothing_left(run_dir, tag=str(flag))


def test_a_run_directory_out_of_blocks_drains_the_fleet_the_coordinator_lives_on_and_the_rerun_finishes(tmp_path):
    """A tmpfs of 1 MiB, nearly filled: the steps' set-up or the coordinator's own
    appends (events.jsonl, the journal) run out of blocks first, whichever it is here.
    Before fleet.control.drain.cannot_write, the coordinator's failed append took it
    down ("went down before the suite finished", exit 1). Now the fleet drains, `fleet
    run` exits 4, no line of the event stream is torn, and with room again the rerun
    finishes the suite: nothing failed, every step succeeded."""
    ids = [f"p{i:03d}" for i in range(400)]
    suite = write_suite(tmp_path / "blocks.toml", "\n".join(
        ['[suite]', 'name = "blocks"'] + [f'[[steps]]\nid = "{s}"\ncall = "os:getpid"' for s in ids]) + "\n")
    with small_tmpfs(tmp_path / "mnt", size="1m", inodes=100_000) as mnt:
        filler = mnt / "filler"
        st = os.statvfs(mnt)
        filler.write_bytes(b"\0" * (st.f_bavail * st.f_frsize - 160_000))
        run_dir = mnt / "run"
        r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--max-attempts", "1", *HB,
                  cwd=tmp_path, timeout=120)
        assert r.returncode == 4, r.stdout + r.stderr
        assert FULL in r.stderr and "went down" not in r.stderr, r.stderr
        raw = (run_dir / "events.jsonl").read_text().splitlines()
        assert all(json.loads(line) for line in raw)  # none torn
        exits = [e for e in event_records(run_dir) if isinstance(e, E.Exit)]
        assert exits and {e.outcome for e in exits} <= {"succeeded", "interrupted"}
        assert_nothing_left(run_dir)
        filler.unlink()  # room again (each step's files take a page or more each: more than the filler's)
        r = subprocess.run(["mount", "-o", "remount,size=64m", str(mnt)], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--max-attempts", "1", *HB,
                  cwd=tmp_path, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        for s in ids:
            outcomes = [a["outcome"] for a in records.attempts(run_dir, s)]
            assert "succeeded" in outcomes and "failed" not in outcomes, (s, outcomes)
        assert_nothing_left(run_dir)


def test_a_run_directory_on_a_file_system_already_full_is_refused_with_exit_4_before_anything_starts(tmp_path):
    # Files left but no block: an empty probe file was made, and the coordinator then died
    # unable to write its lease or its log (exit 1, an empty log quoted, an empty lease left).
    suite = write_suite(tmp_path / "s.toml", '[[steps]]\nid = "a"\ncommand = "true"\n')
    with small_tmpfs(tmp_path / "mnt", size="1m") as mnt:
        filler = mnt / "filler"
        st = os.statvfs(mnt)
        filler.write_bytes(bytes(st.f_bavail * st.f_frsize))
        assert os.statvfs(mnt).f_bavail == 0
        for argv in (("run", str(suite), "--run-dir", str(mnt / "run")), ("up", "--run-dir", str(mnt / "up"))):
            r = fleet(*argv, cwd=tmp_path, timeout=60)
            assert r.returncode == 4, (argv, r.stdout, r.stderr)
            assert "its file system is full (No space left on device): free space" in r.stderr, r.stderr
            assert "Traceback" not in r.stderr and "coordinator" not in r.stderr, r.stderr
        assert sorted(os.listdir(mnt)) == ["filler", "run", "up"]
        assert os.listdir(mnt / "run") == [] and os.listdir(mnt / "up") == []  # no lease, log or stream
