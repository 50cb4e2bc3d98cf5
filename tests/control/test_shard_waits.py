"""Shards of one suite waiting for each other's steps, and fleets sharing a run
directory with another definition of a suite: every wait ends (real `fleet run` and
`fleet up` processes, each bounded by a timeout), and a dependent runs again when
its deps ran anew (make's rule) whichever fleet ran what."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fleetharness import env, events, fleet, wait_for, write_suite

# t/0..t/3 (t/1 fails when FAIL is in its command) and gather, which needs all four.
SUITE = """
[suite]
name = "sh"
run_dir = "run"
[[steps]]
id = "t/{{i}}"
array = "0-{last}"
task = "{{i}}"
command = "{command}"
[[steps]]
id = "gather"
task = "0"
command = "{gather}"
deps = [{deps}]
"""


def suite(path: Path, command: str, last: int = 3, gather: str = "true") -> Path:
    deps = ", ".join(f'"t/{i}"' for i in range(last + 1))
    return write_suite(path, SUITE.format(last=last, command=command, deps=deps, gather=gather))


@pytest.fixture
def bg(tmp_path):
    """`fleet` commands in the background, each in its own process group, killed by
    group if a test leaves one running; `fleet up` fleets brought down."""
    ps: list[subprocess.Popen] = []
    ups: list[Path] = []

    def start(*args: str) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-m", "fleet", *args], cwd=tmp_path, env=env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        ps.append(p)
        return p

    start.ups = ups
    yield start
    for p in ps:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.communicate(timeout=30)
    for run_dir in ups:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)


def finish(p: subprocess.Popen, timeout: float) -> tuple[int, str, str]:
    """The command's end, or its group killed and the test failed: a wait that does not
    end is the defect these tests are about."""
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate(timeout=30)
        raise AssertionError(f"{' '.join(p.args[3:])} hung\nstdout:\n{out}\nstderr:\n{err}") from None
    return p.returncode, out, err


def outcomes(out: str) -> dict[str, str]:
    """step -> outcome, from `fleet run`'s "[k/n]  outcome  step" lines, and its
    unnumbered "outcome  step ... (shard I/N's step)" lines of other shards' steps."""
    got = {}
    for line in out.splitlines():
        r = line.split(None, 3)
        if line.startswith("[") and len(r) >= 3 and "/" in r[0]:
            got[r[2].rstrip(":")] = r[1]
        elif line.endswith("'s step)") and len(r) >= 2:
            got[r[1].rstrip(":")] = r[0]
    return got


def test_a_shard_whose_dependency_failed_in_another_shard_before_it_started_blocks_its_dependent(tmp_path):
    s = suite(tmp_path / "s.toml", "test {i} != 1")
    r = fleet("run", str(s), "--shard", "1/2", cwd=tmp_path, timeout=60)
    assert r.returncode == 1 and outcomes(r.stdout)["t/1"] == "failed", r.stdout + r.stderr
    r = fleet("run", str(s), "--shard", "0/2", cwd=tmp_path, timeout=30)  # it waited for ever before
    assert r.returncode == 1, r.stdout + r.stderr
    got = outcomes(r.stdout)
    assert got["gather"] == "blocked" and got["t/1"] == "failed", r.stdout
    assert got["t/0"] == got["t/2"] == got["t/3"] == "succeeded", r.stdout  # (t/3: shard 1/2's, done there)
    assert "t/1: failed in fleet" in r.stdout and "exit status 1" in r.stdout, r.stdout
    assert not [e for e in events(tmp_path / "run") if e["kind"] == "started" and e.get("step") == "gather"]


