"""Launchers, exactly: the argv an MPI step's launcher is given for each placement
(srun, PALS mpiexec, Hydra mpiexec), the argv that starts one agent per node, machine
profiles, the variables a launcher step leaks into an agent, and how an agent names
its node. Pure but for one test, which runs srun's rank wrapper as srun would."""

from __future__ import annotations

import argparse
import json
import os
import socket
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import fleet.site.launch as launch
from fleet.control import coordinator as coordinator_mod
from fleet.control import launching
from fleet.wire import events as E
from fleet.site import profiles
from fleet.cli import main as cli
from fleet.wire.interpreter import SAFE
from fleet.site.launch import LocalLauncher, PalsLauncher, SlurmLauncher, agent_argv, launcher_for, split_cores
from fleet.node.launcherenv import is_leaked
from fleet.site.mpi import HYDRA_RANK_STDIN as RANK, RenderError, layout, render
from fleet.wire.execshell import EXEC_SHELL
from fleet.node import agent
from fleet.site.profiles import Profile, ProfileError
from fleet.core.resources import Slot
from fleet.core.scheduler import Start
from fleet.core.suite import parse_suite

PROBE = ["python3", "-m", "fleet.node.mpiprobe"]
AGENTS_DIR = Path(__file__).resolve().parents[2] / "agents"
AGENT = (sys.executable, *SAFE, "-m", "fleet.node.agent")  # (-P: fleet.wire.interpreter)
EP = "tcp://10.0.0.1:5555"


def placement(*slots) -> tuple[Slot, ...]:
    """placement(("n1", [0, 1]), ("n2", [0, 1], [0])): node, cores[, gpus]."""
    return tuple(Slot(s[0], tuple(s[1]), tuple(s[2]) if len(s) > 2 else ()) for s in slots)


# --- srun --------------------------------------------------------------------------------------

SRUN = ("srun", "--overlap")


def test_srun_on_one_node_binds_each_rank_to_its_core_with_a_map_cpu_list():
    r = render("srun", placement(("n1", [2, 3])), 1, PROBE)
    assert r.argv == (*SRUN, "-N", "1", "-n", "2", "-m", "arbitrary", "--mpi=pmi2", "--kill-on-bad-exit=1",
                      "--cpu-bind=verbose,map_cpu:2,3", *PROBE)
    assert r.env == {"SLURM_HOSTFILE": "{fleet}/hostfile"}
    assert r.files == {"hostfile": "n1\nn1\n"}


def test_srun_on_several_nodes_with_the_same_cores_shares_one_map_cpu_list_and_lists_each_rank_s_node():
    r = render("srun", placement(("n1", [0, 1]), ("n2", [0, 1]), ("n3", [0, 1])), 1, PROBE)
    assert r.argv == (*SRUN, "-N", "3", "-n", "6", "-m", "arbitrary", "--mpi=pmi2", "--kill-on-bad-exit=1",
                      "--cpu-bind=verbose,map_cpu:0,1", *PROBE)
    assert r.files == {"hostfile": "n1\nn1\nn2\nn2\nn3\nn3\n"}
    assert "--exact" not in r.argv


def srun_wrapper(*nodes: str) -> str:
    """srun-ranks.sh for these per-node lines (one line a node, by rank ranges)."""
    return "\n".join([
        "# fleet: starts each srun rank on its own cores (and its node's GPUs); written for this launch",
        'r=${SLURM_PROCID:?"SLURM_PROCID is not set: not started by srun"}', *nodes,
        'else echo "fleet: rank $r was not placed" >&2; exit 127', "fi", "i=0; c=",
        'for x in $cores; do [ "$i" -eq "$l" ] && c=$x && break; i=$((i + 1)); done',
        '[ -n "$c" ] || { echo "fleet: rank $r was not placed" >&2; exit 127; }',
        'exec taskset -c "$c" "$@"', ""])


def test_srun_with_uneven_ranks_per_node_starts_each_rank_through_a_wrapper_given_the_command_as_its_arguments():
    r = render("srun", placement(("n1", [0, 1]), ("n2", [0])), 1, PROBE)
    assert r.argv == (*SRUN, "-N", "2", "-n", "3", "-m", "arbitrary", "--mpi=pmi2", "--kill-on-bad-exit=1",
                      "--cpu-bind=none", *EXEC_SHELL, "{fleet}/srun-ranks.sh", *PROBE)
    assert "--multi-prog" not in r.argv
    assert r.files == {
        "hostfile": "n1\nn1\nn2\n",
        "srun-ranks.sh": srun_wrapper("""if [ "$r" -lt 2 ]; then l=$((r - 0)); cores='0 1'  # n1""",
                                      """elif [ "$r" -lt 3 ]; then l=$((r - 2)); cores='0'  # n2"""),
    }
    assert r.env == {"SLURM_HOSTFILE": "{fleet}/hostfile"}


def test_srun_with_different_cores_on_each_node_pins_every_rank_to_its_own_node_s_cores():
    r = render("srun", placement(("n1", [0, 1]), ("n2", [6, 7])), 1, PROBE)
    assert r.argv[-7:] == ("--mpi=pmi2", "--kill-on-bad-exit=1", "--cpu-bind=none", *EXEC_SHELL,
                           "{fleet}/srun-ranks.sh", *PROBE)[-7:]
    assert r.files["srun-ranks.sh"] == srun_wrapper(
        """if [ "$r" -lt 2 ]; then l=$((r - 0)); cores='0 1'  # n1""",
        """elif [ "$r" -lt 4 ]; then l=$((r - 2)); cores='6 7'  # n2""")
    assert r.files["hostfile"] == "n1\nn1\nn2\nn2\n"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 or not {0, 1} <= os.sched_getaffinity(0),
                    reason="needs cores 0 and 1")
