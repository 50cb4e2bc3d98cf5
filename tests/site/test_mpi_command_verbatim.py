"""An MPI step's command reaches its launcher as the suite wrote it: fleet's own file
names go into the launcher's options, never into the user's arguments."""

from __future__ import annotations

from pathlib import Path

from fleet.control import launching
from fleet.core.decisions import Start
from fleet.core.resources import Slot
from fleet.core.suite import parse_suite
from fleet.site.profiles import Profile

COMMAND = ["python3", "-c", "print('{fleet}'.format(fleet=1))"]


def _launch(tmp_path: Path, placement, mpi: str):
    table = {"id": "fmt", "command": COMMAND, "mpi": True, "ranks": len([c for s in placement for c in s.cores])}
    spec = parse_suite({"steps": [table]}, tmp_path / "suite.toml").steps[0]
    profile = Profile(name="t", path="", launcher="slurm" if mpi == "srun" else "local", mpi=mpi)
    return launching.launch(profile, spec, Start("fmt", 1, placement), tmp_path, "fleet-1")


def test_a_placeholder_like_text_in_an_mpi_step_s_command_reaches_srun_verbatim(tmp_path: Path):
    msg = _launch(tmp_path, (Slot("n1", (0, 1)), Slot("n2", (0, 1))), "srun")
    fleet_dir = tmp_path / "steps" / "fmt" / ".fleet"
    assert msg.command[-3:] == COMMAND, msg.command
    assert msg.env["SLURM_HOSTFILE"] == f"{fleet_dir}/hostfile"


def test_srun_s_rank_wrapper_is_named_by_its_path_and_the_command_follows_it_verbatim(tmp_path: Path):
    # Different cores on each node: every rank starts through the wrapper, the command its arguments.
    msg = _launch(tmp_path, (Slot("n1", (0,)), Slot("n2", (1,))), "srun")
    fleet_dir = tmp_path / "steps" / "fmt" / ".fleet"
    assert msg.command[-4:] == [f"{fleet_dir}/srun-ranks.sh", *COMMAND], msg.command
    assert "{fleet}" not in (fleet_dir / "srun-ranks.sh").read_text()


def test_a_placeholder_like_text_in_an_mpi_step_s_command_reaches_mpiexec_verbatim(tmp_path: Path):
    msg = _launch(tmp_path, (Slot("n1", (0,)), Slot("n2", (1,))), "hydra")
    assert msg.command[-3:] == COMMAND, msg.command
