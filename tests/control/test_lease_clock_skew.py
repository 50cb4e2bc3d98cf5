"""A fleet whose wall clock is far ahead of the lease holder's (another host, or a file
server whose clock sets mtimes) must not find a live holder's lease stale: before
2026-12-07 its age was `time.time() - st_mtime`, so a second fleet 20 minutes ahead
took a live fleet's lease over at once and every step ran twice. Staleness is now seen
on the reader's own monotonic clock (fleet.wire.sightings); a lease nobody refreshes,
of a holder on another host, is still taken over, after a short watch. Real fleets;
the skew is a sitecustomize shim (tests/harness/clockshim) on the second fleet's PYTHONPATH."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from fleetharness import TESTS, assert_nothing_left, env, events, finish, fleet, wait_for, write_suite

from fleet.control import lease as leasemod

SKEW_S = 1200  # ahead, twice the default --stale-after (600)


def spawn_with(environ: dict, *args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fleet", *args], cwd=cwd, env={**env(), **environ},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def skewed(tmp_path: Path) -> dict:
    (tmp_path / "skew").write_text(str(SKEW_S))
    e = env()
    return {"CLOCK_SKEW_FILE": str(tmp_path / "skew"),
            "PYTHONPATH": os.pathsep.join([str(TESTS / "harness" / "clockshim"), e["PYTHONPATH"]])}


def kill_group(p: subprocess.Popen) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
    p.communicate(timeout=30)


def started(run_dir: Path) -> list[str]:
    return sorted(e["step"] for e in events(run_dir) if e["kind"] == "started")


def test_a_fleet_whose_clock_is_far_ahead_shares_a_live_fleets_lease_and_runs_none_of_its_steps_again(tmp_path):
    second_fleet_runs_none_of_a_live_fleets_steps(tmp_path, skewed(tmp_path))


def test_a_fleet_with_a_stale_after_shorter_than_two_refreshes_runs_none_of_a_live_fleets_steps_again(tmp_path):
    # (before 2026-12-07 a lease unchanged for --stale-after 4 between two of the holder's
    # 5-s refreshes was stale, and the second fleet ran both live steps again)
    second_fleet_runs_none_of_a_live_fleets_steps(tmp_path, {}, "--stale-after", "4")


def second_fleet_runs_none_of_a_live_fleets_steps(tmp_path: Path, second: dict, *up_args: str) -> None:
    """A second fleet (`second`: its environment; `up_args`: more of its `fleet up`'s
    options) on a live fleet's run directory shares its lease and runs neither of its steps."""
    run_dir, flag = tmp_path / "run", tmp_path / "flag"
    steps = "".join(f'[[steps]]\nid = "w{k}"\ncall = "fleet_steps:wait_for_file"\n'
                    f'args = {{ path = "{flag}", timeout = 180 }}\n' for k in (1, 2))
    suite = write_suite(tmp_path / "s.toml", f'[suite]\nname = "skew"\nrun_dir = "{run_dir}"\n{steps}')
    a = spawn_with({}, "run", str(suite), "--nodes", "1", cwd=tmp_path)
    b_run = None
    try:
        wait_for(lambda: started(run_dir) == ["w1", "w2"], 90, "the first fleet to start both steps")
        holder = json.loads((run_dir / ".fleet" / "lease").read_text())["fleet"]
        up = spawn_with(second, "up", "--local", "--nodes", "1", "--run-dir", str(run_dir), *up_args, cwd=tmp_path)
        rc, out, err = finish(up, 120)
        assert rc == 0, err
        assert json.loads((run_dir / ".fleet" / "lease").read_text())["fleet"] == holder, "the lease was taken over"
        b_run = spawn_with(second, "run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
        # The second fleet watches the live holder's lease for longer than its confirmation
        # window (twice the refresh interval and more): four refreshes seen here.
        lease, seen = run_dir / ".fleet" / "lease", []

        def refreshed_four_times() -> bool:
            m = lease.stat().st_mtime_ns
            if not seen or seen[-1] != m:
                seen.append(m)
            return len(seen) >= 5
        wait_for(refreshed_four_times, 4 * leasemod.REFRESH_S + 60, "the holder to refresh its lease four times")
        assert json.loads(lease.read_text())["fleet"] == holder, "the lease was taken over"
        assert started(run_dir) == ["w1", "w2"], "a step started again"
        flag.touch()
        rc, out, err = finish(a, 120)
        assert rc == 0, err
        rc, out, err = finish(b_run, 120)
        assert rc == 0, err
        assert started(run_dir) == ["w1", "w2"]  # each step started once, in the first fleet
        assert not [e for e in events(run_dir) if e["kind"] == "fleet_gone"]
        coord = (run_dir / "coordinator.log").read_text() if (run_dir / "coordinator.log").exists() else ""
        assert "took over the run directory's lease" not in coord
    finally:
        flag.touch()
        for p in (a, b_run):
            if p is not None:
                kill_group(p)
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)


def test_a_lease_of_another_host_not_refreshed_for_an_hour_is_taken_over_after_a_short_watch_not_at_first_look(
        tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / ".fleet").mkdir(parents=True)
    lease = run_dir / ".fleet" / "lease"
    lease.write_text(json.dumps({"fleet": "gone-1-abc", "host": "elsewhere", "pid": 4242, "generation": 1,
                                 "shared": False, "refresh_s": leasemod.REFRESH_S}))  # (as a fleet since 2026-12-07 writes)
    old = time.time() - 3600
    os.utime(lease, (old, old))
    up = spawn_with({}, "up", "--local", "--run-dir", str(run_dir), cwd=tmp_path)
    try:
        rc, out, err = finish(up, 120)
        assert rc == 0, err
        # Said while it waited: the lease unchanged for 0 s as it watched, taken over within
        # the confirmation window (2 x 5 s + 2 s), not --stale-after (600 s) later.
        m = re.search(r"held by pid 4242 on host elsewhere \(last refreshed (\d+) s ago by its mtime; unchanged "
                      r"for (\d+) s as this fleet watched it\): this fleet takes it over in (\d+) s unless", err)
        assert m, err
        assert int(m[1]) >= 3600 and int(m[3]) <= 2 * leasemod.REFRESH_S + 2, m[0]
        rec = json.loads(lease.read_text())
        assert (rec["generation"], rec["fleet"]) != (1, "gone-1-abc") and rec["refresh_s"] == leasemod.REFRESH_S
        took = re.search(r"took over the run directory's lease \(generation 1\) of fleet gone-1-abc, pid 4242 on host "
                         r"elsewhere: unchanged for (\d+) s as this fleet watched it", (run_dir / "coordinator.log")
                         .read_text())
        assert took and int(took[1]) >= 2 * leasemod.REFRESH_S + 2 - 1, took
    finally:
        kill_group(up)
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)