def test_srun_s_rank_wrapper_runs_each_rank_on_its_cores_with_the_command_s_arguments_exactly(tmp_path):
    # The wrapper run as srun runs it (SLURM_PROCID per rank), without srun: what srun's
    # --multi-prog file broke (a quote, %t, a line break, 200 words) reaches the program.
    args = ["it's", "100%t", "%o", "a b", "", 'say "hi"', "$HOME", "*", "back\\slash", "line 1\nline 2",
            *map(str, range(200))]
    prog = [sys.executable, "-c", "import json, os, sys; json.dump([sys.argv[1:], sorted(os.sched_getaffinity(0))], "
            "open(os.environ['SLURM_PROCID'] + '.json', 'w'))", *args]
    r = render("srun", placement(("n1", [0, 1]), ("n2", [1])), 1, prog, fleet_dir=str(tmp_path))
    (tmp_path / "srun-ranks.sh").write_text(r.files["srun-ranks.sh"])
    start = r.argv.index("--cpu-bind=none") + 1
    for rank, cores in enumerate([[0], [1], [1]]):
        env = {**os.environ, "SLURM_PROCID": str(rank)}
        done = subprocess.run(r.argv[start:], cwd=tmp_path, env=env, timeout=30, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert json.loads((tmp_path / f"{rank}.json").read_text()) == [args, cores]
    unplaced = subprocess.run(r.argv[start:], cwd=tmp_path, env={**os.environ, "SLURM_PROCID": "3"}, timeout=30,
                              capture_output=True, text=True)
    assert unplaced.returncode == 127 and "rank 3 was not placed" in unplaced.stderr


def test_srun_with_threads_per_rank_binds_each_rank_with_a_mask_of_its_cores():
    r = render("srun", placement(("n1", [0, 1, 2, 3]), ("n2", [0, 1, 2, 3])), 2, PROBE)
    assert r.argv == (*SRUN, "-N", "2", "-n", "4", "-m", "arbitrary", "--mpi=pmi2", "--kill-on-bad-exit=1",
                      "--cpu-bind=verbose,mask_cpu:0x3,0xc", *PROBE)
    assert r.files == {"hostfile": "n1\nn1\nn2\nn2\n"}


@pytest.mark.parametrize("threads", [1, 2])
def test_srun_never_asks_cpus_per_task_or_exact_which_would_let_slurm_pick_other_cores_than_the_binding(threads):
    # -c implies --exact: the step then holds only the CPUs Slurm picks (the lowest free
    # ones) and refuses a binding to others ("CPU binding outside of job step allocation").
    for p in (placement(("n1", [2, 3])), placement(("n1", [2, 3]), ("n2", [0, 1]))):
        argv = render("srun", p, threads, PROBE).argv
        assert not {"-c", "--exact", "--exclusive"} & set(argv), argv
        assert not any(a.startswith(("--cpus-per-task", "--exact", "-c")) for a in argv), argv


def test_srun_ends_the_whole_step_when_a_rank_fails_unless_the_profile_s_flags_say_otherwise():
    # Slurm's default (KillOnBadExit=0) leaves the other ranks waiting in their next
    # collective until the step's timeout: as Hydra does, a failed rank ends the step.
    for p in (placement(("n1", [0, 1])), placement(("n1", [0, 1]), ("n2", [0]))):
        assert render("srun", p, 1, PROBE).argv.count("--kill-on-bad-exit=1") == 1
    for own in ("--kill-on-bad-exit=0", "--kill-on-bad-exit", "-K", "-K0", "-K1"):
        argv = render("srun", placement(("n1", [0, 1])), 1, PROBE, ("--label", own)).argv
        assert "--kill-on-bad-exit=1" not in argv and argv.count(own) == 1, argv
    # (an option that only begins with the same letters is not it)
    assert "--kill-on-bad-exit=1" in render("srun", placement(("n1", [0])), 1, PROBE, ("--kill-command",)).argv


def test_srun_masks_are_exact_for_high_and_non_adjacent_core_ids():
    # Cores 0 and 52 held back (Aurora-like): a rank may sit on 51 and 53.
    r = render("srun", placement(("x1", [51, 53, 100, 101])), 2, PROBE)
    assert "--cpu-bind=verbose,mask_cpu:0x28000000000000,0x30000000000000000000000000" in r.argv
    assert (1 << 51) | (1 << 53) == 0x28000000000000
    assert (1 << 100) | (1 << 101) == 0x30000000000000000000000000


def test_srun_with_threads_and_different_cores_per_node_tasksets_each_rank_to_its_core_group():
    r = render("srun", placement(("n1", [0, 1, 2, 3]), ("n2", [4, 5])), 2, ["model", "--in", "a b"])
    assert r.argv[4:6] == ("-n", "3")
    assert r.argv[-5:] == (*EXEC_SHELL, "{fleet}/srun-ranks.sh", "model", "--in", "a b")[-5:]
    assert r.files["srun-ranks.sh"] == srun_wrapper(
        """if [ "$r" -lt 2 ]; then l=$((r - 0)); cores='0,1 2,3'  # n1""",
        """elif [ "$r" -lt 3 ]; then l=$((r - 2)); cores='4,5'  # n2""")


def test_srun_runs_a_shell_string_command_through_sh_and_keeps_profile_flags_before_the_command():
    r = render("srun", placement(("n1", [0])), 1, "echo $X > out", ("--gpu-bind=none", "--label"))
    assert r.argv == (*SRUN, "-N", "1", "-n", "1", "-m", "arbitrary", "--mpi=pmi2", "--kill-on-bad-exit=1",
                      "--cpu-bind=verbose,map_cpu:0", "--gpu-bind=none", "--label", "/bin/sh", "-c", "echo $X > out")
    r = render("srun", placement(("n1", [0]), ("n2", [1])), 1, "echo $X > out", ("--label",))
    assert r.argv[-7:] == ("--label", *EXEC_SHELL, "{fleet}/srun-ranks.sh", "/bin/sh", "-c", "echo $X > out")[-7:]


def test_gpus_in_a_placement_do_not_change_the_core_binding_an_mpi_launcher_renders():
    without = placement(("n1", [0, 1]), ("n2", [0, 1]))
    with_gpus = placement(("n1", [0, 1], [0, 1]), ("n2", [0, 1], [0, 1]))
    for kind in ("srun", "pals", "hydra"):
        assert render(kind, with_gpus, 1, PROBE) == render(kind, without, 1, PROBE), kind


# --- PALS mpiexec ------------------------------------------------------------------------------

def test_pals_on_one_node_gives_hosts_ppn_depth_and_a_cpu_bind_list():
    r = render("pals", placement(("x1", [1, 2, 3])), 1, PROBE)
    assert r.argv == ("mpiexec", "-n", "3", "--ppn", "3", "--hosts", "x1", "--depth", "1",
                      "--cpu-bind", "list:1:2:3", *PROBE)
    assert r.env == {} and r.files == {}


def test_pals_on_several_nodes_with_the_same_cores_uses_one_list_for_every_node():
    r = render("pals", placement(("x1", [1, 2]), ("x2", [1, 2])), 1, PROBE)
    assert r.argv == ("mpiexec", "-n", "4", "--ppn", "2", "--hosts", "x1,x2", "--depth", "1",
                      "--cpu-bind", "list:1:2", *PROBE)


def test_pals_with_threads_per_rank_sets_depth_and_comma_separated_cores_per_rank():
    r = render("pals", placement(("x1", [1, 2, 3, 4]), ("x2", [1, 2, 3, 4])), 2, PROBE, ("--no-transfer",))
    assert r.argv == ("mpiexec", "-n", "4", "--ppn", "2", "--hosts", "x1,x2", "--depth", "2",
                      "--cpu-bind", "list:1,2:3,4", "--no-transfer", *PROBE)


# (uneven placements: tests/site/test_pals.py)


# --- Hydra mpiexec -----------------------------------------------------------------------------

def test_hydra_on_one_node_binds_with_a_user_list():
    # (Every Hydra rank starts through RANK, `sh -c 'exec "$@" </dev/null'`: see
    # tests/site/test_mpi_local.py, a rank other than 0 reading stdin.)
    r = render("hydra", placement(("ws", [0, 1])), 1, PROBE)
    assert r.argv == ("mpiexec", "-hosts", "ws:2", "-n", "2", "-bind-to", "user:0,1", *RANK, *PROBE)


def test_hydra_on_several_nodes_with_the_same_cores_gives_ranks_per_host_and_one_user_list():
    r = render("hydra", placement(("h1", [0, 1]), ("h2", [0, 1])), 1, PROBE, ("-v",))
    assert r.argv == ("mpiexec", "-hosts", "h1:2,h2:2", "-n", "4", "-bind-to", "user:0,1", "-v", *RANK, *PROBE)


def test_hydra_with_threads_per_rank_joins_each_rank_s_cores_with_plus():
    r = render("hydra", placement(("h1", [0, 1, 2, 3]), ("h2", [0, 1, 2, 3])), 2, PROBE)
    assert r.argv == ("mpiexec", "-hosts", "h1:2,h2:2", "-n", "4", "-bind-to", "user:0+1,2+3", *RANK, *PROBE)


def test_hydra_with_different_cores_per_node_starts_every_rank_through_taskset_in_mpmd_form():
    r = render("hydra", placement(("h1", [0, 1, 2, 3]), ("h2", [4, 5])), 2, PROBE)
    assert r.argv == ("mpiexec", "-hosts", "h1:2,h2:1",
                      "-n", "1", "taskset", "-c", "0,1", *RANK, *PROBE, ":",
                      "-n", "1", "taskset", "-c", "2,3", *RANK, *PROBE, ":",
                      "-n", "1", "taskset", "-c", "4,5", *RANK, *PROBE)
    r = render("hydra", placement(("h1", [0, 1]), ("h2", [0])), 1, PROBE)
    assert r.argv == ("mpiexec", "-hosts", "h1:2,h2:1",
                      "-n", "1", "taskset", "-c", "0", *RANK, *PROBE, ":",
                      "-n", "1", "taskset", "-c", "1", *RANK, *PROBE, ":",
                      "-n", "1", "taskset", "-c", "0", *RANK, *PROBE)


def test_hydra_for_pretend_nodes_on_one_host_binds_every_rank_in_one_local_user_list():
    r = render("hydra", placement(("node1", [0]), ("node2", [1])), 1, PROBE, one_host=True)
    assert r.argv == ("mpiexec", "-n", "2", "-bind-to", "user:0,1", *RANK, *PROBE)
    r = render("hydra", placement(("node1", [0, 1]), ("node2", [2, 3])), 2, PROBE, one_host=True)
    assert r.argv == ("mpiexec", "-n", "2", "-bind-to", "user:0+1,2+3", *RANK, *PROBE)


# --- layout and errors -------------------------------------------------------------------------

def test_ranks_are_laid_out_node_by_node_each_on_threads_consecutive_cores_of_its_node():
    assert layout(placement(("a", [4, 5, 6, 7]), ("b", [0, 1])), 2) == [
        ("a", (4, 5)), ("a", (6, 7)), ("b", (0, 1))]
    assert layout(placement(("a", [3]), ("b", [9])), 1) == [("a", (3,)), ("b", (9,))]


@pytest.mark.parametrize("kind", ["srun", "pals", "hydra"])
def test_cores_that_are_not_a_multiple_of_the_threads_per_rank_are_refused_naming_the_node(kind):
    with pytest.raises(RenderError, match=r"3 cores on n2 is not a multiple of 2 threads per rank"):
        render(kind, placement(("n1", [0, 1]), ("n2", [0, 1, 2])), 2, PROBE)


def test_an_unknown_mpi_launcher_is_refused_by_name():
    with pytest.raises(RenderError, match="unknown MPI launcher 'aprun'"):
        render("aprun", placement(("n1", [0])), 1, PROBE)


# --- the coordinator's side of an MPI step -----------------------------------------------------

def _mpi_spec(tmp_path: Path, **fields):
    table = {"id": "sim", "mpi": True, "command": ["model", "-i", "in.nml"], **fields}
    return parse_suite({"steps": [table]}, tmp_path / "suite.toml").steps[0]


def test_the_coordinator_writes_the_launcher_s_files_into_the_step_s_fleet_directory_and_fills_in_their_paths(tmp_path):
    spec = _mpi_spec(tmp_path, ranks=3)
    d = Start("sim", 1, placement(("node1", [0, 1]), ("node2", [1])))
    env = {"FLEET_STEP": "sim"}
    argv, cores = launching.render_mpi(profiles.load("slurm"), spec, d, tmp_path, list(spec.command), env)
    fleet_dir = tmp_path / "steps" / "sim" / ".fleet"
    assert argv == ["srun", "--overlap", "-N", "2", "-n", "3", "-m", "arbitrary", "--mpi=pmi2", "--kill-on-bad-exit=1",
                    "--cpu-bind=none", *EXEC_SHELL, f"{fleet_dir}/srun-ranks.sh", "model", "-i", "in.nml"]
    assert (fleet_dir / "hostfile").read_text() == "node1\nnode1\nnode2\n"
    assert (fleet_dir / "srun-ranks.sh").read_text() == srun_wrapper(
        """if [ "$r" -lt 2 ]; then l=$((r - 0)); cores='0 1'  # node1""",
        """elif [ "$r" -lt 3 ]; then l=$((r - 2)); cores='1'  # node2""")
    assert env == {"FLEET_STEP": "sim", "SLURM_HOSTFILE": f"{fleet_dir}/hostfile",
                   "FLEET_RANKS": "node1:0;node1:1;node2:1", "CUDA_VISIBLE_DEVICES": ""}
    # On a real allocation the launcher process runs on the first node's cores only.
    assert cores == [0, 1]


def test_the_launcher_s_files_are_not_group_writable_under_a_umask_of_002(tmp_path):
    # A group member could have changed which command the ranks run (srun-ranks.sh).
    spec = _mpi_spec(tmp_path, ranks=3)
    d = Start("sim", 1, placement(("node1", [0, 1]), ("node2", [1])))
    old = os.umask(0o002)
    try:
        launching.render_mpi(profiles.load("slurm"), spec, d, tmp_path, list(spec.command), {})
    finally:
        os.umask(old)
    fleet_dir = tmp_path / "steps" / "sim" / ".fleet"
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in fleet_dir.iterdir()}
    assert modes == {"hostfile": 0o644, "srun-ranks.sh": 0o644}


