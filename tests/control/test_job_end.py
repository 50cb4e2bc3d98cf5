"""A batch job ended under the fleet with no warning (scancel, a time limit with no
--signal): the batch system sends SIGTERM to every process of the job, here by hand to
the agents, zygotes and steps of a real local fleet, but not to the coordinator (as
Slurm's proctrack/linuxproc misses the one `fleet up` detached). The steps are
interrupted (no attempt used, nothing final on disk), the queued one is dropped
unstarted, nothing is lost or unrunnable, `fleet run` exits 3, the coordinator stops
on its own (no agent can come back), nothing is left, and the next run finishes the
suite (fleet.node.jobend, fleet.control.jobend). The real Slurm's scancel:
tests/site/test_slurm_cancel.py."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from fleetharness import (assert_nothing_left, events, finish, fleet, interruptible_steps,
                          sigterm_like_the_batch_system, wait_for, write_suite)
from fleetharness import records as event_records

from fleet.wire import events as E
from fleet.wire import records

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "5"]


@pytest.fixture(autouse=True)
def _down_after(tmp_path):
    """A test that failed before its fleet stopped leaves nothing up: `fleet down` (the
    coordinator's connection file says it is still there)."""
    yield
    if (tmp_path / "run" / "fleet.json").exists():
        fleet("down", "--run-dir", str(tmp_path / "run"), cwd=tmp_path, timeout=60)
STEPS = ("shell", "call", "queued", "after")


def job_suite(tmp_path: Path) -> tuple[Path, Path]:
    """Two steps that run until the job ends (a shell that catches SIGTERM and exits 143,
    a Python call killed by it), one queued behind them, one after the first."""
    flag = tmp_path / "flag"
    return write_suite(tmp_path / "s.toml", '[suite]\nname = "jobend"\n' + interruptible_steps(flag)), flag


def running_fleet(tmp_path: Path, started, queued: bool = True, up_args=()):
    """`fleet up` (two one-core nodes; `up_args` too) and `fleet run` of job_suite, once two
    steps run (and the third is queued): (run directory, suite, flag, the `fleet run` process)."""
    run_dir = tmp_path / "run"
    suite, flag = job_suite(tmp_path)
    up = fleet("up", "--run-dir", str(run_dir), "--nodes", "2", *HB, *up_args, cwd=tmp_path, timeout=60)
    assert up.returncode == 0, up.stdout + up.stderr
    runner = started("run", str(suite), "--run-dir", str(run_dir))
    want = {("started", "shell"), ("started", "call")} | ({("queued", "queued")} if queued else set())
    wait_for(lambda: want <= {(e["kind"], e.get("step")) for e in events(run_dir)}, 60, "the steps running")
    return run_dir, suite, flag, runner


def signal_like_the_batch_system(run_dir: Path, steps_first_by: float) -> None:
    """SIGTERM to every step, then (`steps_first_by` s later) to every agent and zygote:
    the steps' ends reach their agents before the agents' own signal does."""
    sigterm_like_the_batch_system(run_dir, steps_first_by)


def test_a_job_ended_under_the_fleet_interrupts_its_steps_drains_exits_3_stops_the_coordinator_and_the_rerun_finishes(
        tmp_path, started):
    run_dir, suite, flag, runner = running_fleet(tmp_path, started)
    signal_like_the_batch_system(run_dir, steps_first_by=0.1)
    code, out, err = finish(runner, timeout=60)
    assert code == 3, out + err
    assert "the allocation ended before the suite did" in err, err
    # No agent can come back: the coordinator stops on its own, its connection file goes.
    wait_for(lambda: not (run_dir / "fleet.json").exists(), 30, "the coordinator to stop")
    recs = event_records(run_dir)
    [drained] = [e for e in recs if isinstance(e, E.Drained)]
    assert drained.reason.startswith("the batch job is ending (the agent on node"), drained
    exits = {e.step: e for e in recs if isinstance(e, E.Exit)}
    # The queued step started when `shell` was reaped (its zygote's signal came 0.1 s
    # later) and was stopped with the rest, or was dropped unstarted; `after` never ran.
    assert {"call", "shell"} <= set(exits) <= {"call", "shell", "queued"}, exits
    assert {e.outcome for e in exits.values()} == {"interrupted"}, exits
    assert exits["shell"].returncode == 143 and exits["call"].signal == signal.SIGTERM, exits
    # Relabelled by its agent, or by its zygote (signalled too: what it reaps from then on),
    # or (a loaded machine: the step's exit sent on after DOUBT_S, before its agent's own
    # signal was handled) by the coordinator, drained by then. The queued step began after
    # the steps' signal: the coordinator's drain, begun by the other node's agent, may stop
    # it before its own agent's signal is handled ("stopped by the drain": seen in CI).
    assert all("its agent got SIGTERM (the job ending: no attempt used)" in e.reason
               or "stopped with its node" in e.reason
               or e.reason.startswith("the batch job is ending")
               or (e.step == "queued" and "stopped by the drain" in e.reason) for e in exits.values()), \
        [(e.step, e.reason) for e in exits.values()]
    assert ("queued" in exits) == ("queued" in {e.step for e in recs if isinstance(e, E.Start)})
    assert not [e for e in recs if isinstance(e, (E.Retry, E.Blocked, E.Unrunnable))], recs
    assert [e.steps for e in recs if isinstance(e, E.NotStarted)] == [len(STEPS) - len(exits)]
    assert sum(isinstance(e, E.FleetDown) for e in recs) == 1
    for s in STEPS:
        assert records.attempts(run_dir, s) == [], s       # nothing counted as an attempt
        assert records.read_final(run_dir, s) is None, s   # nothing on disk stops a rerun
    assert_nothing_left(run_dir, tag=str(flag))
    # The next run finishes the suite, one attempt each (none was used up).
    flag.touch()
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "2", "--max-attempts", "1", *HB,
              cwd=tmp_path, timeout=90)
    assert r.returncode == 0 and "4 succeeded" in r.stdout, r.stdout + r.stderr
    for s in STEPS:
        assert [a["outcome"] for a in records.attempts(run_dir, s)] == ["succeeded"], s
    assert_nothing_left(run_dir, tag=str(flag))


