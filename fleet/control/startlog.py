"""What a coordinator that did not come up left behind, read by the `fleet up` that
started it: its log's tail, the zygotes' preload refusals and its own word on why
(fleet_failed) in events.jsonl."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

from fleet.wire import logtag


def signame(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def _records(path: Path, offset: int, pid: int) -> list:
    """The records past `offset` in events.jsonl `path` of the fleet whose coordinator is
    `pid` on this host."""
    from fleet.wire import events
    tag = f"{socket.gethostname()}-{pid}-"  # the fleet's id begins so (fleet.control.coordinator)
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    return [r for r in map(events.parse, events.events_of(lines)) if r.fleet.startswith(tag)]


def preload_refusals(path: Path, offset: int, pid: int) -> list[tuple[str, str]]:
    """(node, why) of each agent whose zygote refused its preload modules, as the fleet
    whose coordinator is `pid` on this host recorded them in events.jsonl past `offset`."""
    from fleet.wire import events
    return [(r.node, r.reason) for r in _records(path, offset, pid) if isinstance(r, events.AgentFailed) and r.preload]


def failure(path: Path, offset: int, pid: int) -> str:
    """Why that fleet did not come up, as it recorded (its last fleet_failed), or ""
    (before 2026-12-07 `fleet up` gave only its exit status and its log's tail)."""
    from fleet.wire import events
    said = [r.reason for r in _records(path, offset, pid) if isinstance(r, events.FleetFailed) and r.reason]
    return said[-1] if said else ""


def size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def tail(path: Path, lines: int = 15, pid: int = 0) -> str:
    """The last `lines` lines of path; with pid, of the coordinator pid of this host's
    lines and the untagged ones only (not another fleet's: fleet.wire.logtag)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    kept = logtag.lines_of(text, socket.gethostname(), pid) if pid else text.splitlines()
    return "\n".join(kept[-lines:])
