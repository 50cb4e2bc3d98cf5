"""A full run directory under a fleet started with `fleet up`, through the real CLI on a
real file system that runs out (a tmpfs with few inodes, as tests/control/test_disk_full.py):
the fleet drains, `fleet run` exits 4 and says to bring the fleet down and up again (it
stays drained); done so, with room again, the rerun runs the rest, each step once. Before
2026-12-07 every message said only to free space and run again, which drained at once."""

from __future__ import annotations

import subprocess

from fleetharness import assert_nothing_left, fleet, small_tmpfs, write_suite
from fleetharness import records as event_records

from fleet.control.drain import FULL
from fleet.wire import events as E
from fleet.wire import records

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "5"]
IDS = [f"c{i:03d}" if i % 2 else f"p{i:03d}" for i in range(120)]  # command and call steps, alternating


def test_a_fleet_up_drained_by_a_full_disk_is_said_to_need_bringing_down_and_up_and_then_finishes_the_suite(
        tmp_path):
    suite = write_suite(tmp_path / "full.toml", "\n".join(
        ['[suite]', 'name = "full"'] + [f'[[steps]]\nid = "{s}"\n' + ('command = "true"' if s[0] == "c" else
                                                                       'call = "os:getpid"') for s in IDS]) + "\n")
    up = ("up", "--run-dir", "RUN", "--nodes", "1", "--max-attempts", "1", *HB)
    with small_tmpfs(tmp_path / "mnt", inodes=300) as mnt:
        run_dir = mnt / "run"
        up = tuple(str(run_dir) if a == "RUN" else a for a in up)
        fleet(*up, cwd=tmp_path, check=True)
        try:
            run = ("run", str(suite), "--run-dir", str(run_dir))
            first = fleet(*run, cwd=tmp_path, timeout=120)
            assert first.returncode == 4, first.stdout + first.stderr
            assert FULL in first.stderr, first.stderr
            assert f"bring the fleet down and up again (fleet down --run-dir {run_dir}; fleet up" in first.stderr, \
                first.stderr
            done = {e.step for e in event_records(run_dir) if isinstance(e, E.Exit) and e.outcome == "succeeded"}
            assert 0 < len(done) < len(IDS), len(done)
            status = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
            assert "DRAINED" in status.stdout and "the fleet stays drained" in status.stdout, status.stdout
            assert "the next run goes on" not in status.stdout, status.stdout
        finally:
            fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert_nothing_left(run_dir)

        # As said: room again, the fleet down and up, the suite again: the rest run, each step once in all.
        r = subprocess.run(["mount", "-o", "remount,nr_inodes=20000", str(mnt)], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 0, r.stderr
        fleet(*up, cwd=tmp_path, check=True)
        try:
            last = fleet(*run, cwd=tmp_path, timeout=120)
            assert last.returncode == 0, last.stdout + last.stderr
            assert f"{len(done)} already done" in last.stdout, last.stdout
            for s in IDS:
                assert [a["outcome"] for a in records.attempts(run_dir, s)] == ["succeeded"], s
        finally:
            fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert_nothing_left(run_dir)