def test_the_coordinator_gives_a_local_fleet_s_hydra_launcher_every_placed_core_of_the_pretend_nodes(tmp_path):
    spec = _mpi_spec(tmp_path, ranks=1, threads=2)
    d = Start("sim", 1, placement(("node1", [0, 1])))
    env: dict = {}
    local = profiles.load("local")
    argv, cores = launching.render_mpi(local, spec, d, tmp_path, list(spec.command), env)
    assert argv == ["mpiexec", "-n", "1", "-bind-to", "user:0+1", *RANK, "model", "-i", "in.nml"]
    assert env == {"FLEET_RANKS": "node1:0,1", "CUDA_VISIBLE_DEVICES": ""}
    assert cores == [0, 1]
    spec = _mpi_spec(tmp_path, ranks=2)
    d = Start("sim", 1, placement(("node1", [0]), ("node2", [1])))
    argv, cores = launching.render_mpi(local, spec, d, tmp_path, list(spec.command), {})
    assert argv == ["mpiexec", "-n", "2", "-bind-to", "user:0,1", *RANK, "model", "-i", "in.nml"]
    assert cores == [0, 1]


def test_an_mpi_step_s_ranks_see_their_node_s_gpus_through_the_machine_s_variable_not_the_launcher_s(tmp_path):
    spec = _mpi_spec(tmp_path, ranks=4, gpus=4)
    d = Start("sim", 1, placement(("x1", [1, 2], [0, 1]), ("x2", [1, 2], [0, 1])))
    msg = launching.launch(profiles.load("aurora"), spec, d, tmp_path / "run")
    assert d.placement[0].node == "x1"  # the agent the launch goes to
    assert msg.kind == "command"
    assert msg.command == ["mpiexec", "-n", "4", "--ppn", "2", "--hosts", "x1,x2", "--depth", "1",
                           "--cpu-bind", "list:1:2", "model", "-i", "in.nml"]
    assert msg.cores == [1, 2]
    # Both nodes hold GPUs 0 and 1 for the step: one value for every rank, passed by the launcher.
    assert msg.gpu_vars == [] and msg.env["ZE_AFFINITY_MASK"] == "0,1"
    assert msg.env["FLEET_RANKS"] == "x1:1;x1:2;x2:1;x2:2"
    assert msg.placement == [["x1", [1, 2], [0, 1], 0], ["x2", [1, 2], [0, 1], 0]]
    start = E.parse(json.loads(json.dumps(launching.start_record(time.time(), d).to_dict())))
    assert start.placement == [dict(node="x1", cores=[1, 2], gpus=[0, 1], memory=0),
                               dict(node="x2", cores=[1, 2], gpus=[0, 1], memory=0)]
    assert start.gpus == [0, 1, 0, 1] and start.nodes == ["x1", "x2"]


