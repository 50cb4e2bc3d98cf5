"""A PALS fleet's MPI steps on nodes of unequal sizes: placed so that the PALS launch
renders (fleet.core.ppnblocks, fleet.site.mpi.render_pals), or refused at submission
naming file, step and field when no such placement exists (before 2026-12-07 they were
placed 64 + 32 + 32 and every attempt failed with RenderError)."""

from __future__ import annotations

from pathlib import Path

from fleet.control.checks import fit_problems
from fleet.core.graph import build_graph
from fleet.core.resources import NodeSpec
from fleet.core.scheduler import Start
from fleet.core.simulate import simulate
from fleet.core.suite import suite_from_toml
from fleet.site.mpi import render


def _nodes(*cores):
    return [NodeSpec(f"x{i + 1}", tuple(range(c)), (), c << 30) for i, c in enumerate(cores)]


def _suite(ranks: int):
    return suite_from_toml(f'[suite]\nname = "w"\n[[steps]]\nid = "model"\ncommand = ["m"]\nmpi = true\n'
                           f'ranks = {ranks}\n', Path("/suites/w.toml"))


def test_a_pals_step_on_unequal_nodes_is_placed_so_that_its_launch_renders():
    suite = _suite(120)
    r = simulate(suite.steps, build_graph(suite.steps)[0], _nodes(64, 48, 32), keep_log=True, mpi_blocks=True)
    start = next(d for _, d in r.log if isinstance(d, Start))
    argv = render("pals", start.placement, 1, ["m"]).argv
    assert argv[:6] == ("mpiexec", "-n", "120", "--ppn", "48", "--hosts")


def test_a_pals_step_no_block_placement_holds_is_refused_naming_file_step_and_field():
    suite = _suite(128)
    [p] = fit_problems(suite, _nodes(64, 32, 32), blocks=True)
    assert str(p).startswith("/suites/w.toml: step 'model': field 'ranks': can never run on this allocation: "
                             "needs 128 ranks placed as PALS mpiexec places them"), str(p)
    assert fit_problems(suite, _nodes(64, 32, 32)) == []  # (srun, Hydra: 64 + 32 + 32 is launched)
