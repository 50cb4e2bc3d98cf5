"""`fleet validate --imports` imports from the directory the fleet's agents started in
(the one `fleet run` would submit to), not its own, and says which directory it used.
Real fleets, real connection files, real imports."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

from fleetharness import assert_nothing_left, fleet

CALLS = '[suite]\nname = "{name}"\n[[steps]]\nid = "hello"\ncall = "{module}:hello"\n'


@pytest.fixture
def two_dirs(tmp_path):
    """A fleet up, started in `home` (which has a module), and a suite directory `work`
    (which has another): (home, work, run directory)."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / "at_home_steps.py").write_text("def hello():\n    print('hello from home')\n")
    (work / "at_work_steps.py").write_text("def hello():\n    print('hello from work')\n")
    run = home / "run"
    fleet("up", "--local", "--nodes", "1", "--run-dir", str(run), cwd=home, check=True, timeout=60)
    try:
        yield home, work, run
    finally:
        fleet("down", "--run-dir", str(run), cwd=home, timeout=60)
        assert_nothing_left(run)


def test_with_a_fleet_up_elsewhere_imports_are_checked_from_where_its_agents_started(two_dirs):
    # (validate imported from its own directory: it said valid, and the run failed with
    # "ModuleNotFoundError: No module named ...", and the other way round)
    home, work, run = two_dirs
    there = {"FLEET_RUN_DIR": str(run)}
    at_home = work / "home.toml"
    at_home.write_text(CALLS.format(name="home", module="at_home_steps"))
    at_work = work / "work.toml"
    at_work.write_text(CALLS.format(name="work", module="at_work_steps"))
    said = f"imports checked from {home} (where the fleet up in {run} started: its agents import from there)"

    r = fleet("validate", "--imports", str(at_home), cwd=work, environ=there, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert said in r.stdout.splitlines(), r.stdout
    r = fleet("validate", "--imports", str(at_work), cwd=work, environ=there, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert said in r.stdout.splitlines(), r.stdout
    assert f"error: {at_work}: step 'hello': field 'call': module 'at_work_steps' not found" in r.stderr, r.stderr

    # And the fleet agrees: what validate accepted runs, what it refused cannot import.
    r = fleet("run", str(at_home), cwd=work, environ=there, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    r = fleet("run", str(at_work), cwd=work, environ=there, timeout=120)
    assert r.returncode == 1 and "No module named 'at_work_steps'" in r.stdout + r.stderr, r.stdout + r.stderr


def test_fleet_step_imports_a_call_step_from_where_the_fleet_up_in_its_run_directory_started(two_dirs):
    # (fleet step imported from its own directory: "No module named 'at_home_steps'",
    # while fleet run and validate --imports found it)
    home, work, run = two_dirs
    head = f'[suite]\nname = "{{name}}"\nrun_dir = "{run}"\n'
    at_home = work / "home.toml"
    at_home.write_text(CALLS.format(name="home", module="at_home_steps").replace('[suite]\nname = "home"\n',
                                                                                  head.format(name="home")))
    at_work = work / "work.toml"
    at_work.write_text(CALLS.format(name="work", module="at_work_steps").replace('[suite]\nname = "work"\n',
                                                                                  head.format(name="work")))
    said = f"its module imported from {home} (where the fleet up in {run} started: its agents import from there)"

    r = fleet("step", str(at_home), "hello", cwd=work, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "hello from home" in r.stdout
    assert said in r.stderr.splitlines()[0], r.stderr
    r = fleet("step", str(at_work), "hello", cwd=work, timeout=120)  # as the fleet's own steps would fail
    assert r.returncode == 1, r.stdout + r.stderr
    assert "No module named 'at_work_steps'" in r.stdout + r.stderr


def test_with_no_fleet_up_imports_are_checked_from_this_directory_and_it_says_so(tmp_path):
    (tmp_path / "here_steps.py").write_text("def hello():\n    pass\n")
    suite = tmp_path / "s.toml"
    suite.write_text(CALLS.format(name="s", module="here_steps"))
    r = fleet("validate", "--imports", str(suite), cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[0] == (f"imports checked from {tmp_path} (this directory: no fleet is up in "
                                        f"{tmp_path / 'runs' / 's'}, and `fleet run` would start one in the "
                                        "directory it runs in)"), r.stdout


def test_a_fleet_that_does_not_record_its_directory_is_said_to_and_this_directory_is_used(tmp_path, monkeypatch):
    # A connection file of a fleet started before 2026-12-06: no "cwd" (this process
    # stands for its live coordinator).
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    conn = {"client": "tcp://127.0.0.1:1", "agents": "tcp://127.0.0.1:2", "pid": os.getpid(),
            "host": socket.gethostname(), "started": time.time(), "run_dir": str(run)}
    fd = os.open(run / "fleet.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(conn, f)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLEET_RUN_DIR", str(run))
    from fleet.control.importdir import for_validate
    where = for_validate(None)
    assert where.path == tmp_path
    assert where.line() == (f"imports checked from {tmp_path} (this directory: the fleet up in {run} does not record "
                            "the directory it started in (started before 2026-12-06); its agents import from the "
                            "one `fleet up` ran in)")
