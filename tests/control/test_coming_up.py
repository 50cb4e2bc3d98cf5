"""A fleet that `fleet up` is still bringing up (its preload importing) has no fleet.json
yet: a second `fleet up` on its run directory is refused, naming it (before 2026-12-06
the second went on, and whichever had its agents joined first won, often the second),
and `fleet status` says it is coming up, not that no fleet is up. Real `fleet`
commands; the preload sleeps (tests/preload_slow.py)."""

from __future__ import annotations

import json
from pathlib import Path

from fleetharness import events, fleet
from test_up_interrupted import importing, kill_group, slow_up


def _coordinator(run_dir: Path) -> int:
    return json.loads((run_dir / ".fleet" / "lease").read_text())["pid"]


def _stop(run_dir: Path, up, pid: int, cwd: Path) -> None:
    """fleet down stops the fleet coming up; its `fleet up` says so."""
    r = fleet("down", "--run-dir", str(run_dir), cwd=cwd, timeout=90)
    assert r.returncode == 0 and f"a fleet still coming up, coordinator pid {pid}" in r.stdout, r.stdout
    out, err = up.communicate(timeout=60)
    assert up.returncode == 1 and "stopped before it was up" in err, err


def test_a_second_fleet_up_while_the_first_is_coming_up_is_refused_naming_it(tmp_path):
    run_dir = tmp_path / "run"
    up = slow_up(run_dir, tmp_path)
    try:
        importing(up)
        pid = _coordinator(run_dir)
        second = fleet("up", "--local", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
        assert second.returncode == 1, second.stdout + second.stderr
        assert f"a fleet still coming up, coordinator pid {pid}" in second.stderr, second.stderr
        assert len([e for e in events(run_dir) if e["kind"] == "fleet_starting"]) == 1  # it started nothing
        _stop(run_dir, up, pid, tmp_path)
    finally:
        kill_group(up)


def test_fleet_status_of_a_fleet_coming_up_says_so_with_its_coordinators_pid(tmp_path):
    run_dir = tmp_path / "run"
    up = slow_up(run_dir, tmp_path)
    try:
        importing(up)
        pid = _coordinator(run_dir)
        st = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert st.returncode == 1 and "no fleet is up" not in st.stderr, st.stderr
        assert (f"a fleet is coming up in {run_dir} (coordinator pid {pid}; waiting for its agents)"
                in st.stderr), st.stderr
        js = fleet("status", "--json", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        said = json.loads(js.stdout)  # one object
        assert js.returncode == 1 and said["coming_up"] == {"pid": pid, "state": "coming up"}, js.stdout
        assert "coming up" in said["error"]
        _stop(run_dir, up, pid, tmp_path)
    finally:
        kill_group(up)
