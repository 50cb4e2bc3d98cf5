"""Every node of a fleet lost (each agent killed with SIGKILL: no goodbye, no job's signal)
while `fleet run` follows: the coordinator, with no agent left and none that can come
back, stops itself (fleet.control.jobend), and `fleet run` says that, not that somebody
stopped it, with advice that fits (a `fleet up` fleet must be brought up again). The
`fleet run` is held (SIGSTOP) until the fleet is gone, so that it finds the fleet down
whatever its steps' outcomes (as one does whose last progress was not read in time).
Before 2026-12-06 it said "it was stopped (fleet down, or a signal to its coordinator)",
and the `drained` record said "the batch job is ending"."""

from __future__ import annotations

import os
import signal

import pytest
from fleetharness import assert_nothing_left, events, finish, fleet, wait_for, write_suite
from fleetharness import records as event_records

from fleet.wire import events as E

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "2"]


@pytest.mark.parametrize("embedded", [False, True], ids=["fleet-up", "embedded"])
def test_a_fleet_that_lost_every_node_says_it_stopped_itself_and_what_to_do_not_that_it_was_stopped(
        tmp_path, started, embedded):
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "lost"\n'
                        + "".join(f'[[steps]]\nid = "s{i}"\ncommand = "sleep 120"\n' for i in range(4)))
    if not embedded:
        up = fleet("up", "--run-dir", str(run_dir), "--nodes", "2", *HB, cwd=tmp_path, timeout=60)
        assert up.returncode == 0, up.stdout + up.stderr
    runner = started("run", str(suite), "--run-dir", str(run_dir), *(["--nodes", "2", *HB] if embedded else []))
    try:
        wait_for(lambda: sum(e["kind"] == "started" for e in events(run_dir)) >= 2, 60, "two steps running")
        os.killpg(runner.pid, signal.SIGSTOP)
        connection = [p for p in run_dir.glob("fleet*.json")]
        assert len(connection) == 1, connection
        for e in events(run_dir):
            if e["kind"] == "node_joined":
                os.kill(e["pid"], signal.SIGKILL)
        wait_for(lambda: not connection[0].exists(), 60, "the coordinator to stop itself")
    finally:
        os.killpg(runner.pid, signal.SIGCONT)
    code, out, err = finish(runner, 120)
    assert code == 1, (out, err)
    last = err.strip().splitlines()[-1]
    assert "went down before the suite finished: every node was lost" in last, err
    assert "the fleet stopped itself" in last and "it was stopped (fleet down" not in last, err
    if embedded:
        assert "run the suite again to finish it (in the next allocation if this one has ended" in last, err
    else:
        assert f"bring a fleet up again (fleet up --run-dir {run_dir}" in last, err
    recs = event_records(run_dir)
    [drained] = [r for r in recs if isinstance(r, E.Drained)]
    assert drained.reason.startswith("every node was lost: every agent is gone"), drained
    [down] = [r for r in recs if isinstance(r, E.FleetDown)]
    assert down.reason and "the fleet stopped itself" in down.reason, down
    assert_nothing_left(run_dir)