def test_a_shard_whose_dependency_another_shard_ran_under_another_definition_blocks_its_dependent(tmp_path):
    r = fleet("run", str(suite(tmp_path / "v2.toml", "echo two {i}")), "--shard", "1/2", cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    r = fleet("run", str(suite(tmp_path / "v1.toml", "echo one {i}")), "--shard", "0/2", cwd=tmp_path, timeout=30)
    assert r.returncode == 1, r.stdout + r.stderr
    got = outcomes(r.stdout)
    assert got["gather"] == "blocked" and got["t/1"] == got["t/3"] == "failed", r.stdout
    assert "another definition of it succeeded" in r.stdout and "run its own shard again" in r.stdout, r.stdout


def test_a_shard_still_waits_for_a_dependency_that_failed_before_while_another_shard_runs_it_again(tmp_path, bg):
    s = suite(tmp_path / "s.toml", "sleep 1; test {i} != 1 || (test -e ../../../fixed && sleep 8)")
    run_dir = tmp_path / "run"
    r = fleet("run", str(s), "--shard", "1/2", cwd=tmp_path, timeout=60)
    assert r.returncode == 1 and outcomes(r.stdout)["t/1"] == "failed", r.stdout + r.stderr
    (run_dir / "fixed").touch()
    # Shard 1 again, its t/1 fixed and slow: running when shard 0 comes, so the run
    # directory is shared and shard 0 waits for t/1's new outcome, not its old failure.
    one = bg("run", str(s), "--shard", "1/2")
    wait_for(lambda: sum(e["kind"] == "started" and e.get("step") == "t/1" for e in events(run_dir)) == 2, 30,
             "shard 1 to start t/1 again")
    r = fleet("run", str(s), "--shard", "0/2", cwd=tmp_path, timeout=60)
    rc, out, err = finish(one, 60)
    assert rc == 0, out + err
    assert r.returncode == 0 and outcomes(r.stdout)["gather"] == "succeeded", r.stdout + r.stderr


@pytest.mark.parametrize("first", ["0/2", "1/2"])
def test_two_shards_submitted_to_one_fleet_run_every_step_once_in_either_order(tmp_path, bg, first):
    s = suite(tmp_path / "s.toml", "sleep 1; echo {i}", last=7)
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--local", cwd=tmp_path, check=True, timeout=60)
    bg.ups.append(run_dir)
    second = "1/2" if first == "0/2" else "0/2"
    a = bg("run", str(s), "--run-dir", str(run_dir), "--shard", first)
    wait_for(lambda: any(e["kind"] == "submitted" for e in events(run_dir)), 30, f"shard {first} to be submitted")
    b = bg("run", str(s), "--run-dir", str(run_dir), "--shard", second)
    ra, rb = finish(a, 60), finish(b, 60)  # before, with shard 0 first, both waited for ever
    assert ra[0] == 0 and rb[0] == 0, ra + rb
    starts = [e["step"] for e in events(run_dir) if e["kind"] == "started"]
    assert sorted(starts) == sorted([f"t/{i}" for i in range(8)] + ["gather"]), starts
    zero = outcomes(ra[1] if first == "0/2" else rb[1])
    assert zero["gather"] == "succeeded", zero


def test_only_a_step_of_another_shard_is_refused_naming_its_shard(tmp_path):
    s = suite(tmp_path / "s.toml", "true")
    r = fleet("run", str(s), "--shard", "0/2", "--only", "t/1", cwd=tmp_path, timeout=30)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "'t/1' is in shard 1/2" in r.stderr and "nothing was started" in r.stderr, r.stderr
    assert not (tmp_path / "run" / "steps").exists()
    r = fleet("run", str(s), "--shard", "1/2", "--only", "t/1", cwd=tmp_path, timeout=60)
    assert r.returncode == 0 and outcomes(r.stdout) == {"t/1": "succeeded"}, r.stdout + r.stderr


def test_a_dependent_another_fleet_ran_against_the_old_deps_runs_again_after_its_deps_ran_anew(tmp_path, bg):
    run_dir = tmp_path / "run"
    hold = "until test -e ../../go; do sleep 0.1; done"  # gather ends once the test says so
    v1 = suite(tmp_path / "v1.toml", "echo one {i}", last=1, gather=hold)
    v2 = suite(tmp_path / "v2.toml", "echo two {i}", last=1, gather=hold)

    def seen(kind: str, step: str, n: int = 1) -> bool:
        return sum(e["kind"] == kind and e.get("step") == step for e in events(run_dir)) >= n

    a = bg("run", str(v1))
    wait_for(lambda: seen("started", "gather"), 60, "fleet A to start gather")
    # Fleet B runs the changed t/* while A runs gather against the old ones; B's gather
    # then waits for A's, and runs again (before 2026-12-06 A's success was taken).
    b = bg("run", str(v2), "--run-dir", str(run_dir))
    wait_for(lambda: seen("elsewhere", "gather"), 60, "fleet B to find gather held by A")
    assert seen("exit", "t/0", 2) and seen("exit", "t/1", 2)
    (run_dir / "go").touch()
    ra, rb = finish(a, 60), finish(b, 60)
    assert ra[0] == 0 and rb[0] == 0, ra + rb
    assert outcomes(ra[1]) == {"t/0": "succeeded", "t/1": "succeeded", "gather": "succeeded"}, ra[1]
    assert outcomes(rb[1]) == {"t/0": "succeeded", "t/1": "succeeded", "gather": "succeeded"}, rb[1]
    marker = json.loads((run_dir / "steps" / "gather" / ".fleet" / "done.json").read_text())
    ids = {d: json.loads((run_dir / "steps" / d / ".fleet" / "done.json").read_text())["id"] for d in ("t/0", "t/1")}
    assert marker["deps"] == ids
    r = fleet("run", str(v2), cwd=tmp_path, timeout=60)
    assert r.returncode == 0 and set(outcomes(r.stdout).values()) == {"skipped"}, r.stdout + r.stderr


def test_two_fleets_of_one_suite_split_its_steps_and_run_each_once(tmp_path, bg):
    run_dir = tmp_path / "run"
    s = suite(tmp_path / "s.toml", "sleep 1", last=11)
    a = bg("run", str(s))
    wait_for(lambda: any(e["kind"] == "started" for e in events(run_dir)), 30, "fleet A to start a step")
    b = bg("run", str(s), "--run-dir", str(run_dir))
    ra, rb = finish(a, 90), finish(b, 90)
    assert ra[0] == 0 and rb[0] == 0, ra + rb
    starts = [e["step"] for e in events(run_dir) if e["kind"] == "started"]
    assert sorted(starts) == sorted([f"t/{i}" for i in range(12)] + ["gather"]), starts
    r = fleet("run", str(s), cwd=tmp_path, timeout=60)  # the marker of gather names what its deps' markers say
    assert r.returncode == 0 and set(outcomes(r.stdout).values()) == {"skipped"}, r.stdout + r.stderr


def test_a_shard_waiting_only_for_other_shards_steps_names_them_and_ends_once_they_run(tmp_path):
    # (before 2026-12-07 it said "and 2 steps of other shards it waits for" once, then
    # nothing: a shard whose other shard never ran waited in silence for ever)
    import select
    import time
    s = suite(tmp_path / "s.toml", "true")
    p = subprocess.Popen([sys.executable, "-m", "fleet", "run", str(s), "--shard", "0/2", "--nodes", "1"],
                         cwd=tmp_path, env={**env(), "FLEET_TEST_OTHERS_QUIET_S": "1"}, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        said, deadline = [], time.monotonic() + 60
        while not [line for line in said if line.startswith("fleet: nothing of this shard has run")]:
            assert time.monotonic() < deadline and p.poll() is None, said
            if select.select([p.stdout], [], [], 1.0)[0]:
                said.append(p.stdout.readline())
        line = said[-1]
        assert "it waits for 2 steps of other shards: t/1 (shard 1/2), t/3 (shard 1/2): they end when their " \
               "shards run them" in line, line
        other = fleet("run", str(s), "--shard", "1/2", "--nodes", "1", cwd=tmp_path, timeout=120)
        assert other.returncode == 0, other.stdout + other.stderr
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, out + err
        assert "succeeded  gather" in out, out
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate(timeout=30)
