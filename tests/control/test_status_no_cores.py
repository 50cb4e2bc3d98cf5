"""A node whose agent offers no core, its cores all held back by the machine profile
(fleet.control.nocores), needs attention in `fleet status` whatever the fleet's size:
a real local fleet (two real agents, a profile holding back a core this machine does
not have) that 40 pretend agents join over the real protocol, one of them offering no
core, as an agent does on a node of a partial-node job given only held-back cores (the
real agents' side, in a real Slurm job: tests/site/test_slurm_held_back.py). Past 32
nodes the status lists only the nodes that need attention: before 2026-12-07 this one
was not among them, nor anywhere said."""

from __future__ import annotations

import json

import rawpeer as R
from fleetharness import fleet, wait_for

from fleet.wire import messages as P

PRETEND = 40


def test_a_node_offering_no_core_is_listed_with_why_among_the_nodes_needing_attention_of_a_big_fleet(tmp_path):
    machines = tmp_path / "machines"
    machines.mkdir()
    (machines / "heldlocal.toml").write_text('[machine]\nlauncher = "local"\nheld_back_cores = [4096]\n')
    env = {"FLEET_MACHINES": str(machines)}
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--machine", "heldlocal", "--nodes", "2", "--heartbeat-timeout", "120",
          cwd=tmp_path, check=True, timeout=90, environ=env)
    socks = []
    try:
        conn = R.conn_of(run_dir)
        keys = R.agent_keys(run_dir)
        for i in range(1, PRETEND + 1):
            s = R.dealer(conn.agents, keys)
            empty = i == PRETEND
            s.send(P.encode(P.Join(f"extra{i}", "pretend", [] if empty else [0, 1], [], 1 << 30, conn.pid, conn.pid,
                                   [], held_back=[4096] if empty else [])))
            socks.append(s)
        for s in socks:
            assert isinstance(R.first_reply(s, 30), P.Welcome)
        wait_for(lambda: R.status(conn)["nodes_summary"]["nodes"] == PRETEND + 2, 30, "every pretend node to join")
        st = json.loads(fleet("status", "--run-dir", str(run_dir), "--json", cwd=tmp_path, check=True,
                              timeout=60).stdout)
        assert st["nodes_shown"] == "attention" and st["nodes_summary"]["no_cores"] == 1, st["nodes_summary"]
        why = ("no core for steps: all 1 core this job gives it on extra40 is held back by machine profile "
               "heldlocal's held_back_cores [4096]")
        assert [r["attention"] for r in st["nodes"] if r["node"] == f"extra{PRETEND}"] == [why], st["nodes"]
        text = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=60).stdout
        assert f"({why})" in text, text
        log = (run_dir / "coordinator.log").read_text()
        assert f"node extra{PRETEND} offers no core for steps: all 1 core" in log, log
    finally:
        for s in socks:
            s.close(0)
        R.down(run_dir, tmp_path)
