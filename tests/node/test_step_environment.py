"""What a step's environment is, seen from steps of a real local fleet: relative search
paths (fleet.node.searchpaths), TZ in a call step's env, and $PWD."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from cluster import requires_mpi
from fleetharness import REPO, TESTS, assert_nothing_left, exits, fleet, write_suite


def _project(where: Path) -> None:
    """A project run as `PATH=bin:$PATH PYTHONPATH=src fleet ...` from `where`: a package in
    src, a tool in bin, and a tool in `where` itself (found through an empty PATH entry)."""
    (where / "src" / "relpkg").mkdir(parents=True)
    (where / "src" / "relpkg" / "__init__.py").write_text("def hi():\n    print('relpkg says hi')\n")
    (where / "bin").mkdir()
    for path, says in ((where / "bin" / "reltool", "reltool ran"), (where / "cwdtool", "cwdtool ran")):
        path.write_text(f"#!/bin/sh\necho {says}\n")
        path.chmod(0o755)


def _log(run_dir: Path, step: str) -> str:
    try:
        return (run_dir / "steps" / step / "log").read_text(errors="replace")
    except OSError as e:
        return f"({e})"


def _relative_paths() -> dict:
    return {"PATH": "bin:" + os.environ["PATH"] + ":",  # (the empty entry last: the directory itself)
            "PYTHONPATH": f"{TESTS}:{REPO}:src"}


RELATIVE = f"""
[[steps]]
id = "call"
call = "relpkg:hi"

[[steps]]
id = "python"
command = {json.dumps([sys.executable, "-c", "import relpkg; relpkg.hi()"])}

[[steps]]
id = "tool"
command = "reltool"

[[steps]]
id = "cwdtool"
command = ["cwdtool"]
"""


def test_relative_path_and_pythonpath_entries_reach_command_steps_as_the_directory_the_fleet_started_in(tmp_path):
    _project(tmp_path)
    suite = write_suite(tmp_path / "rel.toml", '[suite]\nname = "rel"\nrun_dir = "run"\n' + RELATIVE)
    r = fleet("run", str(suite), cwd=tmp_path, timeout=120, environ=_relative_paths())
    run_dir = tmp_path / "run"
    said = {s: _log(run_dir, s) for s in ("call", "python", "tool", "cwdtool")}
    assert r.returncode == 0, (r.stdout, r.stderr, said)
    assert "relpkg says hi" in said["call"] and "relpkg says hi" in said["python"], said
    assert "reltool ran" in said["tool"] and "cwdtool ran" in said["cwdtool"], said
    assert_nothing_left(run_dir)


@requires_mpi
def test_relative_path_entries_reach_the_ranks_of_an_mpi_step(tmp_path):
    _project(tmp_path)
    suite = write_suite(tmp_path / "mpi.toml", '[suite]\nname = "mpi"\nrun_dir = "run"\n[[steps]]\nid = "ranks"\n'
                        'mpi = true\nranks = 2\ncommand = ["reltool"]\n')
    r = fleet("run", str(suite), cwd=tmp_path, timeout=120, environ=_relative_paths())
    log = _log(tmp_path / "run", "ranks")
    assert r.returncode == 0, (r.stdout, r.stderr, log)
    assert log.count("reltool ran") == 2, log
    assert [e["outcome"] for e in exits(tmp_path / "run", "ranks")] == ["succeeded"]


def test_a_search_path_keeps_its_absolute_and_tilde_entries_and_an_empty_value_as_they_are():
    from fleet.node.searchpaths import absolute, make_absolute
    assert absolute("bin:/usr/bin:~/bin::.:./x", "/w") == "/w/bin:/usr/bin:~/bin:/w:/w:/w/./x"
    assert absolute("", "/w") == ""
    env = {"PATH": ":/bin", "PYTHONPATH": "", "LD_LIBRARY_PATH": "lib", "OTHER": "rel"}
    make_absolute(env, "/w")
    assert env == {"PATH": "/w:/bin", "PYTHONPATH": "", "LD_LIBRARY_PATH": "/w/lib", "OTHER": "rel"}


ZONE = f"""
[[steps]]
id = "call"
call = "fleet_steps:clock_zone"
env = {{ TZ = "FLEETTEST-5" }}

[[steps]]
id = "command"
command = {json.dumps([sys.executable, "-c", "import time; print(time.strftime('%Z %z', time.localtime(0)))"])}
env = {{ TZ = "FLEETTEST-5" }}
"""


def test_a_call_step_s_tz_is_the_zone_its_time_functions_use_as_a_command_step_s_is(tmp_path):
    # (A POSIX TZ string: no time zone database needed. The zygote's own zone is the fleet's.)
    suite = write_suite(tmp_path / "tz.toml", '[suite]\nname = "tz"\nrun_dir = "run"\n' + ZONE)
    r = fleet("run", str(suite), cwd=tmp_path, timeout=120, environ={"TZ": "UTC0"})
    run_dir = tmp_path / "run"
    assert r.returncode == 0, (r.stdout, r.stderr, _log(run_dir, "call"), _log(run_dir, "command"))
    assert (run_dir / "steps" / "call" / "zone.txt").read_text() == "FLEETTEST +0500"
    assert "FLEETTEST +0500" in _log(run_dir, "command")


PWD_DUMP = "import os; open('pwd.%s' % os.environ.get('PMI_RANK', 'cmd'), 'w').write(os.environ.get('PWD', '-'))"


def test_pwd_is_the_step_s_work_directory_in_call_steps_commands_run_without_a_shell_and_shell_steps(tmp_path):
    suite = write_suite(tmp_path / "pwd.toml", f"""[suite]
name = "pwd"
run_dir = "run"
[[steps]]
id = "call"
call = "fleet_steps:env_report"
args = {{ names = ["PWD"] }}
[[steps]]
id = "exec"
command = {json.dumps([sys.executable, "-c", PWD_DUMP])}
[[steps]]
id = "shell"
command = 'printf %s "$PWD" > pwd.cmd'
[[steps]]
id = "elsewhere"
workdir = "own"
command = {json.dumps([sys.executable, "-c", PWD_DUMP])}
""")
    r = fleet("run", str(suite), cwd=tmp_path, timeout=120)
    steps = tmp_path / "run" / "steps"
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert json.loads((steps / "call" / "env.json").read_text()) == {"PWD": str(steps / "call")}
    for step in ("exec", "shell"):
        assert (steps / step / "pwd.cmd").read_text() == str(steps / step)
    assert (tmp_path / "run" / "own" / "pwd.cmd").read_text() == str(tmp_path / "run" / "own")


@requires_mpi
def test_pwd_is_the_step_s_work_directory_in_every_rank_of_an_mpi_step(tmp_path):
    suite = write_suite(tmp_path / "mpi.toml", '[suite]\nname = "mpi"\nrun_dir = "run"\n[[steps]]\nid = "ranks"\n'
                        f'mpi = true\nranks = 2\ncommand = {json.dumps([sys.executable, "-c", PWD_DUMP])}\n')
    r = fleet("run", str(suite), cwd=tmp_path, timeout=120)
    where = tmp_path / "run" / "steps" / "ranks"
    assert r.returncode == 0, (r.stdout, r.stderr, _log(tmp_path / "run", "ranks"))
    assert {p.name: p.read_text() for p in where.glob("pwd.*")} == {"pwd.0": str(where), "pwd.1": str(where)}
