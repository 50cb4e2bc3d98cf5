"""Where a node's GPUs come from, and a local fleet's GPUs split between its pretend
nodes: real local fleets (`fleet run --nodes K`) given a fake GPU list in the
environment, whose steps echo the devices they were given; and the pure rules of
fleet.node.probe.node_gpus and the agent's choice."""

from __future__ import annotations

import itertools
import re
from argparse import Namespace

import pytest
from cluster import requires_mpi
from fleetharness import assert_nothing_left, events, fleet

from fleet.node import agent, probe
from fleet.wire import records

VARS = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK")

needs_two_cores = pytest.mark.skipif(len(probe.usable_cores()) < 2, reason="two pretend nodes need two cores")


@pytest.fixture
def no_gpu_vars(monkeypatch):
    """The fleets these tests start see only the GPU variables a test gives them."""
    for name in (*VARS, "FLEET_MACHINE", "FLEET_MACHINES"):
        monkeypatch.delenv(name, raising=False)


def echo_suite(var: str, steps: int, gpus: int = 1, seconds: float = 1.5) -> str:
    return (f'[suite]\nname = "gpus"\nrun_dir = "run"\n\n[[steps]]\nid = "g/{{i}}"\narray = "1-{steps}"\n'
            f'command = "echo DEVICES=${var}; sleep {seconds}"\ngpus = {gpus}\n')


def ran(run, var_steps) -> list[dict]:
    """Each step's attempt: its node, recorded GPUs and interval, and the devices its log says it saw."""
    out = []
    for e in events(run):
        if e["kind"] != "exit":
            continue
        log = records.log_path(run, e["step"]).read_text()
        seen = re.findall(r"^DEVICES=(.*)$", log, re.M)
        assert len(seen) == 1, log
        out.append(dict(step=e["step"], node=e["node"], gpus=e["gpus"], begin=e["first_at"], end=e["ended_at"],
                        seen={int(g) for g in seen[0].split(",") if g}, outcome=e["outcome"]))
    assert len(out) == var_steps, out
    return out


def joined_gpus(run) -> dict[str, list[int]]:
    return {e["node"]: e["gpus"] for e in events(run) if e["kind"] == "node_joined"}


@needs_two_cores
@pytest.mark.parametrize("visible, shares, overlap", [
    ("3,5", {"node1": [3], "node2": [5]}, True),
    # Fewer GPUs than pretend nodes: the first has it, the other none.
    ("7", {"node1": [7], "node2": []}, False),
])
def test_two_pretend_nodes_split_the_machine_s_gpus_so_overlapping_steps_never_share_a_device(
        tmp_path, no_gpu_vars, visible, shares, overlap):
    suite = tmp_path / "s.toml"
    suite.write_text(echo_suite("CUDA_VISIBLE_DEVICES", 4 if overlap else 2))
    r = fleet("run", str(suite), "--nodes", "2", cwd=tmp_path, timeout=120,
              environ={"CUDA_VISIBLE_DEVICES": visible})
    assert r.returncode == 0, r.stderr
    run = tmp_path / "run"
    attempts = ran(run, 4 if overlap else 2)
    overlapping = [(a, b) for a, b in itertools.combinations(attempts, 2) if a["begin"] < b["end"] and b["begin"] < a["end"]]
    for a, b in overlapping:
        assert not a["seen"] & b["seen"], (a, b)
    assert bool(overlapping) == overlap, attempts  # (else the check above checked nothing)
    for a in attempts:
        assert a["outcome"] == "succeeded" and a["seen"] == set(a["gpus"]) == set(shares[a["node"]]), a
    assert joined_gpus(run) == shares
    assert_nothing_left(run)