def test_ranks_on_a_second_node_whose_gpus_differ_are_given_that_node_s_gpu_ids(tmp_path):
    msg = launching.launch(profiles.load("perlmutter-gpu"), _mpi_spec(tmp_path, ranks=4, gpus=4),
                           Start("sim", 1, placement(("n1", [0, 1], [0, 1]), ("n2", [0, 1], [2, 3]))),
                           tmp_path / "run")
    fleet_dir = tmp_path / "run" / "steps" / "sim" / ".fleet"
    given = " ".join([*msg.command, *msg.env.values(), ",".join(map(str, msg.gpus)),
                      *(p.read_text() for p in fleet_dir.iterdir())])
    assert "2,3" in given, given
    script = (fleet_dir / "srun-ranks.sh").read_text().splitlines()
    assert script[2] == """if [ "$r" -lt 2 ]; then l=$((r - 0)); cores='0 1'; export CUDA_VISIBLE_DEVICES=0,1  # n1"""
    assert script[3] == """elif [ "$r" -lt 4 ]; then l=$((r - 2)); cores='0 1'; export CUDA_VISIBLE_DEVICES=2,3  # n2"""
    assert msg.command[-4:] == [f"{fleet_dir}/srun-ranks.sh", "model", "-i", "in.nml"]


# --- starting the agents -----------------------------------------------------------------------

