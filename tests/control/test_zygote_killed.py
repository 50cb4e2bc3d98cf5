"""A step that kills its node's zygote (its parent: `kill -9 $PPID` in a command).

Before 2026-12-06 its agent left saying only "the zygote exited", the coordinator
recorded "the agent on node1 stopped on its own" and retried the step elsewhere as
lost, where it killed the next node's zygote: with `retries = 2` on two nodes, every
node was lost and the fleet stopped itself. Now the agent's goodbye says how the zygote
died and what it ran (fleet.node.agent.zygote_end), and a step that ran there alone
fails, not retried, with that reason (fleet.control.jobend.zygote_died). Since
2026-12-06 the agent starts a new zygote and its node stays (fleet.node.rezygote,
fleet.control.rezygote): the reasons say so, and no node is lost. Real fleets."""

from __future__ import annotations

import os
import sys

import pytest

from fleetharness import assert_nothing_left, events, fleet, write_suite

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fleet's nodes need Linux")
CORES = len(os.sched_getaffinity(0))
ALONE = ("its node's fork server (zygote) was killed by SIGKILL while this step ran, alone on {node}: likely by this "
         "step (the zygote is its parent process, $PPID); not retried (each retry could kill a fork server again); "
         "the node started a new one")


@pytest.mark.skipif(CORES < 2 or CORES % 2, reason="two pretend nodes of equal cores: needs an even number of cores")
def test_a_step_that_kills_its_zygote_alone_fails_unretried_and_its_node_gets_a_new_zygote(tmp_path):
    per = CORES // 2  # (each step fills a node: the killer runs there alone)
    suite = write_suite(tmp_path / "s.toml", f"""[suite]
name = "s"
run_dir = "run"

[[steps]]
id = "killer"
command = "kill -9 $PPID; sleep 5"
cores = {per}
retries = 2

[[steps]]
id = "other"
command = "sleep 2"
cores = {per}

[[steps]]
id = "later"
command = "true"
deps = ["other"]
""")
    r = fleet("run", str(suite), "--nodes", "2", cwd=tmp_path, timeout=120)
    run_dir = tmp_path / "run"
    assert r.returncode == 1, r.stdout + r.stderr
    exits = [e for e in events(run_dir) if e["kind"] == "exit"]
    killer = [e for e in exits if e["step"] == "killer"]
    assert [e["outcome"] for e in killer] == ["failed"], killer
    node = killer[0]["node"]
    assert killer[0]["reason"] == ALONE.format(node=node)
    assert {e["step"]: e["outcome"] for e in exits if e["step"] != "killer"} == {"other": "succeeded",
                                                                                 "later": "succeeded"}
    assert not [e for e in events(run_dir) if e["kind"] == "node_lost"]
    restarted = [e for e in events(run_dir) if e["kind"] == "zygote_restarted"]
    assert [(e["node"], e["reason"], e["steps"]) for e in restarted] == [(node, "was killed by SIGKILL", ["killer"])]
    assert not [e for e in events(run_dir) if e["kind"] == "retry"]
    assert f"failed     killer: {ALONE.format(node=node)}" in r.stdout and "every node was lost" not in r.stdout, r.stdout
    agents = "".join(p.read_text() for p in (run_dir / "agents").iterdir() if p.is_file())
    assert f"fleet agent {node}: the zygote was killed by SIGKILL: started a new one" in agents, agents
    assert_nothing_left(run_dir)


@pytest.mark.skipif(CORES < 2, reason="two steps side by side on one node")
def test_steps_running_together_when_their_zygote_is_killed_are_lost_naming_its_death_and_each_other(tmp_path):
    suite = write_suite(tmp_path / "s.toml", """[suite]
name = "s"
run_dir = "run"

[[steps]]
id = "sleeper"
command = "sleep 30"

[[steps]]
id = "killer"
command = "sleep 1; kill -9 $PPID"
""")
    r = fleet("run", str(suite), "--nodes", "1", cwd=tmp_path, timeout=120)
    run_dir = tmp_path / "run"
    assert r.returncode != 0, r.stdout + r.stderr
    why = ("its node's fork server (zygote) was killed by SIGKILL while sleeper, killer ran on node1 (which, if any, "
           "did it is not known); the node started a new one")
    exits = {e["step"]: (e["outcome"], e["reason"]) for e in events(run_dir) if e["kind"] == "exit"}
    assert exits == {"sleeper": ("lost", why), "killer": ("lost", why)}, exits
    assert_nothing_left(run_dir)
