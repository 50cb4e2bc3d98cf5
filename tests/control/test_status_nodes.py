"""`fleet status` stays bounded however many nodes the fleet has: totals, and the nodes
that need attention (at most 20), by default; every node with --nodes, asked for page by
page. A real fleet (`fleet up`, two real agents) that 50 pretend agents join over the real
protocol (keyed DEALERs that send Join and heartbeats), and the real `fleet status`."""

from __future__ import annotations

import json
import time

import pytest

import rawpeer as R
from fleetharness import fleet, wait_for

from fleet.control import nodestatus
from fleet.control.client import Client
from fleet.wire import messages as P

PRETEND, HOT = 50, 25  # pretend nodes; of them, those whose memory is nearly full
MEMORY = 1 << 30


@pytest.fixture
def big_fleet(tmp_path):
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "2", "--heartbeat-timeout", "120", cwd=tmp_path,
          check=True, timeout=90)
    conn = R.conn_of(run_dir)
    socks = []
    try:
        keys = R.agent_keys(run_dir)
        for i in range(1, PRETEND + 1):
            s = R.dealer(conn.agents, keys)
            s.send(P.encode(P.Join(f"extra{i}", "pretend", [0, 1, 2, 3], [], MEMORY, conn.pid, conn.pid, [])))
            socks.append(s)
        for s in socks:
            assert isinstance(R.first_reply(s, 30), P.Welcome)
        for i, s in enumerate(socks, 1):  # the first HOT say their node's memory is nearly full
            s.send(P.encode(P.Heartbeat(f"extra{i}", MEMORY * 95 // 100 if i <= HOT else MEMORY // 100)))
        yield tmp_path, run_dir, conn
    finally:
        for s in socks:
            s.close(0)
        R.down(run_dir, tmp_path)


def status(tmp_path, run_dir, *more) -> str:
    return fleet("status", "--run-dir", str(run_dir), *more, cwd=tmp_path, check=True, timeout=60).stdout


def test_status_of_52_nodes_sums_them_up_lists_20_needing_attention_and_every_node_only_with_nodes(big_fleet):
    tmp_path, run_dir, conn = big_fleet
    total = PRETEND + 2
    # The two real nodes are this machine: its memory may be nearly full too.
    wait_for(lambda: R.status(conn)["nodes_attention"] >= HOT, 30, "the heartbeats to be heard")

    st = json.loads(status(tmp_path, run_dir, "--json"))
    t = st["nodes_summary"]
    hot = st["nodes_attention"]
    assert st["nodes_shown"] == "attention" and HOT <= hot <= HOT + 2
    assert (t["nodes"], t["alive"], t["lost"], t["not_in_pool"]) == (total, total, 0, 0)
    assert sum(t["busy"].values()) == total and t["busy"]["idle"] == total and t["cores_busy"] == 0
    # Listed: at most 20 rows, each a whole row with its reason, in node order.
    assert len(st["nodes"]) == nodestatus.ATTENTION_LISTED
    assert [n["node"] for n in st["nodes"]] == [f"extra{i}" for i in range(1, 21)]
    assert all(n["attention"] == "memory nearly full" and n["cores"] == 4 for n in st["nodes"])

    text = status(tmp_path, run_dir)
    assert f"nodes: {total} ({total} alive)" in text and f"need attention ({hot}):" in text, text
    assert f"... and {hot - 20} more" in text and "extra21" not in text and "node1 " not in text, text

    # --nodes: every node, in natural order, through pages; the default answer held none of the healthy ones.
    every = json.loads(status(tmp_path, run_dir, "--json", "--nodes"))
    names = [n["node"] for n in every["nodes"]]
    assert names == [f"extra{i}" for i in range(1, PRETEND + 1)] + ["node1", "node2"] and every["nodes_shown"] == "all"
    assert all(n["alive"] and "cores_busy" in n for n in every["nodes"])
    assert t["cores"] == sum(n["cores"] for n in every["nodes"]) and t["memory"] == sum(n["memory"] for n in every["nodes"])
    text = status(tmp_path, run_dir, "--nodes")
    assert all(f"  {name} " in text for name in names) and "need attention" not in text, text


def test_a_page_of_the_node_table_holds_the_rows_from_where_it_was_asked_and_says_where_the_next_begins(big_fleet):
    _, _, conn = big_fleet
    c = Client(conn)
    try:
        page = c.ask(P.Status(nodes_from=50), timeout=10).status
        assert [n["node"] for n in page["nodes"]] == ["node1", "node2"]
        assert page["nodes_total"] == PRETEND + 2 and page["nodes_next"] is None and page["nodes_from"] == 50
        assert c.ask(P.Status(nodes_from=0), timeout=10).status["nodes_next"] is None  # 52 < one page
    finally:
        c.close()


def test_a_node_needs_attention_when_lost_out_of_the_pool_quiet_or_short_of_memory_and_not_otherwise():
    """The rules themselves, on the coordinator's own tables (no process needed)."""
    from fleet.control.liveness import Agent
    from fleet.core.decisions import NodeJoined, NodeLost
    from fleet.core.resources import NodeSpec
    from fleet.core.scheduler import Scheduler

    sched, agents = Scheduler(), []
    for i in range(1, 41):
        sched.handle(NodeJoined(NodeSpec(f"n{i}", (0, 1, 2, 3), (), 1000)), 0.0)
        agents.append(Agent(f"n{i}", b"x", "h", 1, time.monotonic(), memory=1000, memory_used=10))
    agents[3].memory_used = 950   # nearly full
    agents[4].memory_used = 200   # 200 in use, none held: more than an eighth beyond
    agents[5].memory_used = 125   # exactly an eighth beyond: fine
    sched.handle(NodeLost("n7"), 0.0)
    agents[6].alive = False
    agents[7].last_seen -= 100
    agents.append(Agent("ghost", b"g", "h", 1, time.monotonic()))  # joined, never in the pool
    got = nodestatus.summary(sched, agents, quiet_s=5.0)
    assert [(n["node"], n["attention"]) for n in got["nodes"]] == [
        ("n4", "memory nearly full"), ("n5", "memory in use beyond what its steps hold"), ("n7", "lost"),
        ("n8", "quiet 100 s"), ("ghost", "not in the pool")]
    t = got["nodes_summary"]
    assert (t["nodes"], t["alive"], t["lost"], t["not_in_pool"], t["cores"]) == (41, 39, 1, 1, 156)
    assert got["nodes_attention"] == 5 and got["nodes_shown"] == "attention"


def test_the_pretend_nodes_of_a_local_fleet_each_say_their_share_of_the_machines_memory_in_use(tmp_path):
    # Two pretend nodes share this machine: each said the whole machine's use before, so
    # a laptop using half its memory showed both nodes "memory nearly full".
    import psutil
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "2", "--heartbeat", "0.2", cwd=tmp_path, check=True, timeout=90)
    try:
        def rows():
            st = json.loads(status(tmp_path, run_dir, "--json"))
            return st["nodes"] if all(n.get("memory_used", -1) >= 0 for n in st["nodes"]) else None
        nodes = wait_for(rows, 30, "both nodes' heartbeats")
        vm = psutil.virtual_memory()
        share = (vm.total - vm.available) / vm.total
        for n in nodes:
            # (memory in use moves between the agent's read and this one: a loose bound)
            assert n["memory_used"] == pytest.approx(share * n["memory"], rel=0.25, abs=256 << 20), (n, share)
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
