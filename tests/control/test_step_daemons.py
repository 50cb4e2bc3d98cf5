"""What a step leaves running outside its process group and its session (a daemon made
with setsid, a call step's Popen(start_new_session=True)), with no memory cgroup to hold
it, ends with the fleet (fleet.node.orphans): the zygote, and the agent above it, are
child subreapers, so such a process becomes theirs when its parent ends, not init's.
Through the real CLI, the process table checked."""

from __future__ import annotations

import os
import random
import signal

import psutil

from fleetharness import assert_nothing_left, fleet, fleet_pids, tagged, wait_for, write_suite

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "3"]


def unique_sleeps(n: int) -> list[int]:
    """Sleep durations no other test uses at once: the processes are found by them."""
    base = random.randrange(11000, 15000, 5)
    return [base + i for i in range(n)]


def kill_tagged(tag: str) -> None:
    """SIGKILL what a failed test left (so that a failure leaves nothing either)."""
    for line in tagged(tag):
        try:
            os.kill(int(line.split()[0]), signal.SIGKILL)
        except OSError:
            pass


def daemon_suite(a: int, b: int) -> str:
    # A command step whose shell ends at once, its `setsid sleep` alone in a session of its
    # own, and a call step that leaves a new session's sleep behind. Each waits a moment
    # so that its daemon has left before the step's group is killed at its end (else that
    # kill takes the daemon still in the group, and the test proves nothing).
    return (f'[[steps]]\nid = "shell"\ncommand = "setsid sleep {a} & sleep 0.5; exit 0"\n'
            f'[[steps]]\nid = "call"\ncall = "daemon_steps:leave_a_daemon"\nargs = {{ seconds = {b} }}\n')


STEPS_PY = '''
import subprocess, time
def leave_a_daemon(seconds):
    subprocess.Popen(["sleep", str(seconds)], start_new_session=True)
    time.sleep(0.5)
'''


def test_a_daemon_a_step_left_in_a_session_of_its_own_ends_with_the_fleet(tmp_path):
    a, b = unique_sleeps(2)
    (tmp_path / "daemon_steps.py").write_text(STEPS_PY)
    suite = write_suite(tmp_path / "s.toml", daemon_suite(a, b))
    run_dir = tmp_path / "run"
    try:
        r = fleet("run", str(suite), "--run-dir", str(run_dir), *HB, cwd=tmp_path, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        for n in (a, b):
            assert_nothing_left(run_dir, tag=f"sleep {n}")
    finally:
        for n in (a, b):
            kill_tagged(f"sleep {n}")


def up_and_run(tmp_path, a: int, b: int):
    """`fleet up` (one node) in tmp_path/run and `fleet run` of the daemons' suite on it;
    (the run directory, the zygote's pid), with both daemons running."""
    (tmp_path / "daemon_steps.py").write_text(STEPS_PY)
    suite = write_suite(tmp_path / "s.toml", daemon_suite(a, b))
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", *HB, cwd=tmp_path, check=True, timeout=60)
    r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    wait_for(lambda: all(tagged(f"sleep {n}") for n in (a, b)), timeout=30, what="the daemons")
    found = zygotes(run_dir)
    assert len(found) == 1, found
    return run_dir, found[0]


def zygotes(run_dir) -> list[int]:
    """The run's zygotes alive now."""
    out = []
    for p in fleet_pids(run_dir):
        try:
            if "fleet.node.zygote" in " ".join(psutil.Process(p).cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out


def test_a_steps_daemon_is_the_zygotes_until_fleet_down_ends_it(tmp_path):
    # Not killed when its step ends: which step left it is no longer known then (its
    # parent is gone), and a running step's helper may be orphaned on purpose.
    a, b = unique_sleeps(2)
    try:
        run_dir, zygote = up_and_run(tmp_path, a, b)
        daemons = [int(line.split()[0]) for n in (a, b) for line in tagged(f"sleep {n}")]
        assert len(daemons) == 2, daemons
        for pid in daemons:  # adopted by the zygote, not by init
            assert psutil.Process(pid).ppid() == zygote, (pid, psutil.Process(pid).ppid(), zygote)
        down = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
        assert down.returncode == 0, down.stderr
        for n in (a, b):
            assert_nothing_left(run_dir, tag=f"sleep {n}")
    finally:
        fleet("down", "--run-dir", str(tmp_path / "run"), cwd=tmp_path, timeout=90)
        for n in (a, b):
            kill_tagged(f"sleep {n}")


def test_a_steps_daemon_ends_when_the_zygote_was_killed_and_the_agent_starts_a_new_one(tmp_path):
    # Its daemons go to the agent, which ends them as it starts a new zygote (fleet.node.rezygote);
    # before 2026-12-06 the agent stopped, its node leaving the fleet.
    a, b = unique_sleeps(2)
    try:
        run_dir, zygote = up_and_run(tmp_path, a, b)
        os.kill(zygote, signal.SIGKILL)
        wait_for(lambda: not any(tagged(f"sleep {n}") for n in (a, b)), timeout=30, what="the daemons to end")
        wait_for(lambda: [p for p in zygotes(run_dir) if p != zygote], timeout=30, what="a new zygote")
        down = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
        assert down.returncode == 0, down.stderr
        for n in (a, b):
            assert_nothing_left(run_dir, tag=f"sleep {n}", timeout=30)
    finally:
        fleet("down", "--run-dir", str(tmp_path / "run"), cwd=tmp_path, timeout=90)
        for n in (a, b):
            kill_tagged(f"sleep {n}")
