"""A coordinator frozen (SIGSTOP) past its agents' fence, with real processes: its agents
stop their steps and leave on their own (3/4 of the heartbeat timeout without word), so
the fleet has lost its nodes. Nothing they stopped is the steps' failure: the coordinator
drains the moment it runs again, before it reads their exits and goodbyes, so the steps
they stopped are interrupted (no attempt, no final.json), the others `not_started` (none
`unrunnable` for want of nodes), and `fleet run` exits 5, saying the fleet lost its nodes
and is to be brought up again, as jobscripts/slurm-resubmit.sbatch does on exit 5; the
fleet brought up again finishes the suite. Before 2026-12-07 the stopped steps were
`terminated` ("killed by SIGKILL", an attempt used, final.json written), the rest
`unrunnable` ("the allocation has no nodes") and `fleet run` exited 1."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from fleetharness import assert_nothing_left, env, finish, fleet, records, wait_for, write_suite

from fleet.wire import events as E

HOLDS = ["hold/1", "hold/2"]
SHORTS = [f"short/{i}" for i in range(1, 7)]
HB = ["--heartbeat", "0.25", "--heartbeat-timeout", "2"]  # agents fence after 1.5 s without word


def _gone_or_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # (a stopped parent cannot reap it)
    except FileNotFoundError:
        return True


def _up(tmp_path: Path, run_dir: Path, hold: str) -> None:
    fleet("up", "--local", "--run-dir", str(run_dir), "--nodes", "2", *HB, cwd=tmp_path, check=True, timeout=60,
          environ={"FROZEN_HOLD": hold})


def test_a_coordinator_frozen_past_its_agents_fence_drains_interrupts_what_they_stopped_and_run_exits_5(
        tmp_path, started):
    run_dir = tmp_path / "run"
    # Each hold step traps SIGTERM and takes 3 s over it (its grace 6): its agent SIGKILLs it 2 s in.
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "frozen"
[[steps]]
id = "hold/{i}"
array = "1-2"
command = "trap 'sleep 3' TERM; sleep $FROZEN_HOLD & wait"
grace = 6
[[steps]]
id = "short/{i}"
array = "1-6"
command = "sleep 0.2"
""")
    _up(tmp_path, run_dir, "60")
    coordinator = None
    try:
        runner = started("run", str(suite), "--run-dir", str(run_dir))
        wait_for(lambda: {e.step for e in records(run_dir) if isinstance(e, E.Started)} >= set(HOLDS), 60,
                 "both hold steps to start")
        recs = records(run_dir)
        coordinator = next(e.pid for e in recs if isinstance(e, E.FleetStarting))
        agents = [e.pid for e in recs if isinstance(e, E.NodeJoined)]
        os.kill(coordinator, signal.SIGSTOP)
        wait_for(lambda: all(map(_gone_or_zombie, agents)), 60, "the agents to stop on their own")
        os.kill(coordinator, signal.SIGCONT)
        code, out, err = finish(runner, 90)
    finally:
        if coordinator is not None:
            os.kill(coordinator, signal.SIGCONT)
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert code == 5, (code, out, err)
    last = err.strip().splitlines()[-1]
    assert "the fleet lost its nodes: its coordinator did not run for" in last, err
    assert f"bring a fleet up again (fleet up --run-dir {run_dir}" in last, err
    recs = records(run_dir)
    [drained] = [r for r in recs if isinstance(r, E.Drained)]
    assert drained.reason.startswith("the fleet lost its nodes"), drained
    exits = [e for e in recs if isinstance(e, E.Exit)]
    held = {e.step: e for e in exits if e.step in HOLDS}
    assert sorted(held) == HOLDS and {e.outcome for e in held.values()} == {"interrupted"}, exits
    assert all("its coordinator did not run for" in e.reason for e in held.values()), held
    assert not [e for e in exits if e.outcome not in ("succeeded", "interrupted")], exits
    assert not [r for r in recs if type(r).__name__ in ("Unrunnable", "Blocked")], recs
    unstarted = [s for s in SHORTS if s not in {e.step for e in exits}]
    assert unstarted, "every short step ran before the freeze: the test would prove less"
    for step in HOLDS + unstarted:  # nothing final, no attempt counted
        assert not list((run_dir / "steps" / step / ".fleet").glob("final.json*")), step
    assert_nothing_left(run_dir)

    # A fleet brought up again finishes everything, the hold steps on their first attempt.
    _up(tmp_path, run_dir, "0.1")
    try:
        again = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert again.returncode == 0, again.stdout + again.stderr
    starts = [(e.step, e.attempt) for e in records(run_dir) if isinstance(e, E.Start) and e.step in HOLDS]
    assert sorted(starts) == sorted((s, 1) for s in HOLDS * 2), starts
    assert_nothing_left(run_dir)


# Loaded into the fleet's processes (sitecustomize): once the file FLEET_TEST_SLOW_BEAT
# names exists, the coordinator's next beat is taken in the middle of a loop turn of 2 s
# (1 s before it, 1 s after): longer than the agents' fence, but they heard the beat.
SLOW_BEAT = """
import os, time
if os.environ.get("FLEET_TEST_SLOW_BEAT"):
    from fleet.control import coordinator as _c
    _orig = _c.Coordinator._beat
    def _beat(self):
        flag = os.environ["FLEET_TEST_SLOW_BEAT"]
        if not os.path.exists(flag):
            return _orig(self)
        os.unlink(flag)
        time.sleep(1.0)
        _orig(self)
        time.sleep(1.0)
    _c.Coordinator._beat = _beat
"""


def test_a_long_loop_turn_that_beat_in_its_middle_drains_nothing(tmp_path, started):
    # The review of 2026-12-07: a turn longer than the fence, its heartbeat sent in its
    # middle, drained a fleet whose agents had heard it and lived ("did not run for 2.0 s").
    run_dir, inject, flag = tmp_path / "run", tmp_path / "inject", tmp_path / "slow-now"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(SLOW_BEAT)
    more = {"PYTHONPATH": os.pathsep.join([str(inject), env()["PYTHONPATH"]]), "FLEET_TEST_SLOW_BEAT": str(flag),
            "FROZEN_HOLD": "4"}
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "slow-beat"
[[steps]]
id = "hold/{i}"
array = "1-2"
command = "sleep $FROZEN_HOLD"
""")
    fleet("up", "--local", "--run-dir", str(run_dir), "--nodes", "2", *HB, cwd=tmp_path, check=True, timeout=60,
          environ=more)
    try:
        runner = started("run", str(suite), "--run-dir", str(run_dir))
        wait_for(lambda: {e.step for e in records(run_dir) if isinstance(e, E.Started)} >= set(HOLDS), 60,
                 "both hold steps to start")
        flag.touch()
        wait_for(lambda: not flag.exists(), 30, "the slow beat to be taken")
        code, out, err = finish(runner, 90)
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    recs = records(run_dir)
    assert code == 0, (code, out, err, [r for r in recs if isinstance(r, E.Drained)])
    assert not [r for r in recs if isinstance(r, (E.Drained, E.NodeLost))], recs
    assert sorted(e.step for e in recs if isinstance(e, E.Exit) and e.outcome == "succeeded") == HOLDS
    assert_nothing_left(run_dir)
