"""Each fleet's nodes are its own, in a report of fleets that shared a run directory.

Every record names the fleet that wrote it, and its node by the name that fleet gave
it; every embedded fleet calls its node `node1`, and two Slurm fleets may run on the
same host. A node is therefore its fleet's: the first fleet to join a name keeps it
while no other fleet joins one of that name; once another does, each such node is
named `NAME@FLEET` (`node1@vm-1877-687717`), the first one too, when the session has
been read (`finish`). Records have always named their fleet; a stream whose records
name none (a hand-made one) names every node by its name alone. The handlers of the
records about a node (its memory, its loss, its zygote's restarts) are here: they find
the node so (fleet.report.ingest's `Gathered`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleet.report.model import Node, Piece, Step
from fleet.wire import events as E

if TYPE_CHECKING:
    from fleet.report.ingest import Gathered


def qualified(name: str, fleet: str) -> str:
    """A node's name in a report where another fleet's node has the same name."""
    return f"{name}@{fleet}"


def joined(nodes: dict[str, Node], renamed: dict[tuple, str], fleet: str, name: str) -> str:
    """The report's name of a node that joined (`renamed` learns it, if not its own)."""
    known = renamed.get((fleet, name))
    if known is not None:
        return known
    other = nodes.get(name)
    if other is None or other.fleet == fleet:
        return name
    renamed[(fleet, name)] = q = qualified(name, fleet)
    return q


def placed(renamed: dict[tuple, str], fleet: str, placement: list[Piece]) -> list[Piece]:
    """A start record's placement with its nodes under their names in the report."""
    return [p._replace(node=renamed.get((fleet, p.node), p.node)) for p in placement]


def left(nodes: dict[str, Node], fleet: str, t: float) -> None:
    """The fleet went down (or was found gone) at t: its nodes offer nothing after it.
    (Not for a stream without fleet ids: there every fleet's node is one.)"""
    if not fleet:
        return
    for nd in nodes.values():
        if nd.fleet == fleet and nd.left is None:
            nd.left = t


def finish(nodes: dict[str, Node], steps: dict[str, Step], renamed: dict[tuple, str]) -> None:
    """The first node of each name another fleet's node also had, named for its fleet
    too (it kept the plain name while it was the only one), with its attempts."""
    clashed = {name for (_, name) in renamed}
    first = {name: nodes[name] for name in clashed if name in nodes and nodes[name].fleet}
    if not first:
        return
    to = {name: qualified(name, nd.fleet) for name, nd in first.items()}
    for name, nd in first.items():
        del nodes[name]
        nd.name = to[name]
        nodes[nd.name] = nd
    for s in steps.values():
        for a in s.attempts:
            if a.node in to:
                a.node = to[a.node]
            if any(p.node in to for p in a.placement):
                a.placement = [p._replace(node=to.get(p.node, p.node)) for p in a.placement]
        if s.unsure:  # (its attempts that may have run: fleet.report.unsure)
            s.unsure = [u._replace(node=to.get(u.node, u.node)) for u in s.unsure]


def node_of(g: Gathered, rec) -> Node | None:
    """The node a record of its fleet names."""
    return g.nodes.get(g.renamed.get((rec.fleet, rec.node), rec.node) if g.renamed else rec.node)


def on_node_memory(g: Gathered, rec: E.NodeMemory) -> None:
    """A `node_memory` record: the most its node had in use."""
    nd = node_of(g, rec)
    if nd is not None:
        nd.memory_used = max(nd.memory_used or 0, int(rec.used or 0))


def on_node_lost(g: Gathered, rec: E.NodeLost) -> None:
    """A `node_lost` record: when (the first) and why."""
    nd = node_of(g, rec)
    if nd is not None and nd.lost is None:
        nd.lost, nd.lost_reason = rec.t, rec.reason or ""


def on_zygote_restarted(g: Gathered, rec: E.ZygoteRestarted) -> None:
    """A `zygote_restarted` record: one more restart of its node's zygote."""
    nd = node_of(g, rec)
    if nd is not None:
        nd.restarts.append((rec.t, rec.reason or "died"))
