"""`fleet simulate` through the real command line in a fresh process: which machine's
placement rule it keeps (--machine, else the detected machine, as `fleet up`), and the
settings it says it assumed (order, reservations, steps without an estimate)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from fleetharness import completed

# Three 8-core nodes: f1, f2 and f3 take 6, 6 and 5 cores for 10 s, leaving 2 + 2 + 3.
# The MPI step m (7 ranks) fits there only as 3 + 2 + 2, which PALS mpiexec (ranks in
# blocks of one count per node, all nodes but one the same) cannot launch.
PALS = "".join(f'[[steps]]\nid = "{sid}"\ncommand = "x"\n{extra}estimate = {est}\n' for sid, extra, est in (
    ("f1", "cores = 6\n", 10), ("f2", "cores = 6\n", 10), ("f3", "cores = 5\n", 10),
    ("m", "mpi = true\nranks = 7\n", 1)))
ALLOC = ("--nodes", "3", "--cores-per-node", "8")


def fleet(tmp_path: Path, text: str, *args: str, machine: str | None = None):
    """`fleet simulate SUITE ARGS` on the suite `text`, outside any batch job, with
    FLEET_MACHINE=`machine` if given."""
    (tmp_path / "s.toml").write_text('[suite]\nname = "s"\n' + text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_", "FLEET_MACHINE"))}
    if machine is not None:
        env["FLEET_MACHINE"] = machine
    return completed([sys.executable, "-m", "fleet", "simulate", "s.toml", *args], 60, cwd=tmp_path, env=env,
                     text=True)


def test_simulate_places_mpi_steps_as_the_detected_machine_launches_them_and_says_which(tmp_path):
    # (it never read a machine: on a PALS machine it started m at once on 3 + 2 + 2 cores,
    # which the live fleet cannot launch; the live coordinator waits for 7 cores of a node)
    pals = fleet(tmp_path, PALS, *ALLOC, "--json", machine="aurora")
    assert pals.returncode == 0, pals.stderr
    got = json.loads(pals.stdout)
    assert got["steps"]["m"] == {"node": "node1", "cores": 7, "start_s": 10.0, "end_s": 11.0}, got["steps"]
    assert got["machine"] == {"name": "aurora", "chosen_by": "$FLEET_MACHINE", "mpi": "pals", "mpi_blocks": True}
    local = json.loads(fleet(tmp_path, PALS, *ALLOC, "--json").stdout)
    assert local["steps"]["m"]["start_s"] == 0.0 and len(local["steps"]["m"]["node"]) == 3, local["steps"]
    assert local["machine"] == {"name": "local", "chosen_by": "detected", "mpi": "hydra", "mpi_blocks": False}
    given = fleet(tmp_path, PALS, *ALLOC, "--machine", "pals", machine="slurm")  # (the option wins)
    assert given.returncode == 0, given.stderr
    assert ("machine       pals (--machine): MPI ranks in blocks of one count per node, as PALS mpiexec "
            "launches them") in given.stdout, given.stdout
    compared = json.loads(fleet(tmp_path, PALS, *ALLOC, "--compare-orders", "--json", machine="aurora").stdout)
    assert compared["machine"]["mpi_blocks"] is True and compared["orders"]["setup"]["makespan_s"] == 11.0, compared


def test_an_unknown_machine_is_refused_naming_the_known_ones(tmp_path):
    r = fleet(tmp_path, PALS, *ALLOC, "--machine", "nosuch")
    assert r.returncode == 2 and "unknown machine 'nosuch'; known machines:" in r.stderr, r.stderr
    assert "--machine" in r.stderr and r.stdout == ""


def test_simulate_says_the_order_and_reservations_it_used_and_what_steps_without_an_estimate_take(tmp_path):
    steps = "".join(f'[[steps]]\nid = "{sid}"\ncommand = "x"\n{extra}' for sid, extra in (
        ("x", "estimate = 3\n"), ("y", ""), ("z", ""), ("w", "estimate = 2\n")))
    r = fleet(tmp_path, steps, "--nodes", "1", "--cores-per-node", "2", "--order", "critical-path",
              "--reserve-ahead", "2")
    assert r.returncode == 0, r.stderr
    lines = [ln.strip() for ln in r.stdout.splitlines()]
    assert "order         critical-path (of ready steps of equal priority)" in lines, lines
    assert "reservations  after 600 s of waiting, up to 2 planned ahead" in lines, lines
    assert ("estimates     2 of 4 steps have none: each runs 1 s here (first: y); --order counts them 0 s"
            in lines), lines
    got = json.loads(fleet(tmp_path, steps, "--nodes", "1", "--cores-per-node", "2", "--no-reservations",
                           "--json").stdout)
    assert got["no_estimate"] == {"count": 2, "first": "y"} and got["order"] == "setup", got
    assert got["reserve_after_s"] is None and got["reserve_ahead"] == 0, got
    none = fleet(tmp_path, steps.replace('id = "y"\ncommand = "x"\n', 'id = "y"\ncommand = "x"\nestimate = 1\n')
                 .replace('id = "z"\ncommand = "x"\n', 'id = "z"\ncommand = "x"\nestimate = 1\n'),
                 "--nodes", "1", "--cores-per-node", "2", "--no-reservations")
    assert "estimates" not in none.stdout and "reservations  none" in none.stdout, none.stdout
