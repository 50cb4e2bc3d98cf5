"""How long a gone fleet's started steps wait before they run again here.

A fleet found gone (its coordinator killed, its lease or registration stale: fleet.control
.claimlog) leaves its agents behind: on this host they may still be stopping its steps
(SIGTERM, a step's trap, its grace), on another host they go on until their fence
(fleet.wire.fencing: the agent stops its steps once it has not heard its coordinator for
3/4 of the heartbeat timeout, SIGKILL 2 s later). Before 2026-12-07 another fleet ran
them again at once: a step that took 2 s to stop ran in two fleets at once, in the same
work directory. A lost node's steps already waited for that (fleet.core.fencing); a
gone fleet's now do too, from its last sign of life:

- its last sign of life: when it last refreshed its lease or registration (its mtime,
  or when this fleet last saw it change, whichever is earlier), plus one refresh
  interval (it may have lived until just before its next refresh), and never later than
  when this fleet found it gone;
- then its agents' fence and grace, and a heartbeat of slack: `stops_s` in its lease
  or registration (fleet.wire.fencing.relaunch_after of its own heartbeat settings,
  since 2026-12-07), else this fleet's own.

Only the steps its journal says it started (and those it handed to a node ahead) wait:
a step it only claimed ahead never ran anywhere. The wait is one deadline per gone
fleet (fleet.control.claims parks its steps under it and looks at them again once, when
it has passed), nothing per step; a step the gone fleet finished (its marker) or failed
(its final record) is settled at once, as before.
"""

from __future__ import annotations

import time

from fleet.control import store
from fleet.wire import fencing, sightings

# Without a word of the gone fleet's own settings, nor this fleet's: the defaults' wait
# (--heartbeat 1 --heartbeat-timeout 10: 7.5 + 2 + 1 s).
DEFAULT_STOPS_S = fencing.relaunch_after(1.0, 10.0)


def stops_here(coord) -> float | None:
    """This fleet's own `stops_s` (its coordinator's heartbeat settings), said in its lease or registration."""
    timeout = getattr(coord, "timeout_s", None)
    return None if timeout is None else fencing.relaunch_after(coord.heartbeat_s, timeout)


def stops_of(rec: dict | None, default: float | None) -> float:
    """How long the fleet of a lease or registration record says its steps may run on
    after its last sign of life (`stops_s`), else `default` (this fleet's own)."""
    s = rec.get("stops_s") if isinstance(rec, dict) else None
    if isinstance(s, (int, float)) and 0 <= s < 1e6:
        return float(s)
    return DEFAULT_STOPS_S if default is None else default


def until(died: dict | None, found_at: float, stops_s: float | None, refresh_s: float) -> float:
    """When (this host's clock) a fleet found gone at `found_at` has stopped every step it
    ran, at the latest (see the module's docstring). `died`: its lease or registration as
    last seen, with `refreshed` (fleet.control.lease); `stops_s`, `refresh_s`: this
    fleet's own, for a record that does not say its own."""
    died = died if isinstance(died, dict) else {}
    refreshed = died.get("refreshed")
    alive = found_at
    if isinstance(refreshed, (int, float)):
        alive = min(found_at, float(refreshed) + sightings.refresh_of(died, refresh_s))
    return alive + stops_of(died, stops_s)


def at_start(log, replayed) -> None:
    """The journals a starting fleet replayed (`replayed`): the steps each of those fleets
    that died holding its lease or registration had started wait (log: the claims log)."""
    died = log.lease.died
    for j in replayed:
        fleet = j.fleet.get("fleet")
        if fleet in died:
            log.fence(fleet, died[fleet], j.running)


def waits(log, step: str, adopt: dict) -> store.Claim | None:
    """A step a dead fleet was running (`adopt`: fleet.control.recording's), to start here
    alone: ELSEWHERE (held by that fleet) until its run there must have stopped, else None."""
    gone = (adopt.get(step) or {}).get("fleet")
    if log.fenced(step, gone, time.time()) is None:
        return None
    c = store.Claim(store.Claim.ELSEWHERE, f"its fleet {gone} is gone; its run there may still be stopping")
    c.holder = gone
    return c
