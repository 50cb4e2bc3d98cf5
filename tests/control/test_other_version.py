"""A client of this install on a fleet up by an install of an older protocol version:
refused with both versions named (docs/operations.md, "Upgrading"), a JSON error object
with --json, never a traceback. The older fleet is a real one (`fleet up`: coordinator,
agents, zygotes), this code with its protocol version set to an older one in each of its
processes (a sitecustomize on their PYTHONPATH), as a fleet up by an older install is."""

from __future__ import annotations

import json
import os

from fleetharness import REPO, TESTS, assert_nothing_left, fleet

from fleet.wire import messages as P

OLD = P.VERSION - 1


def test_status_and_run_on_a_fleet_of_an_older_protocol_are_refused_naming_both_versions_and_down_stops_it(tmp_path):
    # (fleet.wire.messages.VersionMismatch escaped the client: a 30-line traceback)
    site = tmp_path / "old-install"
    site.mkdir()
    (site / "sitecustomize.py").write_text(f"import fleet.wire.messages as m\nm.VERSION = {OLD}\n")
    old = {"PYTHONPATH": os.pathsep.join([str(site), str(TESTS), str(REPO)])}
    run_dir = tmp_path / "run"
    suite = tmp_path / "s.toml"
    suite.write_text(f'[suite]\nname = "s"\nrun_dir = "{run_dir}"\n[[steps]]\nid = "a"\ncommand = "true"\n')
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, timeout=90, check=True, environ=old)
    try:
        said = f"speaks protocol version {OLD}, this fleet install speaks {P.VERSION}: use the fleet install that " \
               f"started it"
        for args in (["status", "--run-dir", str(run_dir)], ["run", str(suite)]):
            r = fleet(*args, cwd=tmp_path, timeout=60)
            assert r.returncode != 0 and "Traceback" not in r.stderr, (args, r.stderr)
            assert said in r.stderr and str(run_dir) in r.stderr, (args, r.stderr)
        r = fleet("status", "--run-dir", str(run_dir), "--json", cwd=tmp_path, timeout=60)
        assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
        assert said in json.loads(r.stdout)["error"], r.stdout
        assert fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, environ=old).returncode == 0
        # On its own host `fleet down` stops it all the same: not asked, its coordinator is signalled.
        r = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90, environ=old)
    assert not (run_dir / "steps" / "a").exists()  # (the refused run started nothing)
    assert_nothing_left(run_dir)
