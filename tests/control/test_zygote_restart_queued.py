"""A zygote restarted (fleet.node.rezygote, fleet.control.rezygote) while launches wait
queued on its node: each of them, exactly once, runs on the new zygote, or ends, or is
taken back (ready again). Before 2026-12-06 two cases left a step that the coordinator
held as queued (then running) with no process anywhere, and the run hung until
`fleet down`: a `fleet cancel` of the middle of a node's chain before the zygote died
(the agent's record of what to hand a new zygote did not follow the zygote's drop, and
judged the rest of the chain started), and a zygote stopped by SIGTERM (`kill $PPID`
from a step: its queued launches dropped as its node's, but the node stayed).
Real fleets; the zygote found through the events and killed by this test."""

from __future__ import annotations

import collections
import os
import signal
import sys
from pathlib import Path

import pytest
from fleetharness import assert_nothing_left, events, finish, fleet, spawn, wait_for, write_suite
from test_zygote_restart import _down_after, of  # noqa: F401  (its fixture: a failed test leaves nothing up)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fleet's nodes need Linux")
STEPS = 10


def ends(run_dir: Path) -> dict[str, list[tuple[str, str]]]:
    """Each step's ends, in order: (outcome, reason); `cancelled`: one that never started."""
    out = collections.defaultdict(list)
    for e in events(run_dir):
        if e["kind"] in ("exit", "cancelled"):
            out[e["step"]].append((e.get("outcome", e["kind"]), e.get("reason") or ""))
    return out


def assert_each_started_once(run_dir: Path) -> None:
    started = collections.Counter((e["step"], e["attempt"]) for e in of("started", run_dir))
    assert all(n == 1 for n in started.values()), started


def run_until_done(p, timeout: float = 150):
    try:
        return finish(p, timeout)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(30)


def test_a_zygote_killed_after_a_cancel_in_the_middle_of_a_chain_hands_the_rest_of_the_chain_to_the_new_one(tmp_path):
    body = "".join(f'\n[[steps]]\nid = "s{i}"\ncommand = "sleep 5"\ncores = 1\nretries = 2\n' for i in range(STEPS))
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "s"\nrun_dir = "run"\n' + body)
    run_dir = tmp_path / "run"
    p = spawn("run", str(suite), "--nodes", "2", "--window-depth", "3", cwd=tmp_path)
    try:
        zygote = wait_for(lambda: [e for e in of("node_joined", run_dir) if e["node"] == "node1"], 60,
                          "node1 to join")[0]["zygote_pid"]
        chain = wait_for(lambda: (lambda q: q if len(q) >= 3 else None)(
            [e for e in of("queued", run_dir) if e["node"] == "node1"]), 60, "a chain of 3 queued on node1")
        middle = chain[1]["step"]
        wait_for(lambda: of("started", run_dir), 60, "a step to start")
        r = fleet("cancel", "--run-dir", str(run_dir), middle, cwd=tmp_path, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        wait_for(lambda: [e for e in of("cancelled", run_dir) if e["step"] == middle], 60, f"{middle} to be cancelled")
        assert not [e for e in of("exit", run_dir) if e["node"] == "node1" and e["outcome"] == "succeeded"], \
            "the chain's head ended before the zygote was killed: the test proves nothing"
        os.kill(zygote, signal.SIGKILL)
    except BaseException:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(30)
        raise
    rc, out, err = run_until_done(p)  # before: never ended
    restarted = of("zygote_restarted", run_dir)
    assert [e["node"] for e in restarted] == ["node1"], restarted
    exits = ends(run_dir)
    assert sorted(exits) == sorted(f"s{i}" for i in range(STEPS)), exits
    killed = set(restarted[0]["steps"])
    for step, seen in exits.items():  # each ends once (after any lost end of an attempt)
        outcomes = [o for o, _ in seen]
        assert all(o == "lost" for o in outcomes[:-1]), (step, seen)
        if step == middle:
            assert outcomes == ["cancelled"], seen
        elif step in killed:
            assert outcomes[-1] in ("failed", "succeeded"), (step, seen)
        else:
            assert outcomes == ["succeeded"], (step, seen)
    assert_each_started_once(run_dir)
    assert rc != 0 or not killed, out + err  # (a step alone in the dead zygote fails, not retried)
    assert_nothing_left(run_dir)


def test_a_zygote_a_step_stops_with_sigterm_hands_its_queued_launches_to_the_new_one(tmp_path):
    body = ('\n[[steps]]\nid = "killer"\ncommand = "sleep 1; kill $PPID; sleep 2"\ncores = 1\n'
            + "".join(f'\n[[steps]]\nid = "s{i}"\ncommand = "sleep 1.5"\ncores = 1\nretries = 1\n'
                      for i in range(STEPS)))
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "s"\nrun_dir = "run"\n' + body)
    run_dir = tmp_path / "run"
    p = spawn("run", str(suite), "--nodes", "2", cwd=tmp_path)
    rc, out, err = run_until_done(p)  # before: never ended
    restarted = of("zygote_restarted", run_dir)
    assert len(restarted) == 1 and restarted[0]["reason"] == "exited with status 0", restarted
    behind = [e["step"] for e in of("queued", run_dir) if e["after"] == "killer"]
    assert behind, "nothing was queued behind the killer: the test proves nothing"
    exits = ends(run_dir)
    assert sorted(exits) == sorted(["killer", *(f"s{i}" for i in range(STEPS))]), exits
    assert len(exits["killer"]) == 1 and exits["killer"][0][0] != "succeeded", exits["killer"]
    for i in range(STEPS):
        assert [o for o, _ in exits[f"s{i}"]] == ["succeeded"], exits[f"s{i}"]
    assert_each_started_once(run_dir)
    assert not of("node_lost", run_dir)
    assert rc != 0, out + err  # (the killer failed)
    assert_nothing_left(run_dir)
