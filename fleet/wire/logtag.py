"""Which fleet a line of a shared log is from.

Several fleets may share one run directory (one per batch job: fleet.control.jobfleets),
and so its coordinator.log and its agents' logs (agents/<node>.log, agents/launcher.log),
where their lines would interleave with nothing saying whose they are. So every line the
fleet's own code writes there begins with its fleet id in brackets, `[vm-2344-1a2b3c] `:
the id its records in events.jsonl carry (`fleet`), which begins with its coordinator's
host and pid. The coordinator's lines get it from its log format (coordinator_cli), an
agent's and its zygote's from ENV, which the coordinator sets for the agents it launches.
What a process writes to its stderr by other means (a traceback, a preload's prints) is
not tagged; a reader of one fleet's lines keeps the untagged ones (lines_of).

Imports nothing heavy: the zygote imports it before its preloads."""

from __future__ import annotations

import os
import re
import socket

ENV = "FLEET_ID"  # (a step's environment has it too: fleet.control.launching)
_TAGGED = re.compile(r"(?:\d{4}-\d\d-\d\d [\d:,]+ )?\[([^\]\s]+-\d+-[0-9a-f]{6})\] ")  # (a coordinator's: after the time)


def new_id() -> str:
    """A new fleet's id: `host-pid-random` (fleet.control.gone and the clients find a
    coordinator's records by their `host-pid-` beginning)."""
    return f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"


def tag(fleet_id: str | None = None) -> str:
    """The beginning of a line of this fleet ("[id] "; "" when it is not known: an agent
    started by hand, or by an older coordinator)."""
    fleet_id = os.environ.get(ENV, "") if fleet_id is None else fleet_id
    return f"[{fleet_id}] " if fleet_id else ""


def of_coordinator(host: str, pid: int) -> str:
    """The beginning of the tagged lines of the fleet of coordinator pid on host."""
    return f"[{host}-{pid}-"


def lines_of(text: str, host: str, pid: int) -> list[str]:
    """text's lines that are not another fleet's: the coordinator's (pid on host) tagged
    ones, and the untagged (its tracebacks, an older fleet's lines), in order."""
    mine = of_coordinator(host, pid)[1:]
    out = []
    for line in text.splitlines():
        m = _TAGGED.match(line)
        if m is None or m.group(1).startswith(mine):
            out.append(line)
    return out


def pointer(log, host: str, pid: int) -> str:
    """`log` (a path) named for the fleet of coordinator pid on host: which of its lines
    are that fleet's, where fleets share it."""
    return f"{log} (its lines tagged {of_coordinator(host, pid)}...])"
