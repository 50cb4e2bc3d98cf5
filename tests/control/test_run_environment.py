"""Steps get the environment of `fleet up`, not of the `fleet run` that submits them; a
`fleet run` whose PATH, LD_LIBRARY_PATH, PYTHONPATH, LOADEDMODULES, CONDA_PREFIX or
VIRTUAL_ENV differ from the fleet's says which, once (fleet.control.shellenv)."""

from __future__ import annotations

import json
import os

from fleetharness import assert_nothing_left, env, fleet, write_suite

SUITE = """[suite]
name = "where"
[[steps]]
id = "cmd"
command = 'echo "PATH=$PATH" > seen.txt; echo "LOADEDMODULES=${LOADEDMODULES-unset}" >> seen.txt'
"""

BEFORE_UP = "/opt/before-up/bin"
AFTER_UP = "/opt/after-up/bin"


def test_fleet_run_names_the_variables_its_shell_changed_since_fleet_up_and_the_steps_get_fleet_up_s(tmp_path):
    run = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", SUITE)
    path = os.environ["PATH"]
    at_up = {"FLEET_RUN_DIR": str(run), "PATH": f"{BEFORE_UP}:{path}"}
    after = {**at_up, "PATH": f"{AFTER_UP}:{path}", "LOADEDMODULES": "gcc/13:netcdf/4.9"}
    base = {k: v for k, v in env().items() if k != "LOADEDMODULES"}
    up = fleet("up", "--local", "--nodes", "1", cwd=tmp_path, timeout=120, environ={**base, **at_up})
    assert up.returncode == 0, up.stderr
    try:
        recorded = (run / "fleet.json").read_text()
        assert BEFORE_UP not in recorded, recorded  # (digests, not the values)
        assert set(json.loads(recorded)["env_digests"]) == {"PATH", "LD_LIBRARY_PATH", "PYTHONPATH",
                                                            "LOADEDMODULES", "CONDA_PREFIX", "VIRTUAL_ENV"}
        changed = fleet("run", str(suite), cwd=tmp_path, timeout=120, environ={**base, **after})
        same = fleet("run", str(suite), "--force", cwd=tmp_path, timeout=120, environ={**base, **at_up})
    finally:
        down = fleet("down", cwd=tmp_path, timeout=120, environ={"FLEET_RUN_DIR": str(run)})
    assert down.returncode == 0, down.stderr
    assert changed.returncode == 0, changed.stderr
    warned = [line for line in changed.stderr.splitlines() if "differ from the fleet's" in line]
    assert len(warned) == 1, changed.stderr
    assert warned[0].startswith("fleet: warning: PATH, LOADEDMODULES in this shell differ from the fleet's"), warned
    assert "steps run with the fleet's environment, not this shell's" in warned[0], warned
    seen = (run / "steps" / "cmd" / "seen.txt").read_text()
    assert f"PATH={BEFORE_UP}:" in seen and AFTER_UP not in seen and "LOADEDMODULES=unset" in seen, seen
    assert same.returncode == 0, same.stderr
    assert "differ" not in same.stderr, same.stderr
    assert_nothing_left(run)


def test_fleet_run_from_another_directory_with_an_empty_search_path_entry_warns_of_nothing(tmp_path):
    # `export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/opt/x/lib` with it unset leaves an empty
    # entry (this directory); read from another one it is still the fleet's: no warning.
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    elsewhere.mkdir()
    suite = write_suite(tmp_path / "s.toml", SUITE)
    both = {**{k: v for k, v in env().items() if k != "LOADEDMODULES"}, "FLEET_RUN_DIR": str(run),
            "PATH": os.environ["PATH"] + ":", "LD_LIBRARY_PATH": ":/opt/x/lib"}
    up = fleet("up", "--local", "--nodes", "1", cwd=tmp_path, timeout=120, environ=both)
    assert up.returncode == 0, up.stderr
    try:
        ran = fleet("run", str(suite), cwd=elsewhere, timeout=120, environ=both)
    finally:
        down = fleet("down", cwd=tmp_path, timeout=120, environ={"FLEET_RUN_DIR": str(run)})
    assert down.returncode == 0, down.stderr
    assert ran.returncode == 0, ran.stderr
    assert "differ" not in ran.stderr, ran.stderr
    assert_nothing_left(run)
