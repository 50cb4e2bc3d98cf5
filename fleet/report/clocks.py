"""Nodes whose wall clock was off from their coordinator's, as its `node_clock` records
said (fleet.control.nodeclock): the coordinator gave their launches its decision time on
the node's clock, so that their steps' startup was measured on that one clock; the
report says so once, naming them."""

from __future__ import annotations

from fleet.wire import events as E

SHOWN = 10  # nodes named in the note at most


def on_node_clock(g, rec: E.NodeClock) -> None:
    """A `node_clock` record: the largest offset its coordinator used for that node, for
    the note."""
    used = float(rec.ahead_s or 0.0) if rec.used else 0.0
    if used:
        node = g.renamed.get((rec.fleet, rec.node), rec.node)
        was = g.clocks_off.get(node)
        if was is None or abs(used) > abs(was[0]):
            g.clocks_off[node] = (used, float(rec.within_s or 0.0))


def note(g) -> list[str]:
    """The report's note on the nodes whose clock was off (none if every clock agreed)."""
    if not g.clocks_off:
        return []
    said = [f"{node} {_by(ahead)} (to within {within * 1000:.1f} ms)"
            for node, (ahead, within) in sorted(g.clocks_off.items(), key=lambda kv: -abs(kv[1][0]))[:SHOWN]]
    more = len(g.clocks_off) - SHOWN
    return [f"{len(g.clocks_off)} node(s) had a wall clock off from the coordinator's, as their heartbeats told: "
            + ", ".join(said) + (f", and {more} more" if more > 0 else "")
            + "; their steps' startup was measured on their own clock (the decision time in their exit records "
            "is the coordinator's, on the node's clock, as are the other stamps there)"]


def _by(ahead: float) -> str:
    return f"{abs(ahead):.3f} s {'ahead' if ahead > 0 else 'behind'}"
