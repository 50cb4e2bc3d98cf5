"""A node left with no core for steps by its machine profile's held_back_cores.

A partial-node job can be given, on some node, only cores the profile holds back (on
Aurora, held_back_cores = [0, 52]: a job given cores 0 and 52 of a node, or on a
Slurm cluster a job whose last node has one core). Before 2026-12-07 that node's
agent joined offering no core and said nothing: `fleet up` exited 0, `fleet status`
showed `cores 0/0`, and a step that needed the node was refused because "the largest
node that could hold it has 0", with no word of the profile. Now the agent, the
coordinator (fleet.control.nocores), `fleet status` and `fleet up` say why, in the
words of `all_held`. Local fleets were already refused by name (fleet.control.preflight).
In fleet.node, below the site and control layers that use it too.
"""

from __future__ import annotations

from typing import Sequence

from fleet.core.units import counted


def all_held(node: str, cores: int, machine: str, held_back_cores: Sequence[int], kept: Sequence[int] = ()) -> str:
    """Why `node` offers no core: the `cores` cores this job gives it there are all held
    back by machine profile `machine`'s `held_back_cores` (or `kept` by the coordinator,
    fleet.site.owncores)."""
    whose = f"machine profile {machine}'s" if machine else "the machine profile's"
    by = f"held back by {whose} held_back_cores {sorted(held_back_cores)}"
    if kept:
        by += f" or kept for the coordinator ({sorted(kept)})"
    return f"all {counted(cores, 'core')} this job gives it on {node} {'is' if cores == 1 else 'are'} {by}"


ADVICE = "hold back fewer in the profile's held_back_cores, or ask the batch system for other cores or whole nodes"