def test_the_agents_srun_is_an_overlapping_step_with_one_task_per_node_counted_explicitly_and_no_exact():
    argv = SlurmLauncher(Path("/r"), ("nid001", "nid002", "nid007")).argv(EP, ("numpy", "scipy.linalg"))
    assert argv == ["srun", "--overlap", "--mpi=none", "--cpu-bind=none", "--kill-on-bad-exit=0", "--export=ALL",
                    "-N", "3", "-n", "3", "--ntasks-per-node=1",
                    *AGENT, "--connect", EP, "--preload", "numpy,scipy.linalg",
                    "--hold-back", "", "--node-from", "slurm"]
    assert "--exact" not in argv and not any(a.startswith("--exact") for a in argv)


def test_the_agents_srun_puts_the_profile_s_agent_flags_before_the_agent_and_passes_held_back_cores():
    argv = SlurmLauncher(Path("/r"), ("a", "b"), (0, 52), ("--network=single", "-p", "gpu")).argv(EP, ())
    i = argv.index(sys.executable)
    assert argv[:i] == ["srun", "--overlap", "--mpi=none", "--cpu-bind=none", "--kill-on-bad-exit=0", "--export=ALL",
                        "-N", "2", "-n", "2", "--ntasks-per-node=1", "--network=single", "-p", "gpu"]
    assert argv[i:] == [*AGENT, "--connect", EP, "--preload", "",
                        "--hold-back", "0,52", "--node-from", "slurm"]


def test_the_agents_pals_mpiexec_runs_one_rank_per_node_on_the_node_file_s_hosts_and_names_nodes_by_rank():
    argv = PalsLauncher(Path("/r"), ("x1000c0s0b0n0", "x1000c0s1b0n0"), (0, 52), ("--no-transfer",)).argv(EP, ("numpy",))
    assert argv == ["mpiexec", "-n", "2", "--ppn", "1", "--hosts", "x1000c0s0b0n0,x1000c0s1b0n0",
                    "--depth", "1", "--cpu-bind", "none", "--no-transfer",
                    *AGENT, "--connect", EP, "--preload", "numpy",
                    "--hold-back", "0,52", "--node-from", "rank", "--node-list", "x1000c0s0b0n0,x1000c0s1b0n0"]


def test_agent_argv_carries_no_keys_only_the_endpoint_preload_and_held_back_cores():
    argv = agent_argv(EP, ("a", "b"), (3,), "--node", "n1")
    assert argv == [*AGENT, "--connect", EP, "--preload", "a,b",
                    "--hold-back", "3", "--node", "n1"]


def test_launcher_for_follows_the_profile_and_its_held_back_cores_reach_the_agents(tmp_path):
    nodes = ("x1", "x2")
    aurora = launcher_for(profiles.load("aurora"), tmp_path, nodes)
    assert isinstance(aurora, PalsLauncher)
    argv = aurora.argv(EP, ())
    assert argv[argv.index("--hold-back") + 1] == "0,52"
    assert argv[:7] == ["mpiexec", "-n", "2", "--ppn", "1", "--hosts", "x1,x2"]
    slurm = launcher_for(profiles.load("slurm"), tmp_path, nodes)
    assert isinstance(slurm, SlurmLauncher) and slurm.nodes == nodes
    assert slurm.argv(EP, ())[slurm.argv(EP, ()).index("--hold-back") + 1] == ""
    assert argv[argv.index("--gpu-var"):][:4] == ["--gpu-var", "ZE_AFFINITY_MASK", "--gpus-per-node", "12"]
    local = launcher_for(profiles.load("local"), tmp_path)
    assert isinstance(local, LocalLauncher) and local.hold_back == ()
    assert (local.gpu_var, local.gpus_per_node) == ("CUDA_VISIBLE_DEVICES", 0)
    held = Profile("held", "", launcher="local", held_back_cores=(0,))
    assert launcher_for(held, tmp_path).hold_back == (0,)
    with pytest.raises(ValueError, match="unknown launcher 'aprun'"):
        launcher_for(Profile("x", "", launcher="aprun"), tmp_path)


class _Recorder:
    """Stands in for subprocess.Popen: records argv and keyword arguments."""
    calls: list = []

    def __init__(self, argv, **kw):
        self.argv, self.kw, self.pid, self.returncode = argv, kw, 0, None
        _Recorder.calls.append(self)

    def poll(self):
        return None


