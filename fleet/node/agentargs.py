"""The agent's command line, and what it offers the fleet from it: its node's name, cores
and GPUs (fleet.node.agent)."""

from __future__ import annotations

import argparse
import os
import socket
import sys

from fleet.node import heldback
from fleet.wire import logtag


def offered_cores(args, usable) -> tuple[list[int], list[int]]:
    """The cores this agent offers: --cores, else what `usable()` says this node allows
    but the site's held-back cores and, on its node, the coordinator's own
    (fleet.site.owncores); and those of this node the profile holds back (its Join says
    them). None left is said in the log, naming the profile (fleet.node.heldback)."""
    if args.cores:
        return [int(c) for c in args.cores.split(",") if c], []
    held = {int(c) for c in args.hold_back.split(",") if c}
    kept: set[int] = set()
    if args.coordinator_node and args.coordinator_node == args.node:
        kept = {int(c) for c in args.coordinator_cores.split(",") if c}
        print(f"{logtag.tag()}fleet agent {args.node}: core(s) {sorted(kept)} left to the coordinator", file=sys.stderr, flush=True)
    here = list(usable())
    offered = [c for c in here if c not in held and c not in kept]
    if not offered:
        why = heldback.all_held(args.node, len(here), args.machine, sorted(held), sorted(kept & set(here)))
        print(f"{logtag.tag()}fleet agent {args.node}: offering no core: {why}; steps get no core here "
              f"({heldback.ADVICE})", file=sys.stderr, flush=True)
    return offered, [c for c in here if c in held]


def offered_gpus(args, node_gpus) -> list[int]:
    """The GPUs this agent offers: --gpus (a local fleet's share of the machine's), else
    what `node_gpus` (fleet.node.probe.node_gpus) finds from the machine profile's
    --gpu-var and --gpus-per-node; none, said in the log, if the ids are not integers."""
    if args.gpus is not None:
        return [int(g) for g in args.gpus.split(",") if g]
    try:
        return list(node_gpus(args.gpu_var, args.gpus_per_node))
    except ValueError as e:
        print(f"{logtag.tag()}fleet agent {args.node}: offering no GPUs: {e}", file=sys.stderr, flush=True)
        return []


def node_name(args, env=os.environ) -> str:
    """This node's name, as the launcher knows it (fake Slurm nodes share one hostname)."""
    if args.node:
        return args.node
    if args.node_from == "slurm" and env.get("SLURMD_NODENAME"):
        return env["SLURMD_NODENAME"]
    if args.node_from == "rank" and args.node_list:
        nodes = args.node_list.split(",")
        for var in ("PALS_NODEID", "PMI_RANK", "PMIX_RANK", "SLURM_NODEID"):
            if env.get(var, "").isdigit() and int(env[var]) < len(nodes):
                return nodes[int(env[var])]
    return socket.gethostname()


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The agent's command line."""
    ap = argparse.ArgumentParser(prog="python -m fleet.node.agent")
    ap.add_argument("--connect", required=True, help="the coordinator's agent endpoint")
    ap.add_argument("--node", default="", help="this node's name (default: from --node-from)")
    ap.add_argument("--node-from", choices=("slurm", "rank", "hostname"), default="hostname",
                    help="where the name comes from: SLURMD_NODENAME, this rank in --node-list, or hostname")
    ap.add_argument("--node-list", default="", help="the allocation's nodes, in rank order")
    ap.add_argument("--cores", default="", help="core ids to offer (default: what this node allows)")
    ap.add_argument("--hold-back", default="", help="core ids the site keeps for itself")
    ap.add_argument("--machine", default="", help="the machine profile that holds them back (named in the log)")
    ap.add_argument("--coordinator-node", default="", help="the node where the coordinator keeps cores of its own")
    ap.add_argument("--coordinator-cores", default="", help="those cores (fleet.site.owncores)")
    ap.add_argument("--memory", type=int, default=0, help="bytes to offer (default: what this node reports)")
    ap.add_argument("--gpus", default=None, help="GPU ids to offer, '' for none (default: from --gpu-var ...)")
    ap.add_argument("--gpu-var", default="", help="the machine profile's GPU variable, read first")
    ap.add_argument("--gpus-per-node", type=int, default=0, help="GPUs here when --gpu-var is not set (0: unknown)")
    ap.add_argument("--preload", default="")
    ap.add_argument("--join-timeout", type=float, default=120.0)
    ap.add_argument("--parent-pid", type=int, default=0,
                    help="the process that started it (a local agent's coordinator): gone already, stop (0: not checked)")
    return ap.parse_args(argv)
