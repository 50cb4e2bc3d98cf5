"""`fleet status` of a drained fleet that stays up (`fleet up --walltime`, then `fleet
run` drained: exit 3): the steps the drain left are counted not started, with the
drain's reason, and a suite whose steps did not all run is not "100% finished"."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

from fleetharness import assert_nothing_left, events, finish, fleet, spawn, wait_for, write_suite

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "5"]


def status(run_dir: Path, tmp_path: Path, *json_flag: str):
    r = fleet("status", "--run-dir", str(run_dir), *json_flag, cwd=tmp_path, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout) if json_flag else r.stdout


def test_a_drained_fleets_status_counts_the_steps_it_left_not_started_with_the_drains_reason(tmp_path, background):
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "40m", *HB, cwd=tmp_path, check=True,
          timeout=60)
    try:
        cores = status(run_dir, tmp_path, "--json")["nodes"][0]["cores"]
        # Each step takes the whole node: one runs, two are ready behind it, `after` waits.
        steps = "".join(f'[[steps]]\nid = "s{i}"\ncommand = "sleep 120"\ncores = {cores}\n' for i in range(3))
        suite = write_suite(tmp_path / "s.toml", f'[suite]\nname = "d"\n{steps}'
                            '[[steps]]\nid = "after"\ncommand = "true"\ndeps = ["s0", "s1", "s2"]\n')
        runner = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
        background.append(runner)
        wait_for(lambda: any(e["kind"] == "started" for e in events(run_dir)), 60, "a step running")
        os.kill(runner.pid, signal.SIGUSR1)  # the batch system's warning: the fleet drains, and stays up
        code, out, err = finish(runner)
        assert code == 3, out + err
        st = status(run_dir, tmp_path, "--json")
        assert st["allocation"]["drained"], st["allocation"]
        # (before: {"interrupted": 1, "ready": 2, "waiting": 1}, the ready ones short of memory on an idle node)
        assert st["counts"] == {"interrupted": 1, "not_started": 3}, st["counts"]
        [head] = st["ready"]
        assert head["cause"] == "deadline" and head["behind"] == 1, head
        assert head["reason"].startswith("not started: drained (") and "SIGUSR1" in head["reason"], head
        [sub] = st["submissions"]
        assert (sub["steps"], sub["finished"], sub["not_started"]) == (4, 1, 3), sub
        text = status(run_dir, tmp_path)
        assert "steps:  interrupted 1  not_started 3\n" in text, text
        assert f"  suite {suite}: 1/4 finished (25%), 3 not started: drained\n" in text, text
        assert "left unstarted by the drain, the first of each kind of step:\n" in text, text
        assert re.search(r"\n  s1 +ready \d+s  not started: drained \(the batch system.s warning signal \(SIGUSR1\)\); "
                         r"the next run runs it  \(\+1 more like it\)\n", text), text
        # The report of the drained fleet, up still, counts them the same (before: "3 waiting").
        rep = json.loads(fleet("report", str(run_dir), "--json", cwd=tmp_path, timeout=60).stdout)
        assert {k: v for k, v in rep["counts"].items() if v} == {"interrupted": 1, "not run": 3}, rep["counts"]
        assert all(rep["steps"][s]["reason"].startswith("not started") for s in ("s1", "s2", "after")), rep["steps"]
    finally:
        assert fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60).returncode == 0
    assert_nothing_left(run_dir)
