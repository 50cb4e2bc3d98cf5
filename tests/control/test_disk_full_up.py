"""A full run directory under a fleet started with `fleet up`, through the real CLI on a
real file system that runs out (a tmpfs with few inodes, as tests/control/test_disk_full.py):
the fleet drains and `fleet run` exits 4; a next submission while the disk is still full
drains at once again (exit 4) and says none of the first submission's steps interrupted
as its own; once there is room, the next submission lifts the drain (fleet.control.liftdrain)
and runs the rest in the same fleet. Before 2026-12-07 such a fleet stayed drained until
`fleet down` and `fleet up`, while every message said to free space and run again."""

from __future__ import annotations

import subprocess
from pathlib import Path

from fleetharness import assert_nothing_left, fleet, small_tmpfs, write_suite
from fleetharness import records as event_records

from fleet.control.drain import FULL
from fleet.wire import events as E
from fleet.wire import records

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "5"]
IDS = [f"c{i:03d}" if i % 2 else f"p{i:03d}" for i in range(120)]  # command and call steps, alternating


def _fill_inodes(mnt: Path) -> list[Path]:
    """Empty files until the file system has no inode left (what the steps left, used up)."""
    made: list[Path] = []
    while len(made) < 100_000:
        path = mnt / f"filler{len(made)}"
        try:
            path.touch()
        except OSError:
            return made
        made.append(path)
    raise AssertionError("the tmpfs never ran out of inodes")


def test_a_fleet_up_drained_by_a_full_disk_runs_the_next_submission_once_there_is_room_again(tmp_path):
    suite = write_suite(tmp_path / "full.toml", "\n".join(
        ['[suite]', 'name = "full"'] + [f'[[steps]]\nid = "{s}"\n' + ('command = "true"' if s[0] == "c" else
                                                                       'call = "os:getpid"') for s in IDS]) + "\n")
    with small_tmpfs(tmp_path / "mnt", inodes=300) as mnt:
        run_dir = mnt / "run"
        fleet("up", "--run-dir", str(run_dir), "--nodes", "1", "--max-attempts", "1", *HB, cwd=tmp_path, check=True)
        try:
            run = ("run", str(suite), "--run-dir", str(run_dir))
            first = fleet(*run, cwd=tmp_path, timeout=120)
            assert first.returncode == 4, first.stdout + first.stderr
            assert FULL in first.stderr and "the fleet up starts steps again then" in first.stderr, first.stderr
            done = {e.step for e in event_records(run_dir) if isinstance(e, E.Exit) and e.outcome == "succeeded"}
            assert 0 < len(done) < len(IDS), len(done)

            # Still full: drained again at once, and the first submission's interrupted steps are not this one's.
            fillers = _fill_inodes(mnt)
            again = fleet(*run, cwd=tmp_path, timeout=120)
            assert again.returncode == 4, again.stdout + again.stderr
            assert "interrupted" not in again.stdout.replace("interrupted or not started", ""), again.stdout
            assert not [e for e in event_records(run_dir) if isinstance(e, E.DrainLifted)]

            # Room again: the same fleet runs the rest, each step once in all.
            for path in fillers:
                path.unlink()
            r = subprocess.run(["mount", "-o", "remount,nr_inodes=20000", str(mnt)], capture_output=True, text=True,
                               timeout=30)
            assert r.returncode == 0, r.stderr
            last = fleet(*run, cwd=tmp_path, timeout=120)
            assert last.returncode == 0, last.stdout + last.stderr
            assert f"{len(done)} already done" in last.stdout, last.stdout
            for s in IDS:
                assert [a["outcome"] for a in records.attempts(run_dir, s)] == ["succeeded"], s
            [lifted] = [e for e in event_records(run_dir) if isinstance(e, E.DrainLifted)]
            assert FULL in lifted.reason, lifted
            status = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
            assert "DRAINED" not in status.stdout, status.stdout
            report = fleet("report", str(run_dir), cwd=tmp_path, timeout=60)
            assert "lifted at" in report.stdout, report.stdout
        finally:
            fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert_nothing_left(run_dir)
