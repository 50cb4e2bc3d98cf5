"""A stopped step takes its whole session with it (fleet.node.session), through the real
CLI: what its command (or a call step's function) put in process groups of their own
(coreutils `timeout`, a shell's job control) no longer outlives a timeout, a cancel or
`fleet down`."""

from __future__ import annotations

import random

import pytest

from fleetharness import (assert_nothing_left, cgroup1_unwritable, finish, fleet, spawn, tagged, wait_for,
                          write_suite)

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "3"]


def sleeps() -> tuple[int, int, int]:
    """Sleep durations no other test uses at once: the processes are found by them."""
    base = random.randrange(5000, 9000, 3)
    return base, base + 1, base + 2


def suite_text(a: int, b: int, c: int, timeout: str) -> str:
    return (f'[[steps]]\nid = "wrapped"\ncommand = "timeout 300 sleep {a}; echo done"\ngrace = 1\n{timeout}'
            f'[[steps]]\nid = "jobs"\ncommand = "bash -c \'set -m; sleep {b} & sleep {c}\'"\ngrace = 1\n{timeout}')


def test_a_timed_out_step_leaves_nothing_its_command_moved_to_other_process_groups(tmp_path):
    a, b, c = sleeps()
    suite = write_suite(tmp_path / "s.toml", suite_text(a, b, c, "timeout = 2\n"))
    run_dir = tmp_path / "run"
    try:
        r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "2", *HB, cwd=tmp_path, timeout=120)
        assert r.returncode == 1, r.stdout + r.stderr  # both timed out
        assert "timed_out" in r.stdout and "wrapped" in r.stdout and "jobs" in r.stdout, r.stdout
        for n in (a, b, c):
            assert_nothing_left(run_dir, tag=f"sleep {n}")
    finally:
        for n in (a, b, c):
            for line in tagged(f"sleep {n}"):
                fleet_kill(int(line.split()[0]))


def test_fleet_down_leaves_nothing_a_running_steps_command_moved_to_other_process_groups(tmp_path):
    a, b, c = sleeps()
    suite = write_suite(tmp_path / "s.toml", suite_text(a, b, c, ""))
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "2", *HB, cwd=tmp_path, check=True, timeout=60)
    try:
        p = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
        wait_for(lambda: all(tagged(f"sleep {n}") for n in (a, b, c)), timeout=60, what="the steps' sleeps")
        down = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
        assert down.returncode == 0, down.stderr
        finish(p)
        for n in (a, b, c):
            assert_nothing_left(run_dir, tag=f"sleep {n}")
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
        for n in (a, b, c):
            for line in tagged(f"sleep {n}"):
                fleet_kill(int(line.split()[0]))


def test_a_timed_out_call_step_leaves_nothing_it_ran_under_timeout_or_set_m_while_the_fleet_runs_on(tmp_path):
    # A call step's child leads a session of its own too (fleet.node.session.lead):
    # before 2026-12-06 it shared the zygote's, and these ran on until `fleet down`.
    a, b, _ = sleeps()
    suite = write_suite(tmp_path / "s.toml", f'[[steps]]\nid = "jobs"\ncall = "ending_steps:session_jobs"\n'
                                             f'args = {{ a = {a}, b = {b} }}\ntimeout = 2\ngrace = 1\n')
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", *HB, cwd=tmp_path, check=True, timeout=60)
    try:
        r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
        assert r.returncode == 1 and "timed_out" in r.stdout, r.stdout + r.stderr
        wait_for(lambda: not tagged(f"sleep {a}") and not tagged(f"sleep {b}"), timeout=15,
                 what=f"the timed-out step's sleeps to go, the fleet still up: {tagged(f'sleep {a}') + tagged(f'sleep {b}')}")
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
        for n in (a, b):
            for line in tagged(f"sleep {n}"):
                fleet_kill(int(line.split()[0]))


def fleet_kill(pid: int) -> None:
    """SIGKILL a leftover found by the test (so that a failure leaves nothing either)."""
    import os
    import signal
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


@pytest.mark.skipif(cgroup1_unwritable() is not None, reason=f"no writable cgroup v1 memory controller: "
                                                             f"{cgroup1_unwritable()}")
def test_a_daemon_a_step_with_a_memory_cgroup_left_behind_ends_with_it(tmp_path, monkeypatch):
    # setsid leaves the step's session, which no signal to a group or a session reaches;
    # the step's cgroup holds it, and the agent empties the cgroup when the step ends.
    monkeypatch.setenv("FLEET_MEMLIMIT", "cgroup1")
    n, _, _ = sleeps()
    # (the step waits a moment so that setsid has run: else the kill of its group at its end
    # takes the daemon before it leaves, and the test would prove nothing)
    suite = write_suite(tmp_path / "s.toml", f'[[steps]]\nid = "d"\ncommand = "setsid sleep {n} & sleep 0.5; '
                                             f'exit 0"\nmemory = "200MiB"\n')
    run_dir = tmp_path / "run"
    try:
        r = fleet("run", str(suite), "--run-dir", str(run_dir), *HB, cwd=tmp_path, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert_nothing_left(run_dir, tag=f"sleep {n}")
    finally:
        for line in tagged(f"sleep {n}"):
            fleet_kill(int(line.split()[0]))