@pytest.fixture
def recorded(monkeypatch):
    _Recorder.calls = []
    monkeypatch.setattr(launch.subprocess, "Popen", _Recorder)
    monkeypatch.setattr("fleet.node.probe.usable_cores", lambda: (0, 1, 2, 3, 4, 5, 6, 7))
    monkeypatch.setattr("fleet.node.probe.node_memory", lambda: 8_000)
    return _Recorder.calls


def _opt(argv, flag):
    return argv[argv.index(flag) + 1]


def test_local_agents_split_this_machine_s_cores_into_disjoint_pretend_nodes(tmp_path, recorded):
    LocalLauncher(tmp_path).start(EP, 3, ("numpy",), {"FLEET_CURVE": "k"})
    assert [_opt(c.argv, "--node") for c in recorded] == ["node1", "node2", "node3"]
    assert [_opt(c.argv, "--cores") for c in recorded] == ["0,1,2", "3,4,5", "6,7"]
    assert {_opt(c.argv, "--memory") for c in recorded} == {"2666"}
    assert all(c.kw["start_new_session"] and c.kw["env"]["FLEET_CURVE"] == "k" for c in recorded)
    assert all("k" not in c.argv for c in recorded)


def test_local_agents_each_get_their_own_share_of_the_gpus_the_profile_s_variable_lists(tmp_path, recorded, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4")
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "6,7")
    LocalLauncher(tmp_path, gpu_var="HIP_VISIBLE_DEVICES").start(EP, 3, (), {})
    assert [c.argv[c.argv.index("--memory") + 2] for c in recorded] == ["--gpus=6", "--gpus=7", "--gpus="]
    recorded.clear()
    LocalLauncher(tmp_path, gpu_var="CUDA_VISIBLE_DEVICES").start(EP, 2, (), {})
    assert [c.argv[c.argv.index("--memory") + 2] for c in recorded] == ["--gpus=0,1,2", "--gpus=3,4"]


def test_local_agents_never_get_the_profile_s_held_back_cores(tmp_path, recorded):
    LocalLauncher(tmp_path, hold_back=(0, 4)).start(EP, 2, (), {})
    assert [_opt(c.argv, "--cores") for c in recorded] == ["1,2,3", "5,6,7"]


def test_more_pretend_nodes_than_cores_left_after_holding_back_is_refused(tmp_path, recorded):
    with pytest.raises(ValueError, match=r"cannot split 2 core\(s\) into 3 pretend node\(s\)"):
        LocalLauncher(tmp_path, hold_back=(0, 1, 2, 3, 4, 5)).start(EP, 3, (), {})
    assert recorded == []


def test_split_cores_gives_contiguous_groups_as_even_as_possible():
    assert split_cores([1, 2, 3, 5, 8], 2) == [[1, 2, 3], [5, 8]]
    assert split_cores([0, 1], 2) == [[0], [1]]
    with pytest.raises(ValueError):
        split_cores([0, 1], 0)


# --- machine profiles --------------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(AGENTS_DIR.glob("*.toml")), ids=lambda p: p.name)
def test_every_profile_in_agents_loads_with_known_launchers(path, monkeypatch):
    monkeypatch.delenv("FLEET_MACHINES", raising=False)
    p = profiles.load(path.stem)
    assert p.name == path.stem and p.path == str(path)
    assert p.launcher in profiles.LAUNCHERS and p.mpi in profiles.MPI_LAUNCHERS
    assert p.description


def test_the_generic_and_named_profiles_say_what_their_machines_need(monkeypatch):
    monkeypatch.delenv("FLEET_MACHINES", raising=False)
    assert {"local", "slurm", "pals", "aurora", "perlmutter-gpu"} <= set(profiles.available())
    local, slurm, pals = profiles.load("local"), profiles.load("slurm"), profiles.load("pals")
    assert (local.launcher, local.mpi) == ("local", "hydra")
    assert (slurm.launcher, slurm.mpi) == ("slurm", "srun")
    assert (pals.launcher, pals.mpi) == ("pals", "pals")
    aurora = profiles.load("aurora")
    assert (aurora.launcher, aurora.mpi, aurora.gpu_var, aurora.held_back_cores) == ("pals", "pals", "ZE_AFFINITY_MASK", (0, 52))
    assert (aurora.gpus_per_node, local.gpus_per_node, slurm.gpus_per_node) == (12, 0, 0)
    pm = profiles.load("perlmutter-gpu")
    assert (pm.launcher, pm.mpi, pm.gpu_var, pm.mpi_flags) == ("slurm", "srun", "CUDA_VISIBLE_DEVICES", ("--gpu-bind=none",))


def test_an_unknown_machine_is_an_error_naming_it_and_the_known_ones(monkeypatch):
    monkeypatch.delenv("FLEET_MACHINES", raising=False)
    with pytest.raises(ProfileError) as e:
        profiles.load("frontier")
    msg = str(e.value)
    assert "unknown machine 'frontier'" in msg
    assert "known machines: aurora, local, pals, perlmutter-gpu, slurm" in msg
    assert str(AGENTS_DIR) in msg


def machines(tmp_path: Path, monkeypatch, **files: str) -> Path:
    d = tmp_path / "machines"
    d.mkdir(exist_ok=True)
    for name, text in files.items():
        (d / f"{name}.toml").write_text(textwrap.dedent(text))
    monkeypatch.setenv("FLEET_MACHINES", str(d))
    return d


