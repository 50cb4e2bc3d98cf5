"""A submission's StepDeclared records, encoded a thousand at a time.

A million-step suite declares a million steps, each a StepDeclared record in
events.jsonl. Built as a record, turned into its map and encoded, each took ~15 us of
the coordinator's loop: 15 s for the suite. Steps of one submission mostly share
their shape (cores, memory, priority, kind); here the encoded text of that shared
part is made once per shape and each step's line is assembled around its own id, deps
and task. The lines are exactly what EventLog.write would give for the record
(tests/wire/test_declaring.py compares them), so every reader reads them as before.
"""

from __future__ import annotations

from json.encoder import encode_basestring_ascii as _str

from fleet.wire import events
from fleet.wire.events import dumps


def lines(fleet: str, t: float, submission: int, specs, deps: dict, foreign, parent: str | None = None) -> list[str]:
    """The StepDeclared lines of `specs` (StepSpec) declared at `t` in `submission`,
    with their deps (step id -> ids), which of them another shard runs, and the step
    that submitted them (children)."""
    head = dumps(events.StepDeclared(t=t, fleet=fleet).to_dict(fleet))[:-1]  # '{"t":..,"fleet":..' and the rest
    head = head[:head.index(',"step":')]
    shapes: dict[tuple, tuple[str, str]] = {}
    out = []
    tail = f',"parent":{_str(parent)}}}' if parent is not None else "}"
    for s in specs:
        key = (s.cores, s.min_cores, s.gpus, s.memory, s.priority, s.kind)
        shape = shapes.get(key)
        if shape is None:
            shape = shapes[key] = _shape(submission, s)
        d = deps[s.id]
        out.append(f'{head},"step":{_str(s.id)}{shape[0]}[{",".join(map(_str, d))}]{shape[1]}{_str(s.task)}'
                   + (',"foreign":true' if s.id in foreign else "") + tail)
    return out


def _shape(submission: int, s) -> tuple[str, str]:
    """The encoded text between the step's id and its deps, and between its deps and task."""
    rec = dumps({"submission": submission, "cores": s.cores, "min_cores": s.min_cores, "gpus": s.gpus,
                  **({"memory": s.memory} if s.memory is not None else {}), "deps": 0,
                  "priority": s.priority, "step_kind": s.kind, "task": 0})
    before, after = rec[1:].split('"deps":0')
    return "," + before + '"deps":', after[:-len('"task":0}')] + '"task":'
