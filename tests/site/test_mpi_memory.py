"""An MPI step's memory reaches its launcher where the launcher takes it (srun), and its submitter
is warned where it does not (PALS, Hydra)."""

from __future__ import annotations

from pathlib import Path

from cluster import requires_mpi
from fleetharness import assert_nothing_left, fleet, write_suite

from fleet.control import launching
from fleet.core.resources import Slot
from fleet.core.decisions import Start
from fleet.core.suite import parse_suite
from fleet.site.mpi import render
from fleet.site.profiles import Profile

MIB = 1 << 20
PROBE = ["./a.out"]


def test_srun_is_given_each_node_s_memory_share_with_mem_when_every_node_holds_the_same():
    r = render("srun", (Slot("n1", (0, 1), (), 512 * MIB), Slot("n2", (0, 1), (), 512 * MIB)), 1, PROBE)
    assert r.argv[:9] == ("srun", "--overlap", "-N", "2", "-n", "4", "-m", "arbitrary", "--mpi=pmi2")
    assert r.argv[9:11] == ("--kill-on-bad-exit=1", "--mem=512M")


def test_srun_is_given_mem_per_cpu_when_nodes_hold_different_shares_at_the_same_memory_per_core():
    r = render("srun", (Slot("n1", (0, 1, 2, 3), (), 4096 * MIB), Slot("n2", (0, 1), (), 2048 * MIB)), 1, PROBE)
    assert "--mem-per-cpu=1024M" in r.argv and not any(a.startswith("--mem=") for a in r.argv)


def test_srun_is_given_the_largest_share_rounded_up_to_a_mib_when_shares_differ_otherwise():
    r = render("srun", (Slot("n1", (0,), (), 1000 * MIB + 1), Slot("n2", (0,), (), 300 * MIB)), 1, PROBE)
    assert "--mem=1001M" in r.argv


def test_srun_gets_no_memory_flag_for_a_step_without_memory_or_when_the_site_flags_set_one():
    assert not any(a.startswith("--mem") for a in render("srun", (Slot("n1", (0,)),), 1, PROBE).argv)
    r = render("srun", (Slot("n1", (0,), (), 64 * MIB),), 1, PROBE, flags=("--mem=0",))
    assert [a for a in r.argv if a.startswith("--mem")] == ["--mem=0"]


def test_the_launch_of_an_mpi_step_declaring_memory_runs_srun_with_its_memory(tmp_path: Path):
    table = {"id": "solve", "command": ["./solve"], "mpi": True, "ranks": 4, "memory": "2GB"}
    spec = parse_suite({"steps": [table]}, tmp_path / "suite.toml").steps[0]
    start = Start("solve", 1, (Slot("n1", (0, 1), (), 1 << 30), Slot("n2", (0, 1), (), 1 << 30)))
    profile = Profile(name="slurm-test", path="", launcher="slurm", mpi="srun")
    msg = launching.launch(profile, spec, start, tmp_path, "fleet-1")
    assert msg.command[:1] == ["srun"] and "--mem=1024M" in msg.command


def test_the_launch_of_an_mpi_step_declaring_no_memory_gives_srun_no_memory_limit(tmp_path: Path):
    # The scheduler still gives the step a share of each node's memory (Slot.memory), but
    # a share taken for want of a declaration is no limit, as for any other step.
    table = {"id": "solve", "command": ["./solve"], "mpi": True, "ranks": 4}
    spec = parse_suite({"steps": [table]}, tmp_path / "suite.toml").steps[0]
    start = Start("solve", 1, (Slot("n1", (0, 1), (), 1 << 30), Slot("n2", (0, 1), (), 1 << 30)))
    profile = Profile(name="slurm-test", path="", launcher="slurm", mpi="srun")
    msg = launching.launch(profile, spec, start, tmp_path, "fleet-1")
    assert msg.command[:1] == ["srun"] and not [a for a in msg.command if a.startswith("--mem")], msg.command
    assert msg.memory_limit == 0


def test_a_memory_binding_in_the_site_flags_keeps_the_step_s_memory_limit():
    slots = (Slot("n1", (0, 1), (), 512 * MIB),)
    r = render("srun", slots, 1, PROBE, flags=("--mem-bind=local",))
    assert [a for a in r.argv if a.startswith("--mem")] == ["--mem=512M", "--mem-bind=local"], r.argv


def test_each_of_srun_s_memory_limits_in_the_site_flags_is_the_site_s_say_in_either_spelling():
    slots = (Slot("n1", (0, 1), (), 512 * MIB),)
    for flags in (("--mem=0",), ("--mem", "4G"), ("--mem-per-cpu=1G",), ("--mem-per-cpu", "1G"),
                  ("--mem-per-gpu=8G",), ("--mem-per-gpu", "8G")):
        r = render("srun", slots, 1, PROBE, flags=flags)
        assert "--mem=512M" not in r.argv and r.argv[-len(PROBE) - len(flags):-len(PROBE)] == flags, (flags, r.argv)


# --- where nothing enforces it: said to the submitter --------------------------------------------

def _specs(tmp_path: Path, *tables: dict):
    return parse_suite({"steps": list(tables)}, tmp_path / "suite.toml").steps


def test_mpi_steps_declaring_memory_under_a_launcher_that_takes_no_limit_are_warned_of_and_srun_s_are_not(tmp_path):
    from fleet.control.mpimemory import note
    steps = _specs(tmp_path, {"id": "m1", "command": "true", "mpi": True, "memory": "1GiB"},
                   {"id": "m2", "command": "true", "mpi": True, "memory": "2GiB"},
                   {"id": "bare", "command": "true", "mpi": True}, {"id": "plain", "command": "true", "memory": "1GiB"})
    for launcher in ("hydra", "pals"):
        said = note(launcher, steps)
        assert said.startswith(f"2 MPI steps (the first: m1) declare memory, which the {launcher} launcher does "
                               "not enforce"), said
    assert note("hydra", steps[:1]).startswith("1 MPI step (the first: m1) declares memory")
    assert note("srun", steps) == "" and note("hydra", steps[2:]) == ""


@requires_mpi
def test_fleet_run_warns_on_stderr_of_an_mpi_step_s_memory_hydra_does_not_enforce_and_runs_it(tmp_path):
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "m"\nrun_dir = "run"\n[[steps]]\nid = "m"\n'
                                             'command = "true"\nmpi = true\nranks = 1\nmemory = "100MiB"\n')
    r = fleet("run", str(suite), "--nodes", "1", cwd=tmp_path, timeout=120, environ={"FLEET_MACHINE": "local"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert ("fleet: warning: 1 MPI step (the first: m) declares memory, which the hydra launcher does not enforce"
            in r.stderr), r.stderr
    # Run again: the step is done, skipped, and nothing is said of it.
    r = fleet("run", str(suite), "--nodes", "1", cwd=tmp_path, timeout=120, environ={"FLEET_MACHINE": "local"})
    assert r.returncode == 0 and "warning" not in r.stderr, r.stdout + r.stderr
    assert_nothing_left(tmp_path / "run")
