"""Why the fleet a client was following is gone, in words, from the end of events.jsonl.

A `fleet run` that loses its fleet can only say "it went down" unless it looks: a fleet
that was stopped (`fleet down`, SIGTERM, SIGINT or SIGHUP to its coordinator) writes a
`fleet_down` record as its last (naming the signal: from 2026-12-07); one that stopped itself (every node lost:
fleet.control.jobend) writes one that says so (its `reason`; before 2026-12-06 it read
as stopped, though nobody stopped it); one whose coordinator was killed (SIGKILL, the
kernel's OOM killer) or crashed writes nothing more. Records carry the writer's fleet
id, which begins with its host and pid (fleet.control.coordinator), so the coordinator
the client was connected to is found among fleets sharing the run directory.

Only the stream's last TAIL bytes are read (one open, one seek, one read): a
million-step stream is not read to say this.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from fleet.wire import logtag

TAIL = 1 << 20  # bytes read from the end of events.jsonl


STOPPED, ITSELF, KILLED = "stopped", "itself", "killed"


def why(run_dir: Path | str, host: str, pid: int) -> str:
    """How the fleet of coordinator `pid` on `host` ended, as a clause ("" if the stream
    does not say: unreadable, or no record of that coordinator in its tail)."""
    return how(run_dir, host, pid)[1]


def how(run_dir: Path | str, host: str, pid: int) -> tuple[str, str]:
    """(STOPPED, clause), (ITSELF, clause: it stopped itself, and why), (KILLED, clause),
    or ("", "") when the stream does not say."""
    path = Path(run_dir) / "events.jsonl"
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - TAIL))
            tail = f.read(TAIL)
    except OSError:
        return "", ""
    prefix = f"{host}-{pid}-"
    lines = tail.split(b"\n")
    if size > TAIL:
        lines = lines[1:]  # (the first is a piece of a line)
    needle = prefix.encode()
    for line in reversed(lines):
        if needle not in line:  # (a cheap test before the parse)
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict) or not str(rec.get("fleet", "")).startswith(prefix):
            continue
        if rec.get("kind") == "fleet_down" and rec.get("reason") and isinstance(rec["reason"], str):
            return ITSELF, rec["reason"]
        if rec.get("kind") == "fleet_down" and rec.get("signal") and isinstance(rec["signal"], str):
            return STOPPED, f"it was stopped by {rec['signal']} to its coordinator"
        if rec.get("kind") == "fleet_down":  # (`fleet down`; or a signal, by a fleet of before 2026-12-07)
            return STOPPED, "it was stopped (fleet down, or a signal to its coordinator)"
        return KILLED, (f"its coordinator (pid {pid} on {host}) ended without stopping it: killed or crashed "
                        f"(see {logtag.pointer(Path(run_dir) / 'coordinator.log', host, pid)})")
    return "", ""