def test_a_profile_with_an_unknown_field_is_an_error_naming_the_file_and_the_field(tmp_path, monkeypatch):
    d = machines(tmp_path, monkeypatch, typo="""
        [machine]
        launcher = "slurm"
        held_back_core = [0]
        """)
    with pytest.raises(ProfileError) as e:
        profiles.load("typo")
    assert str(e.value) == (f"{d / 'typo.toml'}: field 'machine.held_back_core': unknown field"
                            " (did you mean 'held_back_cores'?)")


def test_a_profile_with_a_bad_launcher_is_an_error_naming_the_file_field_and_choices(tmp_path, monkeypatch):
    d = machines(tmp_path, monkeypatch, bad="""
        [machine]
        launcher = "aprun"
        mpi = "srun"
        """)
    with pytest.raises(ProfileError) as e:
        profiles.load("bad")
    assert str(e.value) == (f"{d / 'bad.toml'}: field 'machine.launcher': expected one of "
                            "'local', 'slurm', 'pals', got 'aprun'")


@pytest.mark.parametrize("body, field, says", [
    ('mpi = "mpirun"', "machine.mpi", "expected one of 'srun', 'pals', 'hydra'"),
    ('gpu_var = "GPU"', "machine.gpu_var", "expected one of"),
    ('held_back_cores = [0, -1]', "machine.held_back_cores", "expected a list of core ids"),
    ('held_back_cores = "0,52"', "machine.held_back_cores", "expected a list of core ids"),
    ('agent_flags = "--exclusive"', "machine.agent_flags", "expected a list of strings"),
    ('mpi_flags = [1]', "machine.mpi_flags", "expected a list of strings"),
    ('description = 3', "machine.description", "expected a string"),
    ('advertise = ["hsn0"]', "machine.advertise", "expected a string"),
    ('gpus_per_node = -1', "machine.gpus_per_node", "expected a count of GPUs (0 to 4096)"),
    ('gpus_per_node = "6"', "machine.gpus_per_node", "expected a count of GPUs"),
    ('gpus_per_node = true', "machine.gpus_per_node", "expected a count of GPUs"),
    ('gpus_per_node = 100000', "machine.gpus_per_node", "expected a count of GPUs"),
])
def test_each_malformed_profile_field_is_named_with_its_file(tmp_path, monkeypatch, body, field, says):
    d = machines(tmp_path, monkeypatch, m=f'[machine]\nlauncher = "slurm"\n{body}\n')
    with pytest.raises(ProfileError) as e:
        profiles.load("m")
    assert str(e.value).startswith(f"{d / 'm.toml'}: field '{field}': ")
    assert says in str(e.value)


def test_a_profile_without_a_launcher_is_an_error_naming_the_file_not_a_local_fleet(tmp_path, monkeypatch):
    # (it was a local fleet: in a batch job of two nodes, the fleet ran on the first alone, unsaid)
    d = machines(tmp_path, monkeypatch, nolauncher="""
        [machine]
        mpi = "srun"
        gpu_var = "CUDA_VISIBLE_DEVICES"
        """)
    with pytest.raises(ProfileError) as e:
        profiles.load("nolauncher")
    assert str(e.value) == (f"{d / 'nolauncher.toml'}: field 'machine.launcher': missing; say how agents start: "
                            "'local', 'slurm', 'pals' (before 2026-12-07 it meant 'local')")
    assert profiles.load("local").launcher == "local"  # (the shipped one, and the built-in one, say it)


def test_a_profile_that_is_not_toml_or_has_no_machine_table_is_an_error_naming_the_file(tmp_path, monkeypatch):
    d = machines(tmp_path, monkeypatch, broken="[machine\n", other='[host]\nlauncher = "local"\n')
    with pytest.raises(ProfileError, match=rf"^{d / 'broken.toml'}: not valid TOML"):
        profiles.load("broken")
    with pytest.raises(ProfileError, match=rf"^{d / 'other.toml'}: expected exactly one \[machine\] table, found \['host'\]"):
        profiles.load("other")


def test_a_profile_in_fleet_machines_wins_over_the_one_of_the_same_name_in_agents(tmp_path, monkeypatch):
    d = machines(tmp_path, monkeypatch, slurm="""
        [machine]
        launcher = "slurm"
        mpi = "srun"
        held_back_cores = [1]
        """)
    p = profiles.load("slurm")
    assert p.path == str(d / "slurm.toml") and p.held_back_cores == (1,)
    assert profiles.available()["aurora"] == AGENTS_DIR / "aurora.toml"


def test_fleet_up_with_an_unknown_machine_says_so_and_starts_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("FLEET_MACHINES", raising=False)
    r = CliRunner().invoke(cli, ["up", "--machine", "frontier", "--run-dir", str(tmp_path / "run")])
    assert r.exit_code == 2  # bad input, as every refusal before anything starts
    assert "unknown machine 'frontier'" in r.output and "known machines:" in r.output
    assert not (tmp_path / "run").exists()


def test_fleet_up_with_a_malformed_profile_names_the_file_and_field_and_starts_nothing(tmp_path, monkeypatch):
    d = machines(tmp_path, monkeypatch, site="""
        [machine]
        launcher = "slurm"
        cores_per_node = 64
        """)
    r = CliRunner().invoke(cli, ["up", "--machine", "site", "--run-dir", str(tmp_path / "run")])
    assert r.exit_code == 2
    assert f"{d / 'site.toml'}: field 'machine.cores_per_node': unknown field" in r.output
    assert not (tmp_path / "run").exists()


