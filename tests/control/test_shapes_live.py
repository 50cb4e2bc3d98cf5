"""The per-step messages by shape (protocol version 2, fleet.wire.shapes) and the spec
hash made off the loop (fleet.wire.spechash), through real processes: `fleet up` and
`fleet run` with real agents, zygotes and forked steps."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from fleetharness import assert_nothing_left, fleet, write_suite
from test_security import site_of_version

from fleet.control.checks import checked_suite
from fleet.wire import messages as P
from fleet.wire import records as R


def test_agents_of_protocol_version_1_whose_reports_are_maps_are_refused_at_once_naming_both_versions(tmp_path,
                                                                                                     monkeypatch):
    site = site_of_version(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    monkeypatch.setenv("FLEET_TEST_AGENT_PROTOCOL", "1")
    run_dir = tmp_path / "run"
    t0 = time.monotonic()
    r = fleet("up", "--run-dir", str(run_dir), "--nodes", "2", "--timeout", "90", cwd=tmp_path, timeout=120)
    took = time.monotonic() - t0
    try:
        assert P.VERSION == 4
        assert r.returncode != 0, r.stdout
        assert "protocol version 1" in r.stderr and "speaks 4" in r.stderr, r.stderr
        assert took < 60, f"fleet up took {took:.0f} s to say so"
        assert not (run_dir / "fleet.json").exists()
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)


def test_a_suite_run_by_shape_records_each_steps_definition_hash_as_ever_and_a_rerun_skips_every_step(tmp_path):
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "shapes"
run_dir = "{run_dir}"

[[steps]]
id = "a/{{i}}"
array = "1-12"
command = ["sh", "-c", "echo {{i}} >> {run_dir}/ran.txt"]
cores = 1
""")
    fleet("up", "--run-dir", str(run_dir), "--nodes", "2", cwd=tmp_path, check=True)
    try:
        first = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
        assert first.returncode == 0, first.stdout + first.stderr
        steps, _ = checked_suite(str(suite), None, run_dir=run_dir)
        for spec in steps.steps:  # the value markers always held: sha256 of the identity's repr
            want = hashlib.sha256(repr(spec.identity()).encode()).hexdigest()[:16]
            assert json.loads((R.fleet_dir(run_dir, spec.id) / R.DONE).read_text())["spec"] == want, spec.id
        again = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
        assert again.returncode == 0, again.stdout + again.stderr
        assert sorted((run_dir / "ran.txt").read_text().split(), key=int) == [str(i) for i in range(1, 13)]
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)