def test_a_job_ended_long_before_its_planned_end_says_when_it_ended_not_the_planned_end(tmp_path, started):
    # A fleet that knows its end (30 min away) and is cancelled now (scancel): before
    # 2026-12-07 every step's reason said "drained: the allocation ends at <the planned
    # end>; the batch job is ending ...", as if it had drained for the walltime.
    run_dir, suite, flag, runner = running_fleet(tmp_path, started, up_args=("--walltime", "30m"))
    signal_like_the_batch_system(run_dir, steps_first_by=0.1)
    code, out, err = finish(runner, timeout=60)
    assert code == 3, out + err
    wait_for(lambda: not (run_dir / "fleet.json").exists(), 30, "the coordinator to stop")
    recs = event_records(run_dir)
    [drained] = [e for e in recs if isinstance(e, E.Drained)]
    assert drained.reason.startswith("the batch job is ending (the agent on node"), drained
    said = f"at {time.strftime('%H:%M:%S', time.localtime(drained.t))}, {drained.reason}"
    exits = [e for e in recs if isinstance(e, E.Exit)]
    assert {e.step for e in exits} >= {"call", "shell"} and {e.outcome for e in exits} == {"interrupted"}, exits
    for e in exits:
        assert e.reason.startswith(f"drained: {said}") or (e.step == "queued" and "stopped by the drain" in e.reason), \
            e.reason
    [ns] = [e for e in recs if isinstance(e, E.NotStarted)]
    assert ns.reason == f"not started: {said}", ns
    assert "allocation ends at" not in out + err + "".join(e.reason for e in exits), out + err
    assert f"not_started after: not started: {said}" in out, out
    assert_nothing_left(run_dir, tag=str(flag))


