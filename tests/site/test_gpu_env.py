"""What a step's GPU environment says besides its GPU ids: how Intel's numbers are read
(ZE_FLAT_DEVICE_HIERARCHY, from the machine profile), that a suite's env does not stand
in for the placement's GPU variable, and that ids read from another variable than the
profile's are handed out as positions. Real local fleets, given fake GPU lists."""

from __future__ import annotations

import re

import pytest
from cluster import requires_mpi
from fleetharness import assert_nothing_left, fleet

from fleet.control import launching
from fleet.core.resources import Slot
from fleet.core.scheduler import Start
from fleet.core.suite import parse_suite
from fleet.node import probe
from fleet.site import profiles
from fleet.wire import records

VARS = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK",
        "ZE_FLAT_DEVICE_HIERARCHY")
needs_two_cores = pytest.mark.skipif(len(probe.usable_cores()) < 2, reason="two pretend nodes need two cores")


@pytest.fixture
def no_gpu_vars(monkeypatch):
    for name in (*VARS, "FLEET_MACHINE", "FLEET_MACHINES"):
        monkeypatch.delenv(name, raising=False)


def machine(tmp_path, name: str, body: str) -> dict:
    d = tmp_path / "machines"
    d.mkdir(exist_ok=True)
    (d / f"{name}.toml").write_text(f'[machine]\nlauncher = "local"\nmpi = "hydra"\n{body}')
    return {"FLEET_MACHINES": str(d), "FLEET_MACHINE": name}


def said(run, step: str) -> list[str]:
    return re.findall(r"^SAW (.*)$", records.log_path(run, step).read_text(), re.M)


SHOW = "echo SAW mask=${ZE_AFFINITY_MASK-unset} hier=${ZE_FLAT_DEVICE_HIERARCHY-unset}"


# --- the profile ---------------------------------------------------------------------------------

def test_the_aurora_profile_hands_out_its_twelve_stacks_and_reads_the_mask_as_stacks():
    p = profiles.load("aurora")
    assert (p.gpu_var, p.gpus_per_node, p.gpu_env) == ("ZE_AFFINITY_MASK", 12, {"ZE_FLAT_DEVICE_HIERARCHY": "FLAT"})


@pytest.mark.parametrize("body, env", [
    ('gpu_var = "ZE_AFFINITY_MASK"\n', {"ZE_FLAT_DEVICE_HIERARCHY": "FLAT"}),
    ('gpu_var = "ZE_AFFINITY_MASK"\nze_flat_device_hierarchy = "COMPOSITE"\n', {"ZE_FLAT_DEVICE_HIERARCHY": "COMPOSITE"}),
    ('gpu_var = "ZE_AFFINITY_MASK"\nze_flat_device_hierarchy = ""\n', {}),
    ('gpu_var = "CUDA_VISIBLE_DEVICES"\n', {}),
])
def test_a_profile_with_intel_s_mask_sets_the_flat_hierarchy_unless_it_says_otherwise(tmp_path, body, env):
    assert profiles.parse_profile("m", tmp_path / "m.toml", f'[machine]\nlauncher = "local"\n{body}').gpu_env == env


def test_a_hierarchy_on_a_machine_without_intel_s_mask_is_refused_naming_the_field(tmp_path):
    with pytest.raises(profiles.ProfileError, match=r"m.toml: field 'machine.ze_flat_device_hierarchy': only for"):
        profiles.parse_profile("m", tmp_path / "m.toml",
                               '[machine]\nlauncher = "local"\nze_flat_device_hierarchy = "FLAT"\n')


# --- what a launch carries -----------------------------------------------------------------------

def spec(tmp_path, **fields):
    return parse_suite({"steps": [{"id": "s", **fields}]}, tmp_path / "suite.toml").steps[0]


@pytest.mark.parametrize("kind", ["call", "command"])
def test_a_suite_s_env_does_not_stand_in_for_the_machine_s_gpu_variable(tmp_path, kind):
    what = {"call": "mod:fn"} if kind == "call" else {"command": "x"}
    s = spec(tmp_path, **what, env={"ZE_AFFINITY_MASK": "5", "ZE_FLAT_DEVICE_HIERARCHY": "COMPOSITE", "A": "1"})
    msg = launching.launch(profiles.load("aurora"), s, Start("s", 1, (Slot("x1", (1,)),)), tmp_path / "run")
    assert "ZE_AFFINITY_MASK" not in msg.env and msg.gpu_vars == ["ZE_AFFINITY_MASK"]
    assert msg.env["ZE_FLAT_DEVICE_HIERARCHY"] == "FLAT" and msg.env["A"] == "1"


