"""A running step lost with its node, whose retry no longer fits what is left of the
allocation: its lost attempt, the retry and the unrunnable end come in one batch of the
scheduler's decisions. The run counts the step once, ends and says so; before 2026-12-07
it counted the lost attempt as final too (the step's state read after the whole batch),
its submission's steps left fell to -1, and `fleet run` waited forever ("2/1 finished").
Real fleets; the process table checked."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys

from fleetharness import assert_nothing_left, env, fleet, records, tagged, wait_for, write_suite

from fleet.wire import events as E

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "2"]
SECONDS = f"57.{random.randrange(1000, 10000)}"  # its sleep: unique to this test


def test_a_step_lost_with_its_node_whose_retry_no_longer_fits_ends_the_run_once_unrunnable(tmp_path):
    run_dir = tmp_path / "run"
    runner = None
    try:
        fleet("up", "--run-dir", str(run_dir), "--nodes", "2", *HB, cwd=tmp_path, check=True, timeout=60)
        joined = wait_for(lambda: [e for e in records(run_dir) if isinstance(e, E.NodeJoined)], 30, "the nodes")
        cores = sum(len(e.cores) for e in joined)  # the whole allocation: it cannot fit on one node
        suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "lost"\n\n'
                            f'[[steps]]\nid = "w"\ncores = {cores}\nspan = true\nretries = 2\n'
                            f'command = "sleep {SECONDS}"\n')
        runner = subprocess.Popen([sys.executable, "-m", "fleet", "run", str(suite), "--run-dir", str(run_dir)],
                                  cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, start_new_session=True)
        started = wait_for(lambda: [e for e in records(run_dir) if isinstance(e, E.Started) and e.step == "w"],
                           60, "the step to start")
        agent = next(e.pid for e in joined if e.node != started[0].node)  # a node of its two
        os.killpg(os.getpgid(agent), signal.SIGKILL)  # the agent and its zygote, as a node's death
        out, err = runner.communicate(timeout=60)
        assert runner.returncode == 1, out + err
        assert "unrunnable" in out + err, out + err
        status = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert "1/1" in status.stdout and "2/1" not in status.stdout, status.stdout + status.stderr
        ends = [e for e in records(run_dir) if isinstance(e, (E.Exit, E.Unrunnable)) and e.step == "w"]
        assert [type(e).__name__ for e in ends] == ["Exit", "Unrunnable"], ends
        assert ends[0].outcome == "lost"
    finally:
        if runner is not None and runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.communicate(timeout=30)
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        for line in tagged(f"sleep {SECONDS}"):  # (a failed test's leftovers)
            os.kill(int(line.split()[0]), signal.SIGKILL)
    assert_nothing_left(run_dir, tag=f"sleep {SECONDS}")
