"""`fleet step` holds its one step as a fleet would: what a staged step asks for, its
`timeout` and `memory`, this command's own end, and what it leaves in the run directory
-- through the real CLI."""

from __future__ import annotations

import json
import os
import signal
import stat
import time
from pathlib import Path

import psutil
import pytest

from fleetharness import fleet, spawn, tagged, wait_for, write_suite

STEPS = '''
import os, time
import fleet

def nexter(ctx):
    if ctx.stage == "":
        raise fleet.Next("two")
    open("two.txt", "w").write("stage two")

def waiter(ctx):
    if ctx.phase == 0:
        ctx.submit([{"id": "k1", "command": "true"}, {"id": "k2", "command": "true"}])
        raise fleet.WaitForChildren()

def planner(ctx):
    ctx.submit([{"id": "k1", "command": "true"}, {"id": "k2", "command": "true"}])

def broken():
    raise fleet.Broken("nope")
'''

SUITE = """
[suite]
name = "holds"
run_dir = "run"
[[steps]]
id = "nexter"
call = "dbgsteps:nexter"
[[steps]]
id = "waiter"
call = "dbgsteps:waiter"
[[steps]]
id = "planner"
call = "dbgsteps:planner"
[[steps]]
id = "broken"
call = "dbgsteps:broken"
[[steps]]
id = "proto"
command = "echo $FLEET_NEXT_STAGE > where.txt; echo two > $FLEET_NEXT_STAGE; exit 2"
protocol = "steps"
[[steps]]
id = "slow"
command = "trap '' TERM; sleep 30 # @TAG@"
timeout = 1
grace = 1
[[steps]]
id = "hog"
call = "memory_steps:hog"
args = { mib = 300, hold = 30 }
memory = "50MiB"
[[steps]]
id = "long"
command = "sleep 30 & echo $! > kid.pid; echo $$ > sh.pid; wait # @TAG@"
[[steps]]
id = "nocmd"
command = ["/nonexistent/prog"]
"""


@pytest.fixture
def suite(tmp_path) -> Path:
    (tmp_path / "dbgsteps.py").write_text(STEPS)
    return write_suite(tmp_path / "s.toml", SUITE.replace("@TAG@", f"tag-{tmp_path.name}"))


