"""A batch job of several nodes whose coordinator would tell the agents a loopback
address (fleet.control.loopback): said at once by `fleet up`, and again when the agents
did not join; nothing for one node. The decision is pure; `fleet up` runs for real, in a
pretend PBS job whose launcher (`mpiexec` first on PATH) starts no agent, advertising
127.0.0.1 as given (a host name that resolves to it is named in the pure tests: which
this machine's does is not the tests' to choose)."""

from __future__ import annotations

import os
import re
import sys

import pytest

from fleetharness import completed, env

from fleet.control.loopback import HOW, is_loopback, warning

ADVICE = ('give fleet up --advertise ADDR (fleet run --advertise for the fleet it starts), FLEET_ADVERTISE=ADDR, '
          'or advertise = "ADDR" in the machine profile')


def test_a_host_name_that_resolves_to_loopback_in_a_job_of_several_nodes_is_named_with_its_address_and_the_fix():
    said = warning("127.0.1.1", "nid001", 2, local=False)
    assert said == ("the agent on the other node of this 2-node job will be told to reach the coordinator at "
                    "127.0.1.1, the loopback address this host's name nid001 resolves to: that address is each "
                    f"node's own, and an agent on another host will not join; {HOW}")
    assert ADVICE in said and "network interface (e.g. ib0, hsn0)" in said
    assert warning("127.0.0.1", "", 512, local=False).startswith(
        "the agents on the other 511 nodes of this 512-node job will be told to reach the coordinator at 127.0.0.1, "
        "a loopback address: ")


def test_one_node_a_local_fleet_or_an_address_other_nodes_may_reach_is_said_nothing_of():
    assert warning("127.0.1.1", "nid001", 1, local=False) is None  # (its one agent is on this host)
    assert warning("127.0.0.1", "", 4, local=True) is None
    for address in ("10.1.2.3", "192.0.2.1", "nid001", "fe80::1", ""):
        assert warning(address, "", 4, local=False) is None, address


def test_loopback_is_127_slash_8_the_ipv6_one_and_localhost_but_no_other_host_name():
    assert all(map(is_loopback, ("127.0.0.1", "127.0.1.1", "127.255.0.9", "::1", "[::1]", "localhost", "LOCALHOST.")))
    assert not any(map(is_loopback, ("128.0.0.1", "10.0.0.1", "0.0.0.0", "::", "nid001", "localhost-2", "")))


def pbs_job(tmp_path, nodes: int) -> dict:
    """The environment of a pretend PBS job of `nodes` nodes whose `mpiexec` starts no
    agent (it waits to be stopped, as one whose agents cannot connect)."""
    (tmp_path / "nodefile").write_text("".join(f"nl{i}\n" for i in range(1, nodes + 1)))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "mpiexec").write_text("#!/bin/sh\nexec sleep 300\n")
    (bindir / "mpiexec").chmod(0o755)
    clean = {k: v for k, v in env().items() if not k.startswith(("SLURM_", "PBS_", "FLEET_"))}
    return {**clean, "PBS_JOBID": "77.pbs", "PBS_NODEFILE": str(tmp_path / "nodefile"), "FLEET_MACHINE": "pals",
            "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}


def up(tmp_path, nodes: int, *args: str, environ: dict | None = None):
    """`fleet up` (a 2 s join timeout) in that job; its result and coordinator.log."""
    run_dir = tmp_path / "run"
    r = completed([sys.executable, "-m", "fleet", "up", "--run-dir", str(run_dir), "--timeout", "2", *args],
                  timeout=120, cwd=tmp_path, env={**pbs_job(tmp_path, nodes), **(environ or {})}, text=True)
    return r, (run_dir / "coordinator.log").read_text()


@pytest.mark.parametrize("how", ["--advertise", "FLEET_ADVERTISE"])
def test_fleet_up_in_a_job_of_several_nodes_told_a_loopback_address_says_so_at_once_and_when_the_agents_did_not_join(
        tmp_path, how):
    if how == "--advertise":
        r, log = up(tmp_path, 2, "--advertise", "127.0.0.1")
    else:
        r, log = up(tmp_path, 2, environ={"FLEET_ADVERTISE": "127.0.0.1"})
    assert r.returncode == 1, r.stdout + r.stderr
    warned = ("fleet up: warning: the agent on the other node of this 2-node job will be told to reach the "
              "coordinator at 127.0.0.1, a loopback address: that address is each node's own")
    assert warned in r.stderr, r.stderr
    assert r.stderr.index(warned) < r.stderr.index("only 0 of 2 agents joined"), r.stderr  # (at once: first)
    # The coordinator's log says it before the agents are started, and the line that
    # says they did not join says why (before 2026-12-07: nothing, as for one host).
    lines = log.splitlines()
    first = next(i for i, x in enumerate(lines) if "WARNING the agent on the other node" in x)
    failed = next(i for i, x in enumerate(lines) if "only 0 of 2 agents joined within 2 s" in x)
    assert first < failed, log
    assert re.search(r"; the agents were told to reach the coordinator at tcp://127\.0\.0\.1:\d+, a loopback "
                     r"address: on each other node that is the node itself; give fleet up --advertise ADDR ",
                     lines[failed]), lines[failed]
    assert ADVICE in lines[failed], lines[failed]


def test_fleet_up_in_a_one_node_job_told_a_loopback_address_says_nothing_of_it(tmp_path):
    r, log = up(tmp_path, 1, "--advertise", "127.0.0.1")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "only 0 of 1 agents joined" in r.stderr, r.stderr
    assert "loopback" not in r.stderr + log, r.stderr + log


def test_fleet_run_starting_its_own_fleet_in_such_a_job_says_so_at_once_too(tmp_path):
    suite = tmp_path / "s.toml"
    suite.write_text('[[steps]]\nid = "a"\ncommand = "true"\n')
    r = completed([sys.executable, "-m", "fleet", "run", str(suite), "--run-dir", str(tmp_path / "run"), "--timeout",
                   "2", "--advertise", "127.0.0.1"], timeout=120, cwd=tmp_path, env=pbs_job(tmp_path, 3), text=True)
    assert r.returncode == 1, r.stdout + r.stderr
    warned = ("fleet run: warning: the agents on the other 2 nodes of this 3-node job will be told to reach the "
              "coordinator at 127.0.0.1, a loopback address: ")
    assert warned in r.stderr, r.stderr
    assert r.stderr.index(warned) < r.stderr.index("only 0 of 3 agents joined within 2 s"), r.stderr
    assert "on each other node that is the node itself" in r.stderr, r.stderr
