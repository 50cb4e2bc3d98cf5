"""A rank-level placement check for MPI steps: run it as an MPI step's command.

Every rank reports its MPI rank, node and CPU affinity to rank 0, which compares them
with what the scheduler placed (FLEET_RANKS, set by the coordinator: "node:cores;..."
in rank order), writes ranks.json into the working directory, prints one line per rank
and exits 1 on any mismatch. mpi4py is imported here only — never in an agent or a
zygote, where MPI_Init before a fork is unsafe on many fabrics.

    [[steps]]
    id = "probe"
    mpi = true
    ranks = 4
    command = ["python3", "-m", "fleet.node.mpiprobe"]
"""

from __future__ import annotations

import json
import os
import socket
import sys


def expected(spec: str) -> list[tuple[str, list[int]]]:
    out = []
    for part in filter(None, spec.split(";")):
        node, cores = part.rsplit(":", 1)
        out.append((node, sorted(int(c) for c in cores.split(",") if c)))
    return out


def node_name() -> str:
    """The rank's node: srun's SLURMD_NODENAME (the name the agents and the scheduler use),
    else the host name (PALS and Hydra give ranks no node name)."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def short(host: str) -> str:
    """A host name's first label: PBS_NODEFILE names nodes in full (x3005c0s13b0n0.hsn.cm...),
    a node's own host name is often the short one."""
    return host.split(".", 1)[0]


def wrong_node(r: dict, placed: str) -> bool:
    """Whether rank report `r` ran elsewhere than on node `placed`. Under srun by the
    node's name; under PALS (the rank has PALS_RANKID) by host name, first labels compared
    (the agents took their names from PBS_NODEFILE's host names); under Hydra not at all
    (a local fleet's pretend nodes all live on this host)."""
    if r.get("slurm"):
        return r["node"] != placed
    if r.get("pals"):
        return short(r["host"]) != short(placed)
    return False


def main() -> int:
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    mine = {"rank": comm.Get_rank(), "node": node_name(), "host": socket.gethostname(),
            "affinity": sorted(os.sched_getaffinity(0)), "pid": os.getpid(),
            "slurm": "SLURMD_NODENAME" in os.environ, "pals": "PALS_RANKID" in os.environ}
    ranks = comm.gather(mine, root=0)
    if comm.Get_rank() != 0:
        return 0
    want = expected(os.environ.get("FLEET_RANKS", ""))
    bad = []
    for r in ranks:
        line = f"rank {r['rank']} on {r['node']} cores {r['affinity']}"
        if want:
            if r["rank"] >= len(want):
                bad.append(f"rank {r['rank']}: not in the placement ({len(want)} ranks placed)")
            elif r["affinity"] != want[r["rank"]][1]:
                bad.append(f"rank {r['rank']} on {r['node']}: cores {r['affinity']}, placed {want[r['rank']][1]}")
            elif wrong_node(r, want[r["rank"]][0]):
                bad.append(f"rank {r['rank']}: on {r['node']}, placed on {want[r['rank']][0]}")
        print(line, flush=True)
    if want and len(ranks) != len(want):
        bad.append(f"{len(ranks)} ranks ran, {len(want)} were placed")
    with open("ranks.json", "w") as f:
        json.dump({"ranks": ranks, "expected": want, "mismatches": bad}, f, indent=1)
    for b in bad:
        print(f"placement mismatch: {b}", file=sys.stderr, flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
