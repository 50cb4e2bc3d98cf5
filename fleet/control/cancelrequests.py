"""Asking fleets to cancel steps: `fleet cancel` asks every live fleet of a run
directory, fleet.Fleet.cancel its own (the coordinator's side: fleet.control.cancelling)."""

from __future__ import annotations

import sys
from pathlib import Path

from fleet.control import jobfleets
from fleet.control.client import Client, FleetError, live
from fleet.wire import messages as P


def cancel(run_dir: Path, steps: list[str], waiting: bool = False, every: bool = False,
           any_job: bool = False) -> P.CancelReply:
    """Cancel steps in the live fleets of run_dir (fleet.control.cancelling): those named
    (each in the fleet that has it), and with `waiting` every step not yet started, with
    `every` every step not yet ended. If a named step is in no fleet, nothing is
    cancelled: the answer's `unknown` names it. FleetError if no fleet is up. Inside a
    batch job, only this job's fleets unless any_job: another job's are left alone, a
    line on stderr saying so (fleet.control.jobfleets)."""
    fleets, theirs = jobfleets.split(live(Path(run_dir).resolve()), any_job)
    for path, conn in theirs:
        print(jobfleets.left_alone(conn, path, "fleet cancel", "cancels there too"), file=sys.stderr, flush=True)
    if theirs and (note := jobfleets.this_job_ended("fleet cancel")):
        print(note, file=sys.stderr, flush=True)
    if not fleets:
        raise FleetError(f"no fleet {'of this job ' if theirs else ''}is up in {run_dir}")
    clients = [Client(conn) for _, conn in fleets]
    try:
        return cancel_in(clients, steps, waiting, every)
    finally:
        for c in clients:
            c.close()


def cancel_in(clients: list, steps: list[str], waiting: bool = False, every: bool = False) -> P.CancelReply:
    """cancel() in the fleets of these clients (fleet.Fleet.cancel: its own alone)."""
    # First ask which fleet has which step, so an unknown id cancels nothing anywhere.
    checks = [c.ask(P.Cancel(list(steps), check=True), timeout=10.0) for c in clients]
    unknown = [s for s in dict.fromkeys(steps) if all(s in r.unknown for r in checks)]
    if unknown:
        return P.CancelReply(unknown=unknown)
    running: list[str] = []
    waiting_: list[str] = []
    ended: list[str] = []
    for c, check in zip(clients, checks):
        mine = [s for s in steps if s not in check.unknown]
        r = c.ask(P.Cancel(mine, waiting, every), timeout=10.0)
        running += r.running
        waiting_ += r.waiting
        ended += r.ended
    # A step two fleets share ended (or runs) in one of them: named once, as it is where it runs.
    acted = set(running) | set(waiting_)
    return P.CancelReply(running, waiting_, [s for s in dict.fromkeys(ended) if s not in acted])