def test_the_coordinator_refuses_an_unknown_machine_before_binding_or_starting_anything(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("FLEET_MACHINES", raising=False)
    called = []
    monkeypatch.setattr(coordinator_mod, "Coordinator", lambda *a, **k: called.append(a))
    assert coordinator_mod.main(["--run-dir", str(tmp_path / "run"), "--machine", "frontier"]) == 2
    assert called == []
    assert "unknown machine 'frontier'" in caplog.text


@pytest.mark.parametrize("env, name", [
    ({}, "local"),
    ({"SLURM_JOB_ID": "17"}, "slurm"),
    ({"PBS_JOBID": "9.pbs01"}, "pals"),
    ({"SLURM_JOB_ID": "17", "PBS_JOBID": "9"}, "slurm"),
    ({"FLEET_MACHINE": "aurora", "PBS_JOBID": "9"}, "aurora"),
    ({"FLEET_MACHINE": "perlmutter-gpu", "SLURM_JOB_ID": "17"}, "perlmutter-gpu"),
    ({"SLURM_JOB_ID": "", "PBS_JOBID": ""}, "local"),
])
def test_detect_picks_the_profile_from_the_environment(env, name):
    assert profiles.detect(env) == name


# --- what a launcher step leaks into an agent --------------------------------------------------

# Captured in an agent-shaped step (srun --overlap --mpi=none --cpu-bind=none -N 2 -n 2
# --ntasks-per-node=1) of a `sbatch -N 2 --ntasks-per-node=2` job, Slurm 22.05.
SLURM_STEP_ONLY = [
    "SLURM_CPUS_ON_NODE", "SLURM_CPU_BIND", "SLURM_CPU_BIND_LIST", "SLURM_CPU_BIND_TYPE",
    "SLURM_CPU_BIND_VERBOSE", "SLURM_DISTRIBUTION", "SLURM_GTIDS", "SLURM_LAUNCH_NODE_IPADDR",
    "SLURM_LOCALID", "SLURM_NNODES", "SLURM_NODEID", "SLURM_NPROCS", "SLURM_NTASKS",
    "SLURM_NTASKS_PER_NODE", "SLURM_PRIO_PROCESS", "SLURM_PROCID", "SLURM_SRUN_COMM_HOST",
    "SLURM_SRUN_COMM_PORT", "SLURM_STEPID", "SLURM_STEP_ID", "SLURM_STEP_LAUNCHER_PORT",
    "SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE", "SLURM_TASK_PID", "SLURM_TOPOLOGY_ADDR", "SLURM_TOPOLOGY_ADDR_PATTERN",
    "SLURM_UMASK", "SLURM_MPI_TYPE", "SLURM_CPUS_PER_TASK",
]
OTHER_LAUNCHERS = [
    "PMI_RANK", "PMI_SIZE", "PMI_FD", "PMI_JOBID", "PMIX_RANK", "PMIX_NAMESPACE", "PALS_RANKID",
    "PALS_NODEID", "PALS_APID", "MPIR_CVAR_CH4_OFI_ENABLE", "HYDRA_CONTROL_FD", "OMPI_COMM_WORLD_RANK",
]
KEPT = [
    "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NUM_NODES",
    "SLURM_JOB_CPUS_PER_NODE", "SLURM_JOB_PARTITION", "SLURM_JOB_USER", "SLURM_CONF", "SLURMD_NODENAME",
    "SLURM_CLUSTER_NAME", "SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST", "SLURM_WORKING_CLUSTER",
    "PBS_JOBID", "PBS_NODEFILE", "PATH", "HOME", "CUDA_VISIBLE_DEVICES", "ZE_AFFINITY_MASK",
    "FLEET_RUN_DIR", "OMP_NUM_THREADS",
]


@pytest.mark.parametrize("name", SLURM_STEP_ONLY + OTHER_LAUNCHERS)
def test_a_variable_of_the_agents_own_launcher_step_is_leaked(name):
    assert is_leaked(name)


@pytest.mark.parametrize("name", KEPT)
def test_a_variable_of_the_job_or_the_user_is_kept(name):
    assert not is_leaked(name)


def test_the_agent_s_clean_environment_drops_exactly_the_leaked_variables():
    env = {n: "x" for n in SLURM_STEP_ONLY + OTHER_LAUNCHERS + KEPT}
    agent.clean_environment(env)
    assert sorted(env) == sorted(KEPT)


# --- how an agent names its node ---------------------------------------------------------------

def args(node="", node_from="hostname", node_list=""):
    return argparse.Namespace(node=node, node_from=node_from, node_list=node_list)


def test_an_agent_started_by_srun_names_its_node_by_slurmd_nodename_not_hostname():
    assert agent.node_name(args(node_from="slurm"), {"SLURMD_NODENAME": "node2"}) == "node2"
    assert agent.node_name(args(node_from="slurm"), {}) == socket.gethostname()


def test_an_agent_started_by_pals_names_its_node_by_its_rank_in_the_node_list():
    nodes = "x1,x2,x3"
    assert agent.node_name(args(node_from="rank", node_list=nodes), {"PALS_NODEID": "2"}) == "x3"
    assert agent.node_name(args(node_from="rank", node_list=nodes), {"PMI_RANK": "1"}) == "x2"
    assert agent.node_name(args(node_from="rank", node_list=nodes), {"PMIX_RANK": "0"}) == "x1"
    # PALS_NODEID comes first; a rank beyond the list or not a number is not trusted.
    assert agent.node_name(args(node_from="rank", node_list=nodes), {"PALS_NODEID": "0", "PMI_RANK": "2"}) == "x1"
    assert agent.node_name(args(node_from="rank", node_list=nodes), {"PALS_NODEID": "3"}) == socket.gethostname()
    assert agent.node_name(args(node_from="rank", node_list=nodes), {"PMI_RANK": "one"}) == socket.gethostname()


def test_an_explicit_node_name_wins_and_hostname_mode_ignores_launcher_variables():
    env = {"SLURMD_NODENAME": "node2", "PALS_NODEID": "1"}
    assert agent.node_name(args(node="node7", node_from="slurm"), env) == "node7"
    assert agent.node_name(args(node_from="hostname"), env) == socket.gethostname()
