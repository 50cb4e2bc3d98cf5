"""A local fleet's GPUs split between its pretend nodes: real local fleets (`fleet run
--nodes K`) given a fake GPU list in the environment, whose steps echo the devices
they were given."""

from __future__ import annotations

import itertools
import re

import pytest
from fleetharness import assert_nothing_left, events, fleet

from fleet.node import probe
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
