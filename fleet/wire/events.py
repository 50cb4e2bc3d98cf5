"""The event stream: one JSON record per decision and outcome, in events.jsonl.

Records are buffered and flushed once per turn of the coordinator's loop, so a burst
of decisions costs one write, while a reader (fleet report, a test) never waits more
than one turn for what happened. Each flush is one write() to a file opened with
O_APPEND, so fleets sharing a run directory interleave whole lines, never parts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator


class EventLog:
    def __init__(self, path: Path, fleet: str = ""):
        """`fleet` tags every record: fleets sharing a run directory share this file."""
        self.path = path
        self.fleet = fleet
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._pending: list[str] = []

    def write(self, t: float, kind: str, **fields: Any) -> None:
        rec = {"t": round(t, 6), "kind": kind}
        if self.fleet:
            rec["fleet"] = self.fleet
        rec.update(fields)
        self._pending.append(json.dumps(rec, separators=(",", ":"), default=str))

    def flush(self) -> None:
        if self._pending:
            data = ("\n".join(self._pending) + "\n").encode()
            self._pending.clear()
            while data:
                data = data[os.write(self._fd, data):]

    def close(self) -> None:
        self.flush()
        os.close(self._fd)


def read_events(path: Path) -> Iterator[dict]:
    """Records written so far (a torn last line of a live run is skipped)."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue
