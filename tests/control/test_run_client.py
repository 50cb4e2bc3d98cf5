"""`fleet run`'s client: with a fleet up it reads only the suite's [suite] table and the
fleet reads and checks the steps (once, not twice); with none up it checks the whole
suite itself before an embedded fleet starts. Real client processes, a real fleet."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fleetharness import assert_nothing_left, fleet, python, write_suite

# The client, with fleet.core.suite's making of a step counted (said on stderr at exit).
CLIENT = """
import atexit, sys
from fleet.core import suite as S
made, make = [0], S._make_step
def counted(*a, **k):
    made[0] += 1
    return make(*a, **k)
S._make_step = counted
atexit.register(lambda: print(f"steps made by the client: {made[0]}", file=sys.stderr))
from fleet.cli import main
main(sys.argv[1:], prog_name="fleet")
"""


def client(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return python("-c", CLIENT, *args, cwd=cwd)


def made(r: subprocess.CompletedProcess) -> int:
    return int(r.stderr.rsplit("steps made by the client: ", 1)[1].split()[0])


@pytest.fixture
def live(tmp_path):
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True)
    try:
        yield run_dir
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)


def array(tmp_path: Path, n: int, extra: str = "") -> Path:
    return write_suite(tmp_path / "many.toml", f"""
[suite]
name = "many"
[[steps]]
id = "s/{{i}}"
array = "1-{n}"
command = "true"
{extra}
""")


def test_with_a_fleet_up_the_client_makes_no_step_and_the_fleet_runs_them_all(tmp_path, live):
    r = client("run", str(array(tmp_path, 30)), "--run-dir", str(live), cwd=tmp_path)
    assert r.returncode == 0 and "suite 'many': 30 succeeded" in r.stdout, r.stdout + r.stderr
    assert made(r) == 0


def test_with_no_fleet_up_the_client_checks_every_step_before_an_embedded_fleet_starts(tmp_path):
    r = client("run", str(array(tmp_path, 30)), "--run-dir", str(tmp_path / "alone"), cwd=tmp_path)
    assert r.returncode == 0 and "suite 'many': 30 succeeded" in r.stdout, r.stdout + r.stderr
    assert made(r) == 30
    bad = client("run", str(array(tmp_path, 3, 'cores = "x"')), "--run-dir", str(tmp_path / "bad"), cwd=tmp_path)
    assert bad.returncode == 2 and "field 'cores'" in bad.stderr and "nothing was started" in bad.stderr
    assert not (tmp_path / "bad").exists()  # no fleet was started, nothing written


def test_with_a_fleet_up_the_fleets_check_names_file_step_and_field_and_nothing_starts(tmp_path, live):
    suite = write_suite(tmp_path / "bad.toml", """
[suite]
name = "bad"
[[steps]]
id = "a"
command = "true"
cores = "x"
[[steps]]
id = "b"
command = "true"
deps = ["nope"]
""")
    r = client("run", str(suite), "--run-dir", str(live), cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"error: {suite}: step 'a': field 'cores'" in r.stderr
    assert f"error: {suite}: step 'b': field 'deps': 'nope' names no step" in r.stderr
    assert "2 problems found; nothing was started" in r.stderr and made(r) == 0
    assert not (live / "steps").exists()
    only = client("run", str(array(tmp_path, 2)), "--run-dir", str(live), "--only", "zz", cwd=tmp_path)
    assert only.returncode == 2 and f"{tmp_path / 'many.toml'}: --only: suite 'many' has no step 'zz'" in only.stderr


def test_with_a_fleet_up_a_suite_with_no_steps_in_the_shard_says_so_and_starts_nothing(tmp_path, live):
    empty = write_suite(tmp_path / "empty.toml", '[suite]\nname = "empty"\n')
    r = client("run", str(empty), "--run-dir", str(live), cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "suite 'empty' has no steps; nothing was started", r.stdout
    one = write_suite(tmp_path / "one.toml", '[suite]\nname = "one"\n[[steps]]\nid = "a"\ncommand = "true"\n')
    shards = [client("run", str(one), "--run-dir", str(live), "--shard", f"{i}/2", cwd=tmp_path) for i in (0, 1)]
    assert [s.returncode for s in shards] == [0, 0], [s.stdout + s.stderr for s in shards]
    said = sorted(s.stdout.strip().splitlines()[-1] for s in shards)
    assert said[0].startswith("suite 'one' has no steps in shard ") and said[1].startswith("suite 'one': 1 succeeded")