def test_every_pals_rank_started_through_the_wrapper_is_given_the_hierarchy(tmp_path):
    s = spec(tmp_path, mpi=True, ranks=2, gpus=2, command=["a.out"])
    d = Start("s", 1, (Slot("x1", (1,), (0,)), Slot("x2", (1,), (3,))))
    msg = launching.launch(profiles.load("aurora"), s, d, tmp_path / "run")
    script = (records.step_dir(tmp_path / "run", "s") / ".fleet" / "pals-ranks.sh").read_text().splitlines()
    assert script[1] == "export ZE_FLAT_DEVICE_HIERARCHY=FLAT", script
    assert msg.env["ZE_FLAT_DEVICE_HIERARCHY"] == "FLAT"


# --- real local fleets ---------------------------------------------------------------------------

@needs_two_cores
@requires_mpi
def test_every_step_and_rank_on_an_intel_machine_reads_its_mask_flat_and_a_suite_s_mask_is_not_used(
        tmp_path, no_gpu_vars):
    environ = machine(tmp_path, "ze", 'gpu_var = "ZE_AFFINITY_MASK"\ngpus_per_node = 4\n')
    suite = tmp_path / "s.toml"
    suite.write_text(f'[suite]\nname = "ze"\nrun_dir = "run"\n\n'
                     f'[[steps]]\nid = "own"\ncommand = "{SHOW}"\nenv = {{ ZE_AFFINITY_MASK = "3" }}\n\n'
                     f'[[steps]]\nid = "one"\ncommand = "{SHOW}"\ngpus = 1\ndeps = ["own"]\n\n'
                     f'[[steps]]\nid = "m"\nmpi = true\nranks = 2\ngpus = 2\ncommand = "sh -c \'{SHOW}\'"\n'
                     f'deps = ["one"]\n')
    r = fleet("run", str(suite), "--nodes", "2", cwd=tmp_path, timeout=120, environ=environ)
    assert r.returncode == 0, r.stderr
    run = tmp_path / "run"
    assert said(run, "own") == ["mask=unset hier=FLAT"]   # (before: mask=3, a GPU it did not hold)
    assert said(run, "one") == ["mask=0 hier=FLAT"]
    assert sorted(said(run, "m")) == ["mask=0 hier=FLAT", "mask=2 hier=FLAT"]
    assert_nothing_left(run)


def test_an_amd_node_s_gpus_read_from_rocr_are_handed_out_in_hip_s_numbering(tmp_path, no_gpu_vars):
    environ = machine(tmp_path, "hip", 'gpu_var = "HIP_VISIBLE_DEVICES"\n')
    suite = tmp_path / "s.toml"
    suite.write_text('[suite]\nname = "hip"\nrun_dir = "run"\n\n[[steps]]\nid = "h"\ngpus = 2\n'
                     'command = "echo SAW rocr=$ROCR_VISIBLE_DEVICES hip=$HIP_VISIBLE_DEVICES"\n')
    r = fleet("run", str(suite), "--nodes", "1", cwd=tmp_path, timeout=120,
              environ={**environ, "ROCR_VISIBLE_DEVICES": "4,5"})
    assert r.returncode == 0, r.stderr
    assert said(tmp_path / "run", "h") == ["rocr=4,5 hip=0,1"]   # (before: hip=4,5, which name no device)
    assert_nothing_left(tmp_path / "run")


@pytest.mark.parametrize("gpu_var, env, gpus", [
    ("HIP_VISIBLE_DEVICES", {"ROCR_VISIBLE_DEVICES": "4,5"}, (0, 1)),
    ("CUDA_VISIBLE_DEVICES", {"ROCR_VISIBLE_DEVICES": "2"}, (0,)),
    ("HIP_VISIBLE_DEVICES", {"HIP_VISIBLE_DEVICES": "4,5", "ROCR_VISIBLE_DEVICES": "4,5,6"}, (4, 5)),
    ("", {"ROCR_VISIBLE_DEVICES": "4,5"}, (4, 5)),   # no variable set for steps: the ids only count
])
def test_ids_read_from_another_variable_than_the_profile_s_are_their_positions(gpu_var, env, gpus):
    assert probe.node_gpus(gpu_var, 0, env) == gpus