def test_a_job_end_that_signals_the_coordinator_too_interrupts_every_step_and_counts_no_attempt(tmp_path, started):
    # As under proctrack/cgroup, which tracks the coordinator `fleet up` detached.
    run_dir, suite, flag, runner = running_fleet(tmp_path, started, queued=False)
    [coordinator] = [e["pid"] for e in events(run_dir) if e["kind"] == "fleet_starting"]
    signal_like_the_batch_system(run_dir, steps_first_by=0.1)
    os.kill(coordinator, signal.SIGTERM)
    code, out, err = finish(runner, timeout=60)
    assert code in (1, 3), out + err  # the fleet went down (or drained first): no verdict on the suite
    wait_for(lambda: not (run_dir / "fleet.json").exists(), 30, "the coordinator to stop")
    recs = event_records(run_dir)
    exits = {e.step: e for e in recs if isinstance(e, E.Exit)}
    assert {"call", "shell"} <= set(exits) and {e.outcome for e in exits.values()} == {"interrupted"}, exits
    assert not [e for e in recs if isinstance(e, (E.Retry, E.Blocked, E.Unrunnable))], recs
    for s in STEPS:
        assert records.attempts(run_dir, s) == [] and records.read_final(run_dir, s) is None, s
    assert_nothing_left(run_dir, tag=str(flag))


def test_an_idle_fleet_whose_agents_are_signalled_drains_and_its_coordinator_stops_on_its_own(tmp_path):
    run_dir = tmp_path / "run"
    up = fleet("up", "--run-dir", str(run_dir), "--nodes", "2", *HB, cwd=tmp_path, timeout=60)
    assert up.returncode == 0, up.stdout + up.stderr
    for e in events(run_dir):
        if e["kind"] == "node_joined":
            os.kill(e["pid"], signal.SIGTERM)  # the agents alone: their goodbyes say why
    wait_for(lambda: not (run_dir / "fleet.json").exists(), 30, "the coordinator to stop")
    recs = event_records(run_dir)
    [drained] = [e for e in recs if isinstance(e, E.Drained)]
    assert drained.reason.startswith("the batch job is ending (the agent on node") and \
        drained.reason.endswith("was stopped by SIGTERM)"), drained
    assert sorted(e.node for e in recs if isinstance(e, E.NodeLost)) == ["node1", "node2"]
    assert sum(isinstance(e, E.FleetDown) for e in recs) == 1
    assert_nothing_left(run_dir)


def test_fleet_down_with_a_step_queued_on_a_node_leaves_it_to_the_next_run_not_cancelled(tmp_path, started):
    # Its zygote drops it as it stops and says so (Dropped, stopped): that is no verdict on the step.
    run_dir, suite, flag, runner = running_fleet(tmp_path, started)
    down = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert down.returncode == 0, down.stdout + down.stderr
    finish(runner, timeout=60)
    recs = event_records(run_dir)
    exits = {e.step: e for e in recs if isinstance(e, E.Exit)}
    assert "queued" not in exits, recs
    # The running ones' exits came from their agents (none held back as the agents stopped).
    assert {s: e.outcome for s, e in exits.items()} == {"shell": "interrupted", "call": "interrupted"}, exits
    assert not [e for e in exits.values() if "did not report its end" in e.reason], exits
    assert not [e for e in recs if isinstance(e, (E.Retry, E.Blocked, E.Unrunnable))], recs
    assert records.read_final(run_dir, "queued") is None and records.attempts(run_dir, "queued") == []
    assert_nothing_left(run_dir, tag=str(flag))
    flag.touch()
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "2", *HB, cwd=tmp_path, timeout=90)
    assert r.returncode == 0 and "4 succeeded" in r.stdout, r.stdout + r.stderr
