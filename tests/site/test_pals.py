"""MPI steps and agents under HPE PALS mpiexec (Aurora, Polaris): the argv and files
rendered for each shape of placement, and real launches through a stand-in mpiexec
(tests/harness/stub_pals_mpiexec.py) that takes hosts, ranks per node, binding and
environment once per application, as PALS does, and runs every rank here."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from fleet.control import launching
from fleet.core.resources import Slot
from fleet.core.scheduler import Start
from fleet.core.suite import parse_suite
from fleet.site import profiles
from fleet.site.launch import PalsLauncher
from fleet.site.mpi import RenderError, render
from fleet.wire.execshell import EXEC_SHELL
from fleetharness import completed, wait_for

HARNESS = Path(__file__).resolve().parents[1] / "harness"
PROG = ["a.out", "-i", "in nml"]
WRAPPER_TAIL = ["esac", "i=0; c=",
                'for x in $cores; do [ "$i" -eq "$l" ] && c=$x && break; i=$((i + 1)); done',
                '[ -n "$c" ] || { echo "fleet: rank $r was not placed" >&2; exit 127; }',
                'exec taskset -c "$c" "$@"']


def placement(*slots) -> tuple[Slot, ...]:
    """placement(("n1", [0, 1]), ("n2", [0, 1], [0])): node, cores[, gpus]."""
    return tuple(Slot(s[0], tuple(s[1]), tuple(s[2]) if len(s) > 2 else ()) for s in slots)


def wrapper(ppn: int, *cases: str) -> str:
    return "\n".join([
        "# fleet: starts each PALS rank on its own node's cores (and GPUs); written for this launch",
        'r=${PALS_RANKID:?"PALS_RANKID is not set: not started by PALS mpiexec"}',
        f"n=$((r / {ppn})); l=$((r % {ppn}))", 'case "$n" in', *cases,
        '*) echo "fleet: rank $r was not placed" >&2; exit 127 ;;', *WRAPPER_TAIL, ""])


def one_application(argv) -> bool:
    """No MPMD section: PALS would give every section the first one's hosts and binding."""
    return ":" not in argv and argv.count("--hosts") == argv.count("--ppn") == argv.count("--cpu-bind") == 1


# --- what is rendered --------------------------------------------------------------------------

def test_pals_with_the_same_ranks_cores_and_gpus_on_every_node_binds_with_one_list_and_needs_no_wrapper():
    r = render("pals", placement(("x1", [1, 2], [0, 1]), ("x2", [1, 2], [0, 1])), 1, PROG,
               gpu_var="ZE_AFFINITY_MASK")
    assert r.argv == ("mpiexec", "-n", "4", "--ppn", "2", "--hosts", "x1,x2", "--depth", "1",
                      "--cpu-bind", "list:1:2", *PROG)
    assert r.env == {"ZE_AFFINITY_MASK": "0,1"} and r.files == {}


def test_pals_with_different_cores_per_node_is_one_unbound_application_whose_wrapper_pins_each_rank():
    r = render("pals", placement(("x1", [1, 2, 3, 4]), ("x2", [53, 54, 55, 56])), 2, PROG, ("--no-transfer",),
               fleet_dir="/run/steps/m/.fleet")
    assert r.argv == ("mpiexec", "-n", "4", "--ppn", "2", "--hosts", "x1,x2", "--depth", "2",
                      "--cpu-bind", "none", "--no-transfer", *EXEC_SHELL, "/run/steps/m/.fleet/pals-ranks.sh", *PROG)
    assert one_application(r.argv)
    assert r.files == {"pals-ranks.sh": wrapper(2, "0) cores='1,2 3,4' ;;  # x1", "1) cores='53,54 55,56' ;;  # x2")}
    assert r.env == {}


