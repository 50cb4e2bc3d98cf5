"""Two fleets of one suite on one run directory, and one of them loses its only node (its
agent killed with SIGKILL) while it holds steps it claimed ahead and never started. Its
verdict on them (`unrunnable: after losing node1: the allocation has no nodes`) is about
its own allocation, not the steps: the healthy fleet runs them, as it runs a drained
fleet's, and every step ends succeeded there. Before 2026-12-07 the healthy fleet failed
them (`failed t/10: unrunnable in fleet ...`, naming a log that did not exist) and
exited 1, and the fleet that lost its node wrote `unrunnable` final records next to the
markers of the steps the healthy one had run meanwhile. Real `fleet run` processes,
each bounded by a timeout and killed by process group if left (conftest's `started`)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from fleetharness import assert_nothing_left, events, finish, fleet, two_fleets_gated, wait_for, write_suite
from test_shared_failures import outcomes

from fleet.control import claimlog

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "2"]
STEPS = [f"t/{i}" for i in range(30)]


def held_unstarted(run_dir: Path, fleet_id: str) -> set[str]:
    """The steps `fleet_id` holds in the claims log and has not started."""
    held = {s for s, rec in claimlog.holders(run_dir).items() if rec.get("fleet") == fleet_id}
    return held - {e["step"] for e in events(run_dir) if e["kind"] == "started" and e.get("fleet") == fleet_id}


def fleets(run_dir: Path) -> list[str]:
    """The fleets that came up on the run directory, in order."""
    return [e["fleet"] for e in events(run_dir) if e["kind"] == "fleet_starting"]


def joined(run_dir: Path) -> dict[str, int]:
    """fleet -> the pid of its agent (one node each)."""
    return {e["fleet"]: e["pid"] for e in events(run_dir) if e["kind"] == "node_joined"}


def test_a_fleet_that_loses_its_only_node_leaves_the_steps_it_did_not_run_to_the_fleet_beside_it(tmp_path, started):
    # Each step may be retried once: a step running on the lost node is lost there, and its
    # retry is found unrunnable there too (a lost attempt with no retry left is the step's
    # failure, in one fleet as in two). `gather`, waiting in both, is blocked by them there.
    # The steps wait for the file `go` until B has started one: however late B comes up, A
    # has not run them all by then (it did, under load, and B had nothing of its own).
    gate = tmp_path / "go"
    s = write_suite(tmp_path / "s.toml", '[suite]\nname = "lostnode"\nrun_dir = "run"\n\n'
                    '[[steps]]\nid = "t/{i}"\narray = "0-29"\n'
                    f'command = "until test -e {gate}; do sleep 0.05; done; sleep 1"\nretries = 1\n\n'
                    f'[[steps]]\nid = "gather"\ncommand = "true"\ndeps = {json.dumps(STEPS)}\n')
    run_dir = tmp_path / "run"
    a, b = two_fleets_gated(run_dir, gate, lambda: started("run", str(s), "--nodes", "1", *HB),
                            lambda: started("run", str(s), "--nodes", "1", *HB))
    fa, fb = fleets(run_dir)
    wait_for(lambda: held_unstarted(run_dir, fa), 60, "fleet A to hold a step it has not started")
    os.kill(joined(run_dir)[fa], signal.SIGKILL)
    ra, rb = finish(a, 120), finish(b, 180)
    # A says what it found of its own allocation; it ends 3 if its orphaned fleet drained
    # before B ran the steps it waited for there (they are not_started in A then), else 1.
    assert ra[0] in (1, 3) and "unrunnable" in ra[1] and "after losing node1" in ra[1], ra
    said = outcomes(rb[1])
    assert rb[0] == 0 and set(said) == {*STEPS, "gather"}, rb
    assert set(said.values()) <= {"succeeded", "skipped"}, rb[1]
    assert "in fleet" not in rb[1] and "log in the run directory" not in rb[1], rb[1]
    # B ran what A claimed ahead and never started (before, it failed it: A's verdict).
    ran_by_b = {e["step"] for e in events(run_dir) if e["kind"] == "started" and e.get("fleet") == fb}
    never_in_a = set(STEPS) - {e["step"] for e in events(run_dir) if e["kind"] == "started" and e.get("fleet") == fa}
    assert never_in_a <= ran_by_b, (never_in_a, ran_by_b)
    for step in [*STEPS, "gather"]:  # each step's records: B's success, and no final record of A's beside it
        d = run_dir / "steps" / step / ".fleet"
        assert json.loads((d / "done.json").read_text())["outcome"] == "succeeded", step
        assert not (d / "final.json").exists(), (step, (d / "final.json").read_text())
    audit = fleet("audit", str(run_dir), "--json", cwd=tmp_path, timeout=60)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    got = json.loads(audit.stdout)
    assert got["counts"] == {"succeeded": 31} and not got["duplicates"] and not got["missing"], got["counts"]
    assert_nothing_left(run_dir)


SHARDS = """
[suite]
name = "lostshard"
run_dir = "run"
[[steps]]
id = "0"
command = "until test -e ../../go; do sleep 0.1; done"
retries = 1
[[steps]]
id = "2"
command = "true"
deps = ["0"]
[[steps]]
id = "4"
command = "true"
deps = ["2"]
[[steps]]
id = "1"
command = "true"
deps = ["4"]
"""


def test_a_shard_waits_for_a_step_another_shard_left_after_losing_its_node_and_takes_its_next_run(tmp_path, started):
    # Shard 0 runs 0 and loses its node: 0's retry and 2 are unrunnable there, and 4 is
    # blocked by 2. That is shard 0's allocation, not the steps: shard 1, whose 1 needs 4,
    # waits for shard 0's next run, as for a drained shard (before 2026-12-07 it took
    # `blocked in fleet ...` and blocked 1 at once: shard 0's rerun came too late for it).
    s = write_suite(tmp_path / "s.toml", SHARDS)
    run_dir = tmp_path / "run"
    zero = started("run", str(s), "--shard", "0/2", "--nodes", "1", *HB)
    wait_for(lambda: any(e["kind"] == "started" and e.get("step") == "0" for e in events(run_dir)), 60,
             "shard 0 to start 0")
    one = started("run", str(s), "--shard", "1/2", "--nodes", "1", *HB)
    wait_for(lambda: len(joined(run_dir)) == 2, 60, "shard 1's fleet to come up")
    os.kill(joined(run_dir)[fleets(run_dir)[0]], signal.SIGKILL)
    r0 = finish(zero, 120)
    assert r0[0] == 1 and outcomes(r0[1]) == {"0": "unrunnable", "2": "unrunnable", "4": "blocked"}, r0
    assert one.poll() is None, finish(one, 30)  # it waits for 4
    (run_dir / "go").touch()
    again = fleet("run", str(s), "--shard", "0/2", "--nodes", "1", *HB, cwd=tmp_path, timeout=120)
    assert again.returncode == 0 and set(outcomes(again.stdout).values()) == {"succeeded"}, again
    assert set(outcomes(again.stdout)) == {"0", "2", "4"}, again.stdout
    r1 = finish(one, 120)
    assert r1[0] == 0 and outcomes(r1[1]) == {"4": "succeeded", "1": "succeeded"}, r1
    for step in "0124":
        d = run_dir / "steps" / step / ".fleet"
        assert (d / "done.json").exists() and not (d / "final.json").exists(), step
    audit = fleet("audit", str(run_dir), "--json", cwd=tmp_path, timeout=60)
    assert audit.returncode == 0 and json.loads(audit.stdout)["counts"] == {"succeeded": 4}, audit.stdout
    assert_nothing_left(run_dir)
