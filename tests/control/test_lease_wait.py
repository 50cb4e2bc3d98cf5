"""A run directory whose lease a crashed fleet of another host holds: the next `fleet up`
or `fleet run` waits until the lease is --stale-after old, and says so at once, on one
line: whose lease, when it was refreshed, when it is taken over and what shortens the
wait. `fleet down` stops a fleet that waits so. Real fleets, real processes; the crash
is a `kill -9` of the coordinator, the other host a rewritten lease."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import time
from pathlib import Path

from fleetharness import assert_nothing_left, fleet, living, spawn, wait_for, write_suite

from fleet.wire import connection


def crashed_elsewhere(run_dir: Path, cwd: Path) -> int:
    """A fleet up in run_dir, killed with -9, its lease made another host's; its pid."""
    r = fleet("up", "--local", "--run-dir", str(run_dir), cwd=cwd)
    assert r.returncode == 0, r.stderr
    pid = connection.read(run_dir / connection.NAME).pid
    os.kill(pid, signal.SIGKILL)
    assert_nothing_left(run_dir)  # its agents and zygotes died with it
    lease = run_dir / ".fleet" / "lease"
    lease.write_text(json.dumps({**json.loads(lease.read_text()), "host": "elsewhere"}))
    return pid


def first_line(p: subprocess.Popen, timeout: float) -> str:
    """The first line p writes on stderr, within timeout."""
    ready, _, _ = select.select([p.stderr], [], [], timeout)
    assert ready, f"nothing on stderr within {timeout} s"
    return p.stderr.readline()


def kill_group(p: subprocess.Popen) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
    p.communicate(timeout=30)


def waiting(run_dir: Path, pid: int, stale_after: str, shorter: bool = True) -> re.Pattern:
    """The waiting line (`shorter`: it says a smaller --stale-after waits less)."""
    hint = "a smaller --stale-after waits less; " if shorter else ""
    return re.compile(rf"fleet: waiting for the lease on {re.escape(str(run_dir))}, held by pid {pid} on host "
                      rf"elsewhere \(last refreshed (\d+) s ago by its mtime; unchanged for (\d+) s as this fleet watched it\): "
                      rf"this fleet takes it over in (\d+) s unless it is "
                      rf"refreshed \(--stale-after {stale_after}; {hint}fleet down "
                      rf"stops this fleet\)\n")


def test_fleet_up_says_at_once_whose_lease_it_waits_for_and_when_it_takes_it_over_then_does(tmp_path):
    run_dir = tmp_path / "run"
    crashed = crashed_elsewhere(run_dir, tmp_path)
    up = spawn("up", "--local", "--stale-after", "8", "--run-dir", str(run_dir), cwd=tmp_path)
    try:
        line = first_line(up, 30)
        # (no smaller --stale-after would shorten it: a lease is never stale before twice its
        # holder's refresh interval plus 2 s, 12 s, since 2026-12-07)
        m = waiting(run_dir, crashed, "8", shorter=False).fullmatch(line)
        assert m, line
        # Said at once, by the line's own count (a time the test took would include its
        # own start-up under load): it had watched the lease for less than it has to wait.
        assert int(m[2]) < int(m[3]), ("said only once the wait was over", line)
        # watched unchanged + taken over in = the holder's confirmation window (2 x 5 s + 2 s),
        # on its own clock: longer than this --stale-after
        assert 11 <= int(m[2]) + int(m[3]) <= 13, line
        out, err = up.communicate(timeout=60)
        assert up.returncode == 0, err
        assert out.startswith("fleet up on local: coordinator pid"), out
        lease = json.loads((run_dir / ".fleet" / "lease").read_text())
        assert (lease["pid"], lease["generation"]) == (connection.read(run_dir / connection.NAME).pid, 2)
    finally:
        kill_group(up)
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)


def test_fleet_run_says_whose_lease_it_waits_for_and_fleet_down_stops_the_waiting_fleet(tmp_path):
    run_dir = tmp_path / "run"
    crashed = crashed_elsewhere(run_dir, tmp_path)
    suite = write_suite(tmp_path / "s.toml", f'[suite]\nname = "one"\nrun_dir = "{run_dir}"\n'
                                             '[[steps]]\nid = "a"\ncommand = ["true"]\n')
    run = spawn("run", str(suite), cwd=tmp_path)
    try:
        assert first_line(run, 30).startswith(f"fleet: no fleet is up in {run_dir}; starting an embedded fleet")
        m = waiting(run_dir, crashed, "600").fullmatch(first_line(run, 30))
        assert m and int(m[3]) > 500, m
        r = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert r.returncode == 0, r.stderr
        said = re.fullmatch(rf"fleet down: {re.escape(str(run_dir))} \(a fleet waiting for the run directory's "
                            rf"lease, held by pid {crashed} on host elsewhere; coordinator pid (\d+)\)\n", r.stdout)
        assert said, r.stdout
        out, err = run.communicate(timeout=60)
        assert run.returncode == 1
        assert f"the fleet was stopped before it was up (fleet down, or SIGTERM to its coordinator pid {said[1]})" \
            in err, err
        wait_for(lambda: not living({int(said[1])}), 15, "the waiting coordinator to end")
        r = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert r.stdout.startswith(f"no fleet was up in {run_dir}; its lease is held by pid {crashed} on host "
                                   "elsewhere, last refreshed "), r.stdout
    finally:
        kill_group(run)


def test_each_crashed_fleets_lease_is_taken_over_at_once_and_no_adoption_file_is_left_though_generations_restart(
        tmp_path):
    run_dir = tmp_path / "run"

    def up() -> subprocess.CompletedProcess:
        return fleet("up", "--local", "--timeout", "30", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)

    def up_then_crash() -> int:
        r = up()
        assert r.returncode == 0, r.stderr
        pid = connection.read(run_dir / connection.NAME).pid
        os.kill(pid, signal.SIGKILL)
        assert_nothing_left(run_dir)
        return pid

    up_then_crash()  # a generation-1 lease left by a dead holder: taken over (generation 2) ...
    assert up().returncode == 0
    r = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)  # ... and given back
    assert r.returncode == 0 and not (run_dir / ".fleet" / "lease").exists(), r.stdout + r.stderr
    crashed = up_then_crash()  # generation 1 again, its holder dead: taken over at once, as the first one
    r = up()
    try:
        assert r.returncode == 0, r.stderr
        lease = json.loads((run_dir / ".fleet" / "lease").read_text())
        assert lease["generation"] == 2
        assert f"pid {crashed} on host" in (run_dir / "coordinator.log").read_text()
        assert not list((run_dir / ".fleet").glob("lease.adopt.*"))
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)


def test_a_lease_already_stale_by_its_mtime_is_waited_for_without_suggesting_a_smaller_stale_after(tmp_path):
    # (the take-over comes at the floor, twice the holder's refresh interval plus 2 s, whatever
    # --stale-after says: before 2026-12-07 the line still said a smaller one waits less)
    run_dir = tmp_path / "run"
    crashed = crashed_elsewhere(run_dir, tmp_path)
    hour_ago = time.time() - 3600
    os.utime(run_dir / ".fleet" / "lease", (hour_ago, hour_ago))
    up = spawn("up", "--local", "--stale-after", "30", "--run-dir", str(run_dir), cwd=tmp_path)
    try:
        line = first_line(up, 30)
        m = waiting(run_dir, crashed, "30", shorter=False).fullmatch(line)
        assert m and int(m[1]) >= 3600 and 11 <= int(m[2]) + int(m[3]) <= 13, line
    finally:
        kill_group(up)
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)
