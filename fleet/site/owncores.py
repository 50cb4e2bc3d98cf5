"""Cores of its own node kept for the coordinator (`fleet up --coordinator-cores N`).

The coordinator runs on the first node of the job, where an agent offers every core
to steps, and the zygote pins each step to its cores. A coordinator with no core of
its own then shares one with a pinned step: the kernel splits that core between
them, so the coordinator (whose CPU a step bounds how many steps the whole allocation
starts a second) runs at about half speed, and so does the step. With N > 0 the
coordinator takes the last N cores of its node that the machine profile does not hold
back, pins itself to them (their hardware threads too), and the agent on that node
leaves them out of what it offers, as it does the profile's held-back cores.

Opt-in (default 0): a suite whose step needs every core of the allocation would no
longer fit, and on a small allocation the coordinator's load is small too. Only for
batch allocations: a local fleet's coordinator shares the machine with its agents
anyway, and its pretend nodes are a split of this machine's cores.
"""

from __future__ import annotations

import os
import socket
from typing import Mapping


def pick(n: int, usable: tuple[int, ...], held_back: tuple[int, ...] = ()) -> tuple[int, ...]:
    """The last `n` of the `usable` cores not held back; ValueError unless at least one
    core is left for steps."""
    free = [c for c in usable if c not in held_back]
    if n >= len(free):
        raise ValueError(f"--coordinator-cores {n}: this node has {len(free)} core(s) for steps "
                         f"(held back: {list(held_back) or 'none'}); at least one must be left for them")
    return tuple(free[-n:])


def this_node(nodes: tuple[str, ...], env: Mapping[str, str] | None = None) -> str:
    """This node's name as its agent will give it (fleet.node.agent.node_name): Slurm's
    SLURMD_NODENAME; else the allocation's node whose short name is this host's; else
    the host name."""
    env = os.environ if env is None else env
    if env.get("SLURMD_NODENAME"):
        return env["SLURMD_NODENAME"]
    host = socket.gethostname()
    short = host.split(".")[0]
    for node in nodes:
        if node.split(".")[0] == short:
            return node
    return host


def threads_of(cores: tuple[int, ...], allowed: set[int]) -> set[int]:
    """The hardware threads of `cores` that this process may use (fleet.node.probe
    keeps one logical CPU a core: the lowest of its threads)."""
    from fleet.node.probe import parse_cpu_list
    out = set(cores)
    for cpu in cores:
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
                out |= parse_cpu_list(f.read()) & allowed
        except (OSError, ValueError):
            pass
    return out


def keep(n: int, held_back: tuple[int, ...], nodes: tuple[str, ...]) -> tuple[str, tuple[int, ...]]:
    """Keep `n` cores of this node for this process: pin it (and the threads it starts
    after) to them. Returns (this node's name, the cores); ValueError as `pick`."""
    from fleet.node.probe import usable_cores
    cores = pick(n, usable_cores(), held_back)
    os.sched_setaffinity(0, threads_of(cores, os.sched_getaffinity(0)))
    return this_node(nodes), cores


def agent_args(node: str, cores: tuple[int, ...]) -> list[str]:
    """What the agents are told: the node where the coordinator keeps `cores`."""
    return ["--coordinator-node", node, "--coordinator-cores", ",".join(map(str, cores))] if cores else []