@needs_two_cores
def test_a_step_wanting_every_gpu_of_the_machine_does_not_fit_one_of_two_pretend_nodes(tmp_path, no_gpu_vars):
    suite = tmp_path / "s.toml"
    suite.write_text(echo_suite("CUDA_VISIBLE_DEVICES", 1, gpus=2, seconds=0))
    r = fleet("run", str(suite), "--nodes", "2", cwd=tmp_path, timeout=60,
              environ={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert r.returncode != 0, r.stdout
    assert "no node has 2 GPUs" in r.stderr, r.stderr
    assert not (tmp_path / "run" / "events.jsonl").exists()


def test_a_profile_s_gpu_variable_is_where_its_nodes_gpus_are_read_from(tmp_path, no_gpu_vars):
    machines = tmp_path / "machines"
    machines.mkdir()
    (machines / "hip.toml").write_text('[machine]\nlauncher = "local"\nmpi = "hydra"\ngpu_var = "HIP_VISIBLE_DEVICES"\n')
    suite = tmp_path / "s.toml"
    suite.write_text(echo_suite("HIP_VISIBLE_DEVICES", 1, gpus=2, seconds=0))
    r = fleet("run", str(suite), "--nodes", "1", cwd=tmp_path, timeout=120,
              environ={"HIP_VISIBLE_DEVICES": "2,4", "FLEET_MACHINES": str(machines), "FLEET_MACHINE": "hip"})
    assert r.returncode == 0, r.stderr
    run = tmp_path / "run"
    assert joined_gpus(run) == {"node1": [2, 4]}
    assert [a["seen"] for a in ran(run, 1)] == [{2, 4}]
    assert_nothing_left(run)


@needs_two_cores
def test_a_profile_s_gpus_per_node_are_the_gpus_when_its_variable_is_not_set(tmp_path, no_gpu_vars):
    machines = tmp_path / "machines"
    machines.mkdir()
    (machines / "counted.toml").write_text(
        '[machine]\nlauncher = "local"\nmpi = "hydra"\ngpu_var = "ZE_AFFINITY_MASK"\ngpus_per_node = 4\n')
    suite = tmp_path / "s.toml"
    suite.write_text(echo_suite("ZE_AFFINITY_MASK", 2, gpus=2, seconds=0))
    r = fleet("run", str(suite), "--nodes", "2", cwd=tmp_path, timeout=120,
              environ={"FLEET_MACHINES": str(machines), "FLEET_MACHINE": "counted"})
    assert r.returncode == 0, r.stderr
    run = tmp_path / "run"
    assert joined_gpus(run) == {"node1": [0, 1], "node2": [2, 3]}
    assert {frozenset(a["seen"]) for a in ran(run, 2)} <= {frozenset({0, 1}), frozenset({2, 3})}
    assert_nothing_left(run)


@needs_two_cores
@requires_mpi
def test_every_rank_of_an_mpi_step_on_two_pretend_nodes_sees_gpus_of_its_own_node(tmp_path, no_gpu_vars):
    # The audit's repro: 2 pretend nodes of 1 core and 2 GPUs; 2 ranks with 2 GPUs put
    # both GPUs on node1 and gave node2's rank CUDA_VISIBLE_DEVICES="".
    suite = tmp_path / "s.toml"
    suite.write_text('[suite]\nname = "mpigpus"\nrun_dir = "run"\n\n[[steps]]\nid = "m"\nmpi = true\n'
                     'ranks = 2\ngpus = 2\ncommand = "sh -c \'echo RANK=$PMI_RANK DEVICES=$CUDA_VISIBLE_DEVICES\'"\n')
    r = fleet("run", str(suite), "--nodes", "2", cwd=tmp_path, timeout=120,
              environ={"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    assert r.returncode == 0, r.stderr
    run = tmp_path / "run"
    [start] = [e for e in events(run) if e["kind"] == "start"]
    placed = [set(s["gpus"]) for s in start["placement"]]
    assert placed == [{0}, {2}], start["placement"]   # one GPU beside each rank
    seen = dict(re.findall(r"^RANK=(\d+) DEVICES=(.*)$", records.log_path(run, "m").read_text(), re.M))
    assert sorted(seen) == ["0", "1"], seen
    assert [{int(g) for g in seen[k].split(",") if g} for k in ("0", "1")] == placed
    assert_nothing_left(run)


# --- the rules, pure ---------------------------------------------------------------------------

@pytest.mark.parametrize("gpu_var, count, env, gpus", [
    # The profile's variable first, whatever else is set.
    ("HIP_VISIBLE_DEVICES", 0, {"CUDA_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "2,3"}, (2, 3)),
    ("HIP_VISIBLE_DEVICES", 4, {"HIP_VISIBLE_DEVICES": "1"}, (1,)),
    # Set but empty: no GPUs (CUDA's meaning), except ZE_AFFINITY_MASK's every device.
    ("CUDA_VISIBLE_DEVICES", 4, {"CUDA_VISIBLE_DEVICES": ""}, ()),
    ("ZE_AFFINITY_MASK", 6, {"ZE_AFFINITY_MASK": ""}, (0, 1, 2, 3, 4, 5)),
    ("ZE_AFFINITY_MASK", 0, {"ZE_AFFINITY_MASK": ""}, ()),
    # Not set: the profile's count, before any other variable.
    ("ZE_AFFINITY_MASK", 6, {}, (0, 1, 2, 3, 4, 5)),
    ("ZE_AFFINITY_MASK", 2, {"CUDA_VISIBLE_DEVICES": "5"}, (0, 1)),
    # No count either: the first set of the others, in the order they had before; as
    # positions when steps get the profile's variable (tests/site/test_gpu_env.py).
    ("CUDA_VISIBLE_DEVICES", 0, {"ROCR_VISIBLE_DEVICES": "1", "ZE_AFFINITY_MASK": "0"}, (0,)),
    ("", 0, {"HIP_VISIBLE_DEVICES": "3", "ZE_AFFINITY_MASK": "0"}, (3,)),
    ("", 0, {}, ()),
])
def test_a_node_s_gpus_come_from_the_profile_s_variable_then_its_count_then_the_other_variables(
        gpu_var, count, env, gpus):
    assert probe.node_gpus(gpu_var, count, env) == gpus


def test_an_agent_offers_the_gpus_it_is_given_else_those_found_as_its_profile_says(monkeypatch, capsys):
    for name in VARS:
        monkeypatch.delenv(name, raising=False)
    args = Namespace(node="n1", gpus=None, gpu_var="ZE_AFFINITY_MASK", gpus_per_node=3)
    assert agent.offered_gpus(args, probe.node_gpus) == [0, 1, 2]
    assert agent.offered_gpus(Namespace(**{**vars(args), "gpus": "4,5"}), probe.node_gpus) == [4, 5]
    assert agent.offered_gpus(Namespace(**{**vars(args), "gpus": ""}), probe.node_gpus) == []
    monkeypatch.setenv("ZE_AFFINITY_MASK", "0.1")
    assert agent.offered_gpus(args, probe.node_gpus) == []
    assert "fleet agent n1: offering no GPUs: ZE_AFFINITY_MASK='0.1'" in capsys.readouterr().err


# --- ids that are not integers: no GPUs, and why ------------------------------------------------

UNREAD = ("GPU-8a1b2c3d-1111", "MIG-1,MIG-2")


@pytest.mark.parametrize("visible", UNREAD)
def test_fleet_step_runs_a_step_without_gpus_when_the_machine_s_gpu_ids_are_not_integers_and_says_why(
        tmp_path, no_gpu_vars, visible):
    suite = tmp_path / "s.toml"
    suite.write_text('[suite]\nname = "gpus"\nrun_dir = "run"\n[[steps]]\nid = "plain"\ncommand = "echo ran"\n'
                     '[[steps]]\nid = "g"\ncommand = "echo ran"\ngpus = 1\n')
    r = fleet("step", str(suite), "plain", cwd=tmp_path, timeout=60, environ={"CUDA_VISIBLE_DEVICES": visible})
    assert r.returncode == 0 and r.stdout == "ran\n", r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert f"fleet step: using no GPUs: CUDA_VISIBLE_DEVICES={visible!r}" in r.stderr, r.stderr
    # A step that needs a GPU cannot run here, and the reason is on the line before.
    r = fleet("step", str(suite), "g", cwd=tmp_path, timeout=60, environ={"CUDA_VISIBLE_DEVICES": visible})
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "is not an integer device id" in r.stderr and "no node has 1 GPU" in r.stderr, r.stderr


def test_fleet_run_says_why_no_node_has_a_gpu_when_the_machine_s_gpu_ids_are_not_integers(tmp_path, no_gpu_vars):
    suite = tmp_path / "s.toml"
    suite.write_text(echo_suite("CUDA_VISIBLE_DEVICES", 2, gpus=1, seconds=0))
    r = fleet("run", str(suite), "--nodes", "1", cwd=tmp_path, timeout=60,
              environ={"CUDA_VISIBLE_DEVICES": UNREAD[0]})
    assert r.returncode == 2, r.stdout + r.stderr
    (error,) = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert "field 'gpus': can never run on this allocation: no node has 1 GPU" in error, error
    assert f"the nodes offer no GPUs: CUDA_VISIBLE_DEVICES={UNREAD[0]!r}: {UNREAD[0]!r} is not an integer device id" \
        in error, error
    assert not (tmp_path / "run").exists()


def test_a_local_fleet_that_is_up_says_why_its_nodes_have_no_gpu_when_it_refuses_a_step(tmp_path, no_gpu_vars):
    suite = tmp_path / "s.toml"
    suite.write_text(echo_suite("CUDA_VISIBLE_DEVICES", 1, gpus=1, seconds=0))
    run = tmp_path / "run"
    gpus = {"CUDA_VISIBLE_DEVICES": UNREAD[1]}
    fleet("up", "--local", "--nodes", "1", "--run-dir", str(run), cwd=tmp_path, check=True, timeout=60, environ=gpus)
    try:
        r = fleet("run", str(suite), "--run-dir", str(run), cwd=tmp_path, timeout=60)
    finally:
        fleet("down", "--run-dir", str(run), cwd=tmp_path, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert ("no node has 1 GPU (the step may not span nodes); the nodes offer no GPUs: "
            f"CUDA_VISIBLE_DEVICES={UNREAD[1]!r}: 'MIG-1' is not an integer device id") in r.stderr, r.stderr
    assert_nothing_left(run)
