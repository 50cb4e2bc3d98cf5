"""A submission a live fleet refuses leaves the run directory's shard count as it was:
a `--shard 0/3 --only` of no step recorded 3 shards, and the next run's --shard 0/2
was then refused as another count (fleet.control.submissions.chosen)."""

from __future__ import annotations

import json

from fleetharness import assert_nothing_left, fleet, write_suite

SUITE = """
[suite]
name = "sh"
[[steps]]
id = "t/{i}"
array = "0-3"
task = "{i}"
call = "fleet_steps:nap"
args = { seconds = 0.05 }
"""


def test_a_submission_refused_by_a_live_fleet_does_not_record_its_shard_count(tmp_path):
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", SUITE)
    fleet("up", "--local", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True, timeout=60)
    try:
        r = fleet("run", str(suite), "--run-dir", str(run_dir), "--shard", "0/3", "--only", "zz",
                  cwd=tmp_path, timeout=60)
        assert r.returncode == 2 and "zz" in r.stdout + r.stderr, r.stdout + r.stderr
        assert not (run_dir / "shards.json").exists(), (run_dir / "shards.json").read_text()
        r = fleet("run", str(suite), "--run-dir", str(run_dir), "--shard", "0/2", "--only", "t/0",
                  cwd=tmp_path, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert json.loads((run_dir / "shards.json").read_text()) == {"shards": 2, "generation": 1}
        # An accepted submission still records it, and another count is still refused.
        r = fleet("run", str(suite), "--run-dir", str(run_dir), "--shard", "0/3", cwd=tmp_path, timeout=60)
        assert r.returncode == 2 and "split 2 ways" in r.stdout + r.stderr, r.stdout + r.stderr
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)
