"""Which node a rank of fleet.node.mpiprobe is judged to have run on, by launcher: srun
names it (SLURMD_NODENAME), PALS gives the host name (checked against the PBS_NODEFILE
name the step was placed on, first labels compared), Hydra's local pretend nodes are not
checked (every rank is on this host)."""

from __future__ import annotations

from fleet.node.mpiprobe import wrong_node


def rank(node: str, host: str, slurm: bool = False, pals: bool = False) -> dict:
    return {"rank": 0, "node": node, "host": host, "affinity": [0], "slurm": slurm, "pals": pals}


def test_under_srun_a_rank_is_on_the_node_slurm_names():
    assert not wrong_node(rank("nid001", "nid001", slurm=True), "nid001")
    assert wrong_node(rank("nid002", "nid002", slurm=True), "nid001")


def test_under_pals_a_rank_on_another_host_than_placed_is_found_whatever_the_domain():
    placed = "x3005c0s13b0n0.hsn.cm.polaris.alcf.anl.gov"  # as PBS_NODEFILE names it
    assert not wrong_node(rank("x3005c0s13b0n0", "x3005c0s13b0n0", pals=True), placed)
    assert not wrong_node(rank("x3005c0s13b0n0.hsn", "x3005c0s13b0n0.hsn", pals=True), placed)
    assert wrong_node(rank("x3005c0s19b0n0", "x3005c0s19b0n0", pals=True), placed)


def test_under_hydra_pretend_nodes_are_not_checked():
    assert not wrong_node(rank("vm", "vm"), "node2")
