"""Nodes that join offering no core for steps: every core the job gives them there held
back by the machine profile's held_back_cores (fleet.node.heldback).

Before 2026-12-07 such a node joined in silence (`fleet up` exit 0, `fleet status`
`cores 0/0`). The choice made then, as an HPC user expects of a batch job:

- Some nodes have no core, others do: the fleet comes up (its other nodes run steps,
  and nothing is lost by running them), and says so for each such node: its agent's
  log, a warning in the coordinator's log (the first NAMED nodes one by one, then how
  many in all once up), its node_joined event's `held_back`, fleet_up's `no_cores`,
  `fleet status` (the node needs attention: `no core for steps: ...`) and `fleet up`'s
  output (fleet.cli_up), which name the profile.
- No node has a core: nothing could ever run there, so the fleet does not come up (exit
  3, as when agents fail: `fleet up` fails with the coordinator's log line naming the
  profile), rather than come up and refuse every step of every suite.
"""

from __future__ import annotations

import logging

from fleet.core.units import counted
from fleet.node import heldback
from fleet.wire import events

log = logging.getLogger("fleet.control.coordinator")

NAMED = 10  # nodes with no core named one by one in the log; the rest counted


class NoCores:
    """The coordinator's nodes that offer no core (coord: fleet.control.coordinator)."""

    def __init__(self, coord):
        self.coord = coord
        self.count = 0  # nodes that joined with no core (their agents' `no_cores` says why)

    def joined(self, msg) -> None:
        """An agent joined (its Join `msg`, its agents-table row written): if it offers
        no core, say why (log, its row for `fleet status`)."""
        agent = self.coord.agents.get(msg.node)
        if msg.cores or agent is None:
            return
        p = self.coord.profile
        why = (heldback.all_held(msg.node, len(msg.held_back), p.name, p.held_back_cores) if msg.held_back
               else "its agent offers none (see its log)")
        agent.no_cores = why
        self.count += 1
        if self.count <= NAMED:
            log.warning("node %s offers no core for steps: %s; no step will run there (%s)",
                        msg.node, why, heldback.ADVICE)

    def up(self) -> list[str] | None:
        """The fleet is up: the nodes with no core, for its fleet_up event (None: none),
        their count said in the log when not every one was named."""
        if not self.count:
            return None
        if self.count > NAMED:
            log.warning("%s of %s offer no core for steps (fleet status --nodes lists them)",
                        counted(self.count, "node"), len(self.coord.agents))
        return sorted(a.node for a in self.coord.agents.values() if a.no_cores)

    def note(self) -> str:
        """What a step's fit problem about cores adds while some nodes offer none (the
        nodes named, at most NAMED: a pass over the agents, once per submission), or ""."""
        if not self.count:
            return ""
        empty = [a.node for a in self.coord.agents.values() if a.no_cores and a.alive]
        if not empty:
            return ""
        p = self.coord.profile
        named = ", ".join(empty[:NAMED]) + (", ..." if len(empty) > NAMED else "")
        return (f"{counted(len(empty), 'node')} ({named}) {'offers' if len(empty) == 1 else 'offer'} no core, "
                f"every core this job gives {'it' if len(empty) == 1 else 'them'} there held back by machine "
                f"profile {p.name}'s held_back_cores {sorted(p.held_back_cores)}")

    def none_left(self, nodes: list, now: float) -> bool:
        """Whether every node of the fleet coming up (`nodes`: their NodeSpecs, every
        agent joined) offers no core: then it cannot come up (logged, recorded, and
        the coordinator exits NOT_UP: fleet.control.comingup)."""
        if not nodes or any(n.cores for n in nodes):
            return False
        from fleet.control.comingup import NOT_UP
        p = self.coord.profile
        named = ", ".join(n.name for n in nodes[:NAMED]) + (", ..." if len(nodes) > NAMED else "")
        why = (f"none of its {counted(len(nodes), 'node')} ({named}) has a core for steps: machine profile {p.name} "
               f"({p.path or 'built in'}) holds back cores {sorted(p.held_back_cores)} (held_back_cores), every "
               f"core this job gives it on each: nothing could ever run; {heldback.ADVICE}")
        log.error("the fleet cannot come up: %s", why)
        self.coord.events.write(events.FleetFailed(t=now, reason=why))
        self.coord.coming.failed = NOT_UP
        return True
