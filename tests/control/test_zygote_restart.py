"""A node's zygote killed from outside (the kernel's OOM killer, a stray `kill -9`):
its agent starts a new one and the node keeps serving (fleet.node.rezygote,
fleet.control.rezygote). Before 2026-12-06 the agent stopped and its node left the
fleet for the rest of the allocation. Real fleets, the zygote found through the
events (node_joined, zygote_restarted) and killed by this test."""

from __future__ import annotations

import collections
import os
import signal
import sys
from pathlib import Path

import pytest
from fleetharness import assert_nothing_left, events, finish, fleet, spawn, wait_for, write_suite

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fleet's nodes need Linux")
STEPS = 10


@pytest.fixture(autouse=True)
def _down_after(tmp_path):
    """A test that failed before its fleet stopped leaves nothing up."""
    yield
    if (tmp_path / "run" / "fleet.json").exists():
        fleet("down", "--run-dir", str(tmp_path / "run"), cwd=tmp_path, timeout=60)


def of(kind: str, run_dir: Path) -> list[dict]:
    return [e for e in events(run_dir) if e["kind"] == kind]


def agent_log(run_dir: Path) -> str:
    d = run_dir / "agents"
    return "".join(p.read_text(errors="replace") for p in d.iterdir() if p.is_file()) if d.exists() else ""


def kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_a_zygote_killed_while_steps_run_and_wait_is_replaced_and_every_step_ends_once_on_the_same_node(tmp_path):
    body = "".join(f'\n[[steps]]\nid = "s{i}"\ncommand = "sleep 1"\ncores = 1\nretries = 1\n' for i in range(STEPS))
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "s"\nrun_dir = "run"\n' + body)
    run_dir = tmp_path / "run"
    p = spawn("run", str(suite), "--nodes", "1", cwd=tmp_path)
    try:
        joined = wait_for(lambda: of("node_joined", run_dir), 60, "the node to join")[0]
        wait_for(lambda: of("started", run_dir) and of("queued", run_dir), 60, "steps running and queued")
        kill(joined["zygote_pid"])
        rc, out, err = finish(p, 120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(30)
    assert rc == 0, out + err
    restarted = of("zygote_restarted", run_dir)
    assert [(e["node"], e["reason"], e["restarts"]) for e in restarted] == [("node1", "was killed by SIGKILL", 1)]
    assert restarted[0]["steps"], restarted  # it killed steps that ran
    assert not of("node_lost", run_dir)
    exits = collections.defaultdict(list)
    for e in of("exit", run_dir):
        exits[e["step"]].append((e["outcome"], e.get("reason") or ""))
    assert sorted(exits) == sorted(f"s{i}" for i in range(STEPS))
    for step, ends in exits.items():  # each ends once, or lost (naming the zygote's death) then once
        assert [o for o, _ in ends] in (["succeeded"], ["lost", "succeeded"]), (step, ends)
        if len(ends) == 2:
            assert "fork server (zygote) was killed by SIGKILL" in ends[0][1] and step in restarted[0]["steps"], ends
    assert {s for s, ends in exits.items() if len(ends) == 2} == set(restarted[0]["steps"])
    started = collections.Counter((e["step"], e["attempt"]) for e in of("started", run_dir))
    assert all(n == 1 for n in started.values()), started  # none ran twice
    after = [e for e in events(run_dir) if e["kind"] == "started" and e["t"] > restarted[0]["t"]]
    assert after and {e["node"] for e in after} == {"node1"}, after  # the node kept serving
    assert "the zygote was killed by SIGKILL: started a new one" in agent_log(run_dir)
    assert "zygote) on node1 was killed by SIGKILL; its agent started a new one" in \
        (run_dir / "coordinator.log").read_text()
    assert_nothing_left(run_dir)


def test_a_zygote_killed_four_times_quickly_takes_its_node_out_of_the_fleet_saying_why(tmp_path):
    # Enough steps that the run goes on past the kills, whichever each one ends.
    body = "".join(f'\n[[steps]]\nid = "s{i}"\ncommand = "sleep 60"\ncores = 1\n' for i in range(30))
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "s"\nrun_dir = "run"\n' + body)
    run_dir = tmp_path / "run"
    p = spawn("run", str(suite), "--nodes", "1", cwd=tmp_path)
    try:
        pid = wait_for(lambda: of("node_joined", run_dir), 60, "the node to join")[0]["zygote_pid"]
        for n in range(1, 5):
            kill(pid)
            if n == 4:
                break
            pid = wait_for(lambda: [e for e in of("zygote_restarted", run_dir) if e["restarts"] == n],
                           60, f"restart {n}")[0]["zygote_pid"]
            # Killed only once it serves (said hello): one that dies before stops the agent at once.
            wait_for(lambda: agent_log(run_dir).count("the new zygote said hello") == n, 60, f"hello {n}")
        rc, out, err = finish(p, 120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(30)
    assert rc != 0, out + err
    assert len(of("zygote_restarted", run_dir)) == 3
    lost = of("node_lost", run_dir)
    assert [e["node"] for e in lost] == ["node1"], lost
    assert ("was killed by SIGKILL (restarted 3 time(s) in the last 600 s, at most 3: not restarted again)"
            in lost[0]["reason"]), lost
    assert "not restarted again" in agent_log(run_dir)
    assert_nothing_left(run_dir)


def test_a_zygote_killed_while_a_daemon_it_forked_holds_its_pipes_open_is_replaced_all_the_same(tmp_path):
    # The preload forks a daemon at import, which keeps the agent's pipes open after the
    # zygote's death: no end of file came, and before 2026-12-06 the agent never heard of
    # the death (its steps ran nowhere, for good). It watches the zygote's pid too now.
    body = "".join(f'\n[[steps]]\nid = "s{i}"\ncommand = "sleep 1"\ncores = 1\nretries = 1\n' for i in range(6))
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "s"\nrun_dir = "run"\n'
                        'preload = ["preload_forks_daemon"]\n' + body)
    run_dir = tmp_path / "run"
    p = spawn("run", str(suite), "--nodes", "1", cwd=tmp_path)
    try:
        joined = wait_for(lambda: of("node_joined", run_dir), 60, "the node to join")[0]
        wait_for(lambda: of("started", run_dir), 60, "steps running")
        kill(joined["zygote_pid"])
        restarted = wait_for(lambda: of("zygote_restarted", run_dir), 60, "the restart")
        rc, out, err = finish(p, 120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(30)
    assert rc == 0, out + err
    assert [(e["node"], e["reason"]) for e in restarted] == [("node1", "was killed by SIGKILL")], restarted
    assert not of("node_lost", run_dir)
    assert {e["step"] for e in of("exit", run_dir) if e["outcome"] == "succeeded"} == {f"s{i}" for i in range(6)}
    assert_nothing_left(run_dir)
