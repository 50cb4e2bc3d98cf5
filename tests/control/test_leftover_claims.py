"""A run directory an older fleet died on, on another host (its node failed, its job
hit its time limit), resumed by this version: its per-step claims and its lease (an
older fleet's, without `refresh_s`) name a fleet nobody can ask about. Since 2026-12-07
staleness is seen on the reader's own monotonic clock (fleet.wire.sightings), and
briefly such a claim was watched for 2 x stale_after/4 + 2 s (five minutes by default)
and such a lease likewise: every step the dead fleet was running held up the allocation
that long. Now a claim whose fleet holds no live lease and no live registration is free
at once (judged per fleet, fleet.control.claimlog), and an older fleet's lease its mtime
says is --stale-after old is taken over after a short watch, as a newer one's is. Real
fleets on run directories set up as older fleets left them."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from fleetharness import assert_nothing_left, env, events, finish, fleet, wait_for, write_suite

from fleet.control import lease as leasemod

HOURS_2 = 7200.0


def spawn(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fleet", *args], cwd=cwd, env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def kill_group(p: subprocess.Popen) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
    p.communicate(timeout=30)


def left_by_an_older_fleet(path: Path, rec: dict) -> None:
    """A record as a fleet before 2026-12-07 wrote it (no refresh_s), last refreshed 2 h ago."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec))
    old = time.time() - HOURS_2
    os.utime(path, (old, old))


def first_word_on(run_dir: Path, step: str) -> str | None:
    """Whether the step first started here or was found held elsewhere."""
    for e in events(run_dir):
        if e.get("step") == step and e["kind"] in ("started", "elsewhere"):
            return e["kind"]
    return None


SUITE = '[suite]\nname = "legacy"\n[[steps]]\nid = "a"\ncommand = "true"\n'


def test_a_claim_left_by_a_fleet_that_died_on_another_host_is_taken_at_once_not_watched_for_minutes(tmp_path):
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", SUITE)
    left_by_an_older_fleet(run_dir / "steps" / "a" / ".fleet" / "claim",
                           {"fleet": "oldfleet-1", "host": "othernode", "pid": 4242, "attempt": 1, "generation": 1})
    run = spawn("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path)
    try:
        # (its fleet has no lease and no registration: nothing of it is live to wait for)
        word = wait_for(lambda: first_word_on(run_dir, "a"), 90, "step a to start or be found held elsewhere")
        assert word == "started", [e for e in events(run_dir) if e.get("step") == "a"]
        rc, out, err = finish(run, 120)
        assert rc == 0, err
        assert "1 succeeded" in out, out
        assert [e["step"] for e in events(run_dir) if e["kind"] == "started"] == ["a"]
    finally:
        kill_group(run)
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)


def test_an_older_fleets_lease_and_claim_two_hours_old_are_taken_over_after_a_short_watch(tmp_path):
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", SUITE)
    left_by_an_older_fleet(run_dir / ".fleet" / "lease",
                           {"fleet": "oldfleet-2", "host": "othernode", "pid": 4343, "generation": 1, "shared": False})
    left_by_an_older_fleet(run_dir / "steps" / "a" / ".fleet" / "claim",
                           {"fleet": "oldfleet-2", "host": "othernode", "pid": 4343, "attempt": 1, "generation": 1})
    run = spawn("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path)
    try:
        rc, out, err = finish(run, 150)
        assert rc == 0, err
        # Said while it waited: taken over within the confirmation window (2 x 5 s + 2 s),
        # as if the older fleet had refreshed it every 5 s, not 2 x 600/4 + 2 s.
        m = re.search(r"held by pid 4343 on host othernode \(last refreshed (\d+) s ago by its mtime; unchanged "
                      r"for \d+ s as this fleet watched it\): this fleet takes it over in (\d+) s unless", err)
        assert m, err
        assert int(m[1]) >= HOURS_2 and int(m[2]) <= 2 * leasemod.REFRESH_S + 2, m[0]
        assert first_word_on(run_dir, "a") == "started", [e for e in events(run_dir) if e.get("step") == "a"]
        assert [e["step"] for e in events(run_dir) if e["kind"] == "started"] == ["a"]
    finally:
        kill_group(run)
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)
