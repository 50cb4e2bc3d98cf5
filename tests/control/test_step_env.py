"""A step's own environment variables (`env`): set for a call step and a command step
alike, beside fleet's own, and part of the step's definition, so changing them reruns it."""

from __future__ import annotations

import json

from fleetharness import assert_nothing_left, fleet

from fleet.wire import records

SUITE = """
[suite]
name = "envs"
run_dir = "run"

[defaults]
env = {{ SHARED = "from defaults" }}

[[steps]]
id = "py"
call = "fleet_steps:env_report"
args = {{ names = ["GREETING", "N", "SHARED", "FLEET_STEP", "OMP_NUM_THREADS"] }}
env = {{ GREETING = "{greeting}", N = 3 }}

[[steps]]
id = "sh"
command = 'printf "%s|%s|%s|%s" "$GREETING" "$SHARED" "$FLEET_STEP" "$OMP_NUM_THREADS" > env.txt'
env = {{ GREETING = "hello there" }}

[[steps]]
id = "plain"
command = 'printf "%s|%s" "${{GREETING-unset}}" "$SHARED" > env.txt'
"""


def test_a_steps_env_reaches_call_and_command_steps_beside_fleets_own_and_a_change_reruns_only_that_step(tmp_path):
    suite = tmp_path / "s.toml"
    suite.write_text(SUITE.format(greeting="hi"))
    r = fleet("run", str(suite), "--nodes", "1", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    run = tmp_path / "run"
    # A step's variables go on top of the defaults'; the thread-pool variables and
    # FLEET_* are still fleet's.
    assert json.loads((run / "steps/py/env.json").read_text()) == {
        "GREETING": "hi", "N": "3", "SHARED": "from defaults", "FLEET_STEP": "py", "OMP_NUM_THREADS": "1"}
    assert (run / "steps/sh/env.txt").read_text() == "hello there|from defaults|sh|1"
    assert (run / "steps/plain/env.txt").read_text() == "unset|from defaults"

    suite.write_text(SUITE.format(greeting="bonjour"))
    r = fleet("run", str(suite), "--nodes", "1", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads((run / "steps/py/env.json").read_text())["GREETING"] == "bonjour"
    runs = {s: [a["outcome"] for a in records.attempts(run, s)] for s in ("py", "sh", "plain")}
    assert runs == {"py": ["succeeded", "succeeded"], "sh": ["succeeded"], "plain": ["succeeded"]}, runs
    assert_nothing_left(run)


def test_an_env_that_sets_fleets_own_or_a_thread_pool_variable_is_refused_before_anything_starts(tmp_path):
    suite = tmp_path / "s.toml"
    suite.write_text('[suite]\nname = "bad"\n[[steps]]\nid = "a"\ncommand = "true"\nenv = { FLEET_STEP = "x" }\n'
                     '[[steps]]\nid = "b"\ncommand = "true"\nenv = { OMP_NUM_THREADS = 4 }\n'
                     '[[steps]]\nid = "c"\ncommand = "true"\nenv = { "1X" = "y", OK = true }\n')
    r = fleet("run", str(suite), cwd=tmp_path, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.splitlines()
    assert f"error: {suite}: step 'a': field 'env': FLEET_STEP is fleet's own: a step's env may not set FLEET_* " \
           "variables" in lines, r.stderr
    assert f"error: {suite}: step 'b': field 'env': OMP_NUM_THREADS is set from the step's cores (an MPI step's " \
           "threads): change those instead" in lines, r.stderr
    assert any(line.startswith(f"error: {suite}: step 'c': field 'env': '1X' is not an environment variable's name")
               for line in lines), r.stderr
    assert "3 problems found; nothing was started" in lines, r.stderr
    assert not (tmp_path / "runs").exists()
