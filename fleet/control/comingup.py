"""A fleet coming up: its connection file published once every agent joined, and why it
cannot come up, as the coordinator's exit status for `fleet up` and `fleet run`
(fleet.control.client) to say.

- 3: the agents did not join in time, an agent (or its launcher) failed, or the
  connection file could not be written (the log says why).
- 4: the run directory's file system is full: the connection file found no room
  (ENOSPC, EDQUOT), or an agent died while the file system had too little room left
  (fleet.control.dirlimits.nearly_full; an agent whose first line found none died
  with an empty log). The clients say "its file system is full" and exit 4, as for a
  run directory full before anything started. Before 2026-12-06 the first was taken
  for a bug in handling a Join: the fleet waited out its --timeout and left an empty
  fleet.json behind; the second said only that an agent exited with status 1.
- Another fleet's connection file, there first, stops this one (exit 0): the client
  finds that fleet's file and says whose it is.
"""

from __future__ import annotations

import logging
import os
import socket
import time

from fleet.control import loopback, shellenv
from fleet.control.dirlimits import FULL_EXIT, nearly_full
from fleet.control.drain import FULL_ERRNOS
from fleet.wire import connection, events

log = logging.getLogger("fleet.control.coordinator")

NOT_UP, FULL = 3, FULL_EXIT  # the coordinator's exit statuses


NAMED = 10  # nodes named in the log line when agents did not join; the rest counted


def not_joined(c) -> str:
    """The nodes whose agents did not join, and where their output went, for the log
    line that says the fleet did not come up (before 2026-12-06 it gave counts only:
    which of 512 nodes hung was for the user to find)."""
    names = getattr(c.launcher, "names", None)
    if names is None:
        return ""
    joined = {a.node for a in c.agents.values()}
    missing = [n for n in names() if n not in joined]
    if not missing:
        return ""
    more = f" and {len(missing) - NAMED} more" if len(missing) > NAMED else ""
    return f"; not joined: {', '.join(missing[:NAMED])}{more} (their output: {c.launcher.output()})"


def unreached(c) -> str:
    """Where the agents were told to reach the coordinator, and how to choose another
    address, when some did not join: an agent that started but cannot reach that address
    (a firewall, the wrong network) says so only after its own join timeout, once this
    coordinator has given up and the launcher killed it (before 2026-12-06 nothing named
    the address). A loopback address is each node's own (fleet.control.loopback): said
    so in a batch job of more than one node (before 2026-12-07 nothing was, as for a
    fleet on this host alone, where it is nothing's cause)."""
    where = str(getattr(c, "agent_endpoint", "") or "")
    host = where.rpartition("://")[2].rpartition(":")[0].strip("[]")
    if host and loopback.is_loopback(host):
        if loopback.warning(host, "", c.expected, c.profile.launcher == "local") is None:
            return ""
        named = getattr(getattr(c, "transport", None), "named", "")
        return (f"; the agents were told to reach the coordinator at {where}, {loopback.said(named)}: on each "
                f"other node that is the node itself; {loopback.HOW}")
    if not host:
        return ""
    return (f"; the agents were told to reach the coordinator at {where}: if they started but cannot reach it, "
            f"give fleet up --advertise ADDR (or FLEET_ADVERTISE) an address of this host the nodes can reach")


def still_importing(c) -> str:
    """With preloads, what may hold the agents that did not join: an agent joins once its
    zygote has imported them, and the join timeout bounds that too (before 2026-12-06
    the docs said `fleet up --preload` had no time limit, and nothing here said so)."""
    if not c.preload:
        return ""
    modules = ",".join(c.preload)
    if c.connection_name == connection.NAME:
        what = "raise fleet up --timeout"
    else:  # (an embedded fleet of `fleet run`: fleet run --timeout; before 2026-12-06 a fixed 120 s)
        what = f"an embedded fleet waits {c.join_timeout_s:g} s: raise fleet run --timeout"
    return f" (their zygotes may still be importing the preloads {modules}: {what})"


class ComingUp:
    """The coordinator's side of coming up: `publish` when every agent joined, `check`
    every loop turn until the fleet is up."""

    def __init__(self, coord):
        self.coord = coord
        self.failed = 0  # the exit status once the fleet cannot come up (publish failed)

    def check(self, deadline: float) -> int:
        """The exit status (recorded) if the fleet cannot come up, else 0."""
        c = self.coord
        if c.ready:  # (up: nothing to check, and no wait4 per agent process each turn)
            return 0
        if self.failed:
            return self.failed
        if time.monotonic() > deadline:
            log.error("only %d of %d agents joined within %s s%s%s%s", len(c.agents), c.expected,
                      f"{c.join_timeout_s:g}", not_joined(c), still_importing(c), unreached(c))
            c.events.write(events.FleetFailed(t=time.time(), reason="agents did not join in time"))
            return NOT_UP
        if failed := c.launcher.failed():
            # (an agent that could not write its log died of the full disk, whatever it said)
            full = nearly_full(c.run_dir)
            reason = failed + (f"; {full}" if full else "")
            log.error("agent start failed: %s", reason)
            c.events.write(events.FleetFailed(t=time.time(), reason=reason))
            return FULL if full else NOT_UP
        return 0

    def publish(self, now: float) -> None:
        """Every agent joined: write the connection file (unless another fleet did
        first: then stop); the fleet is up. One that cannot be written fails the start."""
        c = self.coord
        if self.failed:
            return
        path = c.run_dir / c.connection_name
        try:
            connection.write(c.run_dir, c.connection_name, connection.Connection(
                client=c.client_endpoint, agents=c.agent_endpoint, pid=os.getpid(),
                host=socket.gethostname(), started=c.started, run_dir=str(c.run_dir),
                server_key=c.keys.server_public, client_public=c.keys.client_public,
                client_secret=c.keys.client_secret, job=connection.this_job(), cluster=connection.this_cluster(),
                cwd=connection.start_directory(), env_digests=shellenv.digests(), fleet=c.fleet_id))
        except FileExistsError:
            # Another coordinator won the race for this run directory: stop, and
            # leave its connection file alone (not ready: teardown does not remove it).
            log.error("%s appeared while this fleet was starting: another fleet is up in %s; stopping",
                      path, c.run_dir)
            c.events.write(events.FleetFailed(t=now, reason="another fleet is up in this run directory"))
            c.stopping = True
            return
        except OSError as e:
            self.failed = FULL if e.errno in FULL_ERRNOS else NOT_UP
            why = f"cannot write its connection file {path}: {e.strerror or e}"
            log.error("the fleet cannot come up: %s", why)
            c.events.write(events.FleetFailed(t=now, reason=why))
            return
        c.ready = True
        c.events.write(events.FleetUp(t=now, nodes=sorted(c.agents), no_cores=c.nocores.up()))