def fleet_files(run: Path, step: str) -> list[str]:
    d = run / "steps" / step / ".fleet"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def test_fleet_step_record_of_a_step_asking_for_its_next_stage_uses_no_attempt(tmp_path, suite):
    for _ in range(6):  # one more than --max-attempts' default
        r = fleet("step", str(suite), "nexter", "--record", cwd=tmp_path, timeout=60)
        assert r.returncode == 2, r.stderr
        assert ("nexter asked for its next stage 'two': fleet step runs one stage; "
                "run the suite to go on (not recorded)") in r.stderr
        assert "failed" not in r.stderr
    run = tmp_path / "run"
    assert fleet_files(run, "nexter") == []
    r = fleet("run", str(suite), "--only", "nexter", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (run / "steps/nexter/two.txt").read_text() == "stage two"


def test_fleet_step_says_what_a_staged_step_asked_for_and_records_broken_as_broken(tmp_path, suite):
    run = tmp_path / "run"
    r = fleet("step", str(suite), "waiter", "--record", cwd=tmp_path, timeout=60)
    assert r.returncode == 3, r.stderr
    assert "waiter asked to wait for its children: fleet step runs one stage" in r.stderr
    assert "waiter submitted 2 children: fleet step does not run them; run the suite" in r.stderr
    assert fleet_files(run, "waiter") == []
    r = fleet("step", str(suite), "broken", "--record", cwd=tmp_path, timeout=60)
    assert r.returncode == 5, r.stderr
    assert "broken broken: nope (recorded)" in r.stderr
    assert json.loads((run / "steps/broken/.fleet/final.json").read_text())["outcome"] == "broken"
    [attempt] = (run / "steps/broken/.fleet").glob("attempt.*.json")
    assert json.loads(attempt.read_text())["outcome"] == "broken"
    r = fleet("step", str(suite), "proto", cwd=tmp_path, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "proto asked for its next stage 'two'" in r.stderr


def test_plain_fleet_step_leaves_no_fleet_directory_and_names_the_children_it_does_not_run(tmp_path, suite):
    run = tmp_path / "run"
    r = fleet("step", str(suite), "planner", cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "planner succeeded" in r.stderr
    assert "planner submitted 2 children: fleet step does not run them; run the suite" in r.stderr
    r = fleet("step", str(suite), "proto", cwd=tmp_path, timeout=60)
    assert r.returncode == 2, r.stderr
    where = (run / "steps/proto/where.txt").read_text().strip()
    assert not where.startswith(str(run)) and not os.path.exists(where)  # (a directory of its own, gone)
    assert not list(run.glob("steps/**/.fleet")), sorted(run.glob("steps/**/.fleet"))


def test_fleet_step_ends_a_step_past_its_timeout_as_timed_out_and_records_it(tmp_path, suite):
    t0 = time.monotonic()
    r = fleet("step", str(suite), "slow", "--record", cwd=tmp_path, timeout=60)
    assert r.returncode == 124, r.stderr
    assert time.monotonic() - t0 < 20
    assert "slow timed_out: timed out after 1 s; SIGKILL after 1 s grace (recorded)" in r.stderr
    run = tmp_path / "run"
    assert json.loads((run / "steps/slow/.fleet/final.json").read_text())["outcome"] == "timed_out"
    assert not (run / "steps/slow/.fleet/done.json").exists()
    assert not tagged(f"tag-{tmp_path.name}")


@pytest.mark.parametrize("mechanism", ["auto", "watchdog"])
def test_fleet_step_ends_a_step_past_its_memory_as_out_of_memory_naming_its_peak(tmp_path, suite, mechanism):
    r = fleet("step", str(suite), "hog", "--record", cwd=tmp_path, timeout=60,
              environ={"FLEET_MEMLIMIT": mechanism})
    assert r.returncode == 137, r.stderr
    assert "hog out_of_memory: out of memory: used " in r.stderr and "of its memory 50MiB" in r.stderr
    run = tmp_path / "run"
    assert json.loads((run / "steps/hog/.fleet/final.json").read_text())["outcome"] == "out_of_memory"
    assert not (run / "steps/hog/.fleet/done.json").exists()


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_fleet_step_stops_its_command_step_and_leaves_nothing_running(tmp_path, suite, sig):
    p = spawn("step", str(suite), "long", "--record", cwd=tmp_path)
    workdir = tmp_path / "run/steps/long"
    try:
        wait_for(lambda: (workdir / "kid.pid").exists() and (workdir / "sh.pid").exists()
                 and (workdir / "sh.pid").read_text().strip(), what="the step to start")
        pids = [int((workdir / n).read_text()) for n in ("sh.pid", "kid.pid")]
        os.kill(p.pid, sig)  # fleet step alone, by its pid
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 128 + sig, err
    assert f"long terminated: fleet step got {signal.Signals(sig).name}" in err
    assert "(not recorded: fleet step was stopped)" in err
    assert not (tmp_path / "run/steps/long/.fleet").exists()
    wait_for(lambda: all(_gone(pid) for pid in pids), timeout=5, what="the step's processes to end")
    assert not tagged(f"tag-{tmp_path.name}")


def test_fleet_step_makes_its_run_directory_as_fleet_run_does_and_says_a_missing_program_once(tmp_path, suite):
    r = fleet("step", str(suite), "nocmd", cwd=tmp_path, timeout=60)
    assert r.returncode == 127, r.stderr
    assert len([line for line in r.stderr.splitlines() if "/nonexistent/prog" in line]) == 1, r.stderr
    assert stat.S_IMODE((tmp_path / "run").stat().st_mode) == 0o700
    r = fleet("step", str(suite), "nexter", "--run-dir", "/proc/x", cwd=tmp_path, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "cannot use run directory /proc/x" in r.stderr and "FileNotFoundError" not in r.stderr