def test_a_pals_rank_started_through_the_wrapper_keeps_lmod_s_exported_module_function(tmp_path):
    # The wrapper run as PALS runs it (PALS_RANKID per rank), without PALS. Under /bin/sh
    # (dash on Debian) the environment's BASH_FUNC_module%% was dropped before the rank's
    # program ran: a step's script lost `module` (before 2026-12-07; Hydra's ranks were
    # fixed so earlier the same day, fleet.wire.execshell).
    prog = [sys.executable, "-c", "import json, os; json.dump(os.environ.get('BASH_FUNC_module%%'), "
            "open(os.environ['PALS_RANKID'] + '.json', 'w'))"]
    r = render("pals", placement(("x1", [0, 1]), ("x2", [1])), 1, prog, fleet_dir=str(tmp_path))
    (tmp_path / "pals-ranks.sh").write_text(r.files["pals-ranks.sh"])
    start = r.argv.index("none") + 1
    for rank in range(3):
        env = {**os.environ, "PALS_RANKID": str(rank), "BASH_FUNC_module%%": "() {  echo module \"$@\"\n}"}
        done = completed(list(r.argv[start:]), timeout=30, cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
        assert json.loads((tmp_path / f"{rank}.json").read_text()) == '() {  echo module "$@"\n}'


def test_pals_with_the_same_cores_but_different_gpus_per_node_gives_each_node_s_ranks_their_node_s_gpus():
    r = render("pals", placement(("nA", [0, 1], [0, 1]), ("nB", [0, 1], [2, 3])), 1, PROG,
               gpu_var="ZE_AFFINITY_MASK")
    assert r.argv == ("mpiexec", "-n", "4", "--ppn", "2", "--hosts", "nA,nB", "--depth", "1",
                      "--cpu-bind", "none", *EXEC_SHELL, "{fleet}/pals-ranks.sh", *PROG)
    assert "--env" not in r.argv and r.env == {}
    assert r.files == {"pals-ranks.sh": wrapper(2, "0) cores='0 1'; export ZE_AFFINITY_MASK=0,1 ;;  # nA",
                                                "1) cores='0 1'; export ZE_AFFINITY_MASK=2,3 ;;  # nB")}


def test_pals_with_fewer_ranks_on_one_node_lists_the_fuller_nodes_first_so_blocks_of_ppn_land_as_placed():
    r = render("pals", placement(("x1", [0]), ("x2", [0, 1]), ("x3", [4, 5])), 1, PROG)
    assert r.argv == ("mpiexec", "-n", "5", "--ppn", "2", "--hosts", "x2,x3,x1", "--depth", "1",
                      "--cpu-bind", "none", *EXEC_SHELL, "{fleet}/pals-ranks.sh", *PROG)
    assert r.files == {"pals-ranks.sh": wrapper(2, "0) cores='0 1' ;;  # x2", "1) cores='4 5' ;;  # x3",
                                                "2) cores='0' ;;  # x1")}


def test_pals_refuses_a_placement_with_two_nodes_short_of_the_others_saying_why():
    with pytest.raises(RenderError, match=r"blocks of --ppn over --hosts.*ranks per node 3 on x2, 2 on x1, "
                                          r"1 on x3: only the last node may hold fewer"):
        render("pals", placement(("x1", [0, 1]), ("x2", [0, 1, 2]), ("x3", [0])), 1, PROG)


def _spec(tmp_path: Path, **fields):
    table = {"id": "m3", "mpi": True, "command": ["/bin/true"], **fields}
    return parse_suite({"steps": [table]}, tmp_path / "suite.toml").steps[0]


def test_a_pals_step_that_cannot_be_placed_in_blocks_fails_to_launch_naming_the_step(tmp_path):
    d = Start("m3", 1, placement(("x1", [0, 1]), ("x2", [0, 1, 2]), ("x3", [0])))
    with pytest.raises(launching.CannotLaunch, match=r"cannot launch the MPI step m3: PALS mpiexec places ranks"):
        launching.launch(profiles.load("pals"), _spec(tmp_path, ranks=6), d, tmp_path / "run")


# --- real launches through the stand-in ---------------------------------------------------------

def stub_path(tmp_path: Path) -> str:
    """PATH with a stand-in `mpiexec` first."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "mpiexec").write_text(f'#!/bin/sh\nexec {sys.executable} {HARNESS / "stub_pals_mpiexec.py"} "$@"\n')
    (bindir / "mpiexec").chmod(0o755)
    return f"{bindir}{os.pathsep}{os.environ['PATH']}"


REPORT = ("import json, os, sys; r = os.environ['PALS_RANKID']; "
          "open(os.path.join(sys.argv[1], 'rank-' + r + '.json'), 'w').write(json.dumps("
          "{'node': int(os.environ['PALS_NODEID']), 'cores': sorted(os.sched_getaffinity(0)), "
          "'gpus': os.environ.get(sys.argv[2]), 'want': os.environ['FLEET_RANKS'].split(';')[int(r)]}))")

CORES = sorted(os.sched_getaffinity(0))
A, B = CORES[0], CORES[-1]
SHAPES = {
    "even": ("pals", placement(("nA", [A, B]), ("nB", [A, B]))),
    "uneven by cores": ("pals", placement(("nA", [A]), ("nB", [B]))),
    "uneven by gpus": ("aurora", placement(("nA", [A], [0, 1]), ("nB", [A], [2, 3]))),
    "uneven by count": ("aurora", placement(("nA", [B], [5]), ("nB", [A, B], [0, 1]))),
}


@pytest.mark.skipif(A == B, reason="needs two usable cores")
@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_rank_of_a_pals_launch_runs_on_its_node_s_placed_cores_and_sees_its_node_s_gpus(tmp_path, shape):
    kind, where = SHAPES[shape]
    profile = profiles.load(kind)
    ranks = sum(len(s.cores) for s in where)
    out = tmp_path / "out"
    out.mkdir()
    spec = _spec(tmp_path, ranks=ranks, command=[sys.executable, "-c", REPORT, str(out), profile.gpu_var])
    msg = launching.launch(profile, spec, Start("m3", 1, where), tmp_path / "run")
    r = completed(msg.command, timeout=60, cwd=tmp_path,
                  env={**os.environ, **msg.env, "PATH": stub_path(tmp_path), "STUB_LOG": str(tmp_path / "log")})
    assert r.returncode == 0, (msg.command, r.stderr.decode())
    hosts = msg.command[msg.command.index("--hosts") + 1].split(",")
    slots = {s.node: s for s in where}
    got = [json.loads((out / f"rank-{i}.json").read_text()) for i in range(ranks)]
    seen = {s.node: [] for s in where}
    for rank, g in enumerate(got):
        slot = slots[hosts[g["node"]]]  # the node PALS ran this rank on
        assert g["cores"] in [[c] for c in slot.cores], (rank, g, slot)
        assert g["gpus"] == ",".join(map(str, slot.gpus)), (rank, g, slot)
        assert g["want"] == f"{slot.node}:{g['cores'][0]}", (rank, g)  # what the rank-level probe expects
        seen[slot.node] += g["cores"]
    assert {n: sorted(c) for n, c in seen.items()} == {s.node: sorted(s.cores) for s in where}


def test_the_agents_pals_mpiexec_asks_for_no_binding_so_a_job_s_pals_cpu_bind_does_not_confine_them(tmp_path):
    log = tmp_path / "log"
    launcher = PalsLauncher(tmp_path, ("x1", "x2"), (0,), ("--no-transfer",))
    launcher.start("tcp://10.0.0.1:5555", 2, (), {"PATH": stub_path(tmp_path), "STUB_LOG": str(log),
                                                   "STUB_RUN": "0", "PALS_CPU_BIND": "core", "PALS_DEPTH": "4"})
    try:
        wait_for(launcher.ended, timeout=60, what="the stand-in mpiexec to exit")
    finally:
        launcher.stop()
    assert launcher.proc.returncode == 0, (tmp_path / "agents" / "launcher.log").read_text()
    [argv] = [json.loads(line) for line in log.read_text().splitlines()]
    program = argv.index(sys.executable)
    assert argv[:program] == ["-n", "2", "--ppn", "1", "--hosts", "x1,x2", "--depth", "1", "--cpu-bind", "none",
                              "--no-transfer"]
