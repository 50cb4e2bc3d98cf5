"""What a coordinator that did not come up left behind, read by the `fleet up` that
started it: its log's tail, the zygotes' preload refusals in events.jsonl."""

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


def preload_refusals(path: Path, offset: int, pid: int) -> list[tuple[str, str]]:
    """(node, why) of each agent whose zygote refused its preload modules, as the fleet
    whose coordinator is `pid` on this host recorded them in events.jsonl past `offset`."""
    from fleet.wire import events
    tag = f"{socket.gethostname()}-{pid}-"  # the fleet's id begins so (fleet.control.coordinator)
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    found = [events.parse(d) for d in events.events_of(lines)]
    return [(r.node, r.reason) for r in found
            if isinstance(r, events.AgentFailed) and r.preload and r.fleet.startswith(tag)]


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
