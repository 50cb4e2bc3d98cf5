"""The coordinator's per-step `start` and `started` records, encoded without the record.

Every step that runs leaves a `start` and a `started` record in events.jsonl. Built as
frozen dataclasses (each field set through object.__setattr__), mapped by to_dict and
then encoded, each cost the loop several microseconds per step. Here the record's JSON
object is built directly, in the order Record.to_dict writes it (t and kind first, the
writer's fleet, then the fields as declared, none of them None), and encoded once: the
line is exactly what EventLog.write gives for the record (tests/control/test_eventlines.py
compares them), so every reader reads it as before.
"""

from __future__ import annotations

from fleet.wire import events as E
from fleet.wire.events import _dumps


def start(fleet: str, now: float, d) -> str:
    """The `start` line of a decision `d` (Start or Begin): as
    EventLog.write(fleet.control.launching.start_record(now, d))."""
    p = d.placement
    out = {"t": round(now, 6), "kind": "start"}
    if fleet:
        out["fleet"] = fleet
    out["step"], out["attempt"], out["node"] = d.step, d.attempt, p[0].node
    if len(p) == 1:  # the common case: one node's slot
        s = p[0]
        out["cores"], out["gpus"], out["memory"], out["nodes"] = list(s.cores), list(s.gpus), s.memory, [s.node]
    else:
        out["cores"] = [c for s in p for c in s.cores]
        out["gpus"] = [g for s in p for g in s.gpus]
        out["memory"], out["nodes"] = sum(s.memory for s in p), [s.node for s in p]
    out["placement"] = [{"node": s.node, "cores": list(s.cores), "gpus": list(s.gpus), "memory": s.memory} for s in p]
    return _dumps(out)


def started(fleet: str, now: float, node: str, msg) -> str:
    """The `started` line of an agent's Started report: as EventLog.write(events.Started(...))."""
    out = {"t": round(now, 6), "kind": "started"}
    if fleet:
        out["fleet"] = fleet
    out["step"], out["attempt"], out["node"], out["pid"], out["at"] = msg.step, msg.attempt, node, msg.pid, msg.at
    return _dumps(out)


def record(cls, **fields):
    """A record made as fleet.wire.events.parse makes one, without the frozen
    dataclass's __init__ (object.__setattr__ per field, for the `exit` record's 24
    fields): equal to cls(**fields)."""
    return E.filled(cls, fields)
