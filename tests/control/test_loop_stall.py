"""The coordinator's own stalls are measured and never turned into a lost node (issue
12, item 2): a loop that did not run, here a coordinator frozen with SIGSTOP while its
steps run, does not count that time as its agents' silence, and `fleet status` shows it
(`loop.stalled_s`). Its agents cannot tell a frozen coordinator from a lost one: after
3/4 of the timeout without a word from it they stop their steps and leave, so that
nothing runs twice (docs/operations.md). So a freeze within that fence loses nothing;
after a longer one an agent is gone by its own hand, and one that really died is lost
for missed heartbeats only a timeout of listening after the coordinator woke."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

from fleetharness import assert_nothing_left, finish, fleet, records, wait_for, write_suite

from fleet.control.client import Client, find
from fleet.wire import events as E
from fleet.wire import messages as P

STEPS = [f"s/{i}" for i in range(1, 5)]


def _frozen(tmp_path: Path, started, heartbeat: float, timeout: float, freeze: float, kill: str = ""):
    """Run 4 steps of 3 s on a 2-node fleet and freeze its coordinator for `freeze` s while
    the first two run (the agent of node `kill` killed first); what came of it."""
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "stall"
[[steps]]
id = "s/{i}"
array = "1-4"
call = "fleet_steps:nap"
args = { seconds = 3 }
""")
    fleet("up", "--local", "--run-dir", str(run_dir), "--nodes", "2", "--heartbeat", str(heartbeat),
          "--heartbeat-timeout", str(timeout), cwd=tmp_path, check=True, timeout=60)
    coordinator = None
    try:
        runner = started("run", str(suite), "--run-dir", str(run_dir))
        wait_for(lambda: sum(isinstance(e, E.Started) for e in records(run_dir)) >= 2, 30, "two steps to start")
        coordinator = next(e.pid for e in records(run_dir) if isinstance(e, E.FleetStarting))
        if kill:
            os.kill(next(e.pid for e in records(run_dir) if isinstance(e, E.NodeJoined) and e.node == kill),
                    signal.SIGKILL)
            client = Client(find(run_dir))
            client.ask(P.Status(), timeout=10)  # an answer: whatever the agent said last has been read
            client.close()
        os.kill(coordinator, signal.SIGSTOP)
        time.sleep(freeze)  # (the thing under test)
        waking = time.time()  # (the coordinator woke in between: the test may be held up after either)
        os.kill(coordinator, signal.SIGCONT)
        woke = time.time()
        code, out, err = finish(runner, 60)
        status = fleet("status", "--run-dir", str(run_dir), "--json", cwd=tmp_path, check=True, timeout=30)
    finally:
        if coordinator is not None:
            os.kill(coordinator, signal.SIGCONT)
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)
    return SimpleNamespace(code=code, out=out + err, recs=records(run_dir), waking=waking, woke=woke,
                           loop=json.loads(status.stdout)["loop"],
                           logs={p.stem: p.read_text() for p in (run_dir / "agents").glob("*.log")})


def test_a_coordinator_frozen_for_most_of_its_agents_fence_loses_no_node_and_no_step_and_reports_the_stall(
        tmp_path, started):
    # Agents stop at 4.5 s (3/4 of 6) without a word: 1.5 s to spare, for a loaded machine's
    # late wake-ups (the test's sleep, the coordinator's first beat after SIGCONT).
    heartbeat, freeze = 0.25, 3.0
    run = _frozen(tmp_path, started, heartbeat, 6.0, freeze)
    assert run.code == 0, run.out
    assert [e for e in run.recs if isinstance(e, E.NodeLost)] == []
    assert sorted((e.step, e.attempt) for e in run.recs if isinstance(e, E.Start)) == [(s, 1) for s in STEPS]
    assert sorted((e.step, e.attempt, e.outcome) for e in run.recs if isinstance(e, E.Exit)) == \
        [(s, 1, "succeeded") for s in STEPS]
    # The poll waited at most a heartbeat; the rest of the freeze is a stall.
    assert run.loop["stalled_s"] >= freeze - heartbeat - 0.1, run.loop


def test_a_coordinator_frozen_longer_than_the_heartbeat_timeout_counts_none_of_it_as_a_nodes_silence(
        tmp_path, started):
    heartbeat, timeout, freeze = 0.25, 2.0, 4.5
    run = _frozen(tmp_path, started, heartbeat, timeout, freeze, kill="node1")
    lost = {e.node: e for e in run.recs if isinstance(e, E.NodeLost)}
    # Frozen past its agents' fence, the coordinator drains as it wakes: its nodes are gone
    # (fleet.control.jobend.frozen; exit 5: bring a fleet up again). Before 2026-12-07 exit 1.
    assert sorted(lost) == ["node1", "node2"] and run.code == 5, (lost, run.out)
    [drained] = [e for e in run.recs if isinstance(e, E.Drained)]
    assert drained.reason.startswith("the fleet lost its nodes: its coordinator did not run for"), drained
    # node1's agent died: silent for the freeze and then some, it is lost for missed
    # heartbeats only once the woken coordinator has listened for (about) a timeout, not at
    # once; the drain's kill of its step may find it gone first ("could not reach the agent").
    n1 = lost["node1"]
    assert n1.reason in ("missed heartbeats", "could not reach the agent"), lost
    # (From before the SIGCONT for the least, from after it for the most: a test held up
    # on either side of it cannot fail this.)
    assert n1.reason != "missed heartbeats" or (1.0 < n1.t - run.waking and n1.t - run.woke < timeout + 2.0), \
        (n1.t - run.waking, n1.t - run.woke, run.loop)
    # node2's agent heard nothing for 3/4 of the timeout: it stopped its step and left,
    # and the coordinator took that for what it was: its step interrupted, no attempt used
    # (before 2026-12-07 `terminated`, an attempt). Its goodbye says it left, unless the
    # drain's kill of its step, sent as the coordinator woke, found it gone first.
    assert "stopping: no word from the coordinator" in run.logs["node2"], run.logs
    assert lost["node2"].reason in ("the agent stopped on its own", "could not reach the agent"), lost
    exits = [e for e in run.recs if isinstance(e, E.Exit)]
    assert [(e.node, e.outcome) for e in exits if e.node == "node2"] == [("node2", "interrupted")], exits
    assert {e.outcome for e in exits} == {"interrupted"}, exits  # (node1's too: drained, not lost)
    starts = [(e.step, e.attempt) for e in run.recs if isinstance(e, E.Start)]
    assert {a for _, a in starts} == {1} and len({s for s, _ in starts}) == len(starts), starts  # none twice
    assert run.loop["stalled_s"] >= freeze - heartbeat - 0.1, run.loop
