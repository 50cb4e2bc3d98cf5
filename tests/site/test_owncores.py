"""Cores the coordinator keeps on its node (fleet.site.owncores, `--coordinator-cores`):
which cores, which node, what the agents are told, and a real process pinned to them
with the threads it starts after. The whole path inside a real Slurm job is in
tests/site/test_slurm.py."""

from __future__ import annotations

import json
import os
import socket
import sys
import textwrap
from pathlib import Path

import pytest

from fleetharness import completed

from fleet.site import owncores
from fleet.site.launch import PalsLauncher, SlurmLauncher

EP = "tcp://10.0.0.1:5555"


def test_the_last_cores_not_held_back_are_kept_and_one_core_at_least_is_left_to_steps():
    assert owncores.pick(1, (0, 1, 2, 3)) == (3,)
    assert owncores.pick(2, (0, 1, 2, 3), held_back=(3,)) == (1, 2)
    with pytest.raises(ValueError, match=r"--coordinator-cores 2: this node has 2 core\(s\) for steps"):
        owncores.pick(2, (0, 1, 2), held_back=(0,))


def test_the_coordinator_s_node_is_named_as_its_agent_will_name_it():
    assert owncores.this_node(("nid1", "nid2"), {"SLURMD_NODENAME": "nid2"}) == "nid2"
    short = socket.gethostname().split(".")[0]
    assert owncores.this_node(("x1", f"{short}.hsn.example"), {}) == f"{short}.hsn.example"  # a PBS node file's name
    assert owncores.this_node(("x1", "x2"), {}) == socket.gethostname()


def test_every_agent_is_told_the_coordinator_s_node_and_cores_and_no_word_when_none_are_kept():
    own = tuple(owncores.agent_args("nid1", (62, 63)))
    slurm = SlurmLauncher(Path("/r"), ("nid1", "nid2"), (0,), own=own).argv(EP, ())
    pals = PalsLauncher(Path("/r"), ("nid1", "nid2"), (0,), own=own).argv(EP, ())
    for argv in (slurm, pals):
        assert argv[-4:] == ["--coordinator-node", "nid1", "--coordinator-cores", "62,63"], argv
        assert argv[argv.index("--hold-back") + 1] == "0"  # the profile's, for every node
    assert owncores.agent_args("nid1", ()) == []


PINNED = textwrap.dedent("""\
    import json, os, sys, threading
    from fleet.site import owncores
    node, cores = owncores.keep(1, (), ())
    seen = {}
    t = threading.Thread(target=lambda: seen.update(thread=sorted(os.sched_getaffinity(0))))
    t.start(); t.join()
    print(json.dumps({"node": node, "cores": cores, "main": sorted(os.sched_getaffinity(0)), **seen}))
    """)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs: one is kept, one must be left")
def test_a_process_that_keeps_a_core_runs_there_and_so_do_the_threads_it_starts_after():
    r = completed([sys.executable, "-c", PINNED], timeout=60, text=True)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    from fleet.node.probe import usable_cores
    last = usable_cores()[-1]
    assert got["cores"] == [last]
    assert set(got["main"]) >= {last} and set(got["main"]) == set(got["thread"]), got
    assert not set(got["main"]) & set(usable_cores()[:-1]), got  # none of the cores left to steps


def test_only_the_agent_on_the_coordinator_s_node_leaves_its_cores_out_beside_the_site_s(capsys):
    from types import SimpleNamespace

    from fleet.node.agent import offered_cores

    def args(node):
        return SimpleNamespace(cores="", hold_back="0", node=node, coordinator_node="nid1", coordinator_cores="6,7")

    usable = lambda: (0, 1, 2, 3, 4, 5, 6, 7)  # noqa: E731
    assert offered_cores(args("nid1"), usable) == ([1, 2, 3, 4, 5], [0])  # (and those the profile holds back)
    assert "fleet agent nid1: core(s) [6, 7] left to the coordinator" in capsys.readouterr().err
    assert offered_cores(args("nid2"), usable) == ([1, 2, 3, 4, 5, 6, 7], [0])
    assert capsys.readouterr().err == ""
