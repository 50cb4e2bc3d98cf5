"""The claims upkeep (fleet.control.claims: Claims.tend) with many steps waiting for
another fleet, the other fleet a real process on real files: each period it looks only
at the steps the claims log named since, not at every waiting step; when the holder is
killed with SIGKILL, at every step it held, each taken back once."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

from fleet.control import claimlog
from fleet.control.claims import Claims
from fleet.control.lease import Lease
from fleet.core.scheduler import Reclaim
from fleet.wire.events import EventLog

STEPS = [f"s/{i}" for i in range(5000)]


def _holder(run_dir: str, cmds, acks) -> None:
    lease = Lease(Path(run_dir), "holder", 600.0)
    lease._register()
    log = claimlog.ClaimLog(Path(run_dir), "holder", lease, lambda fleet: None)
    log.claim(STEPS, lambda s: None)
    acks.put("claimed")
    while True:
        steps = cmds.get()
        while not log._write(steps):  # a batch naming them again, as one that changes them would
            log.follow()  # (the waiting fleet wrote this number: its busy_since, fleet.control.claims)
        acks.put("written")


class _Spec:  # what the upkeep asks of a step's definition (no marker is on disk)
    def __init__(self, sid: str):
        self.id = sid


class _Sched:
    def running(self):
        return []


def test_the_upkeep_looks_only_at_waiting_steps_the_log_named_since_and_at_all_of_a_killed_holder(tmp_path):
    ctx = multiprocessing.get_context("fork")
    cmds, acks = ctx.Queue(), ctx.Queue()
    holder = ctx.Process(target=_holder, args=(str(tmp_path), cmds, acks))
    holder.start()
    try:
        assert acks.get(timeout=60) == "claimed"
        lease = Lease(tmp_path, "me", 600.0)
        lease._register()
        events = EventLog(tmp_path / "events.jsonl")
        c = Claims(tmp_path, "me", _Sched(), {s: _Spec(s) for s in STEPS}, events, stale_after=600.0, max_attempts=0)
        c.log = claimlog.ClaimLog(tmp_path, "me", lease, lambda fleet: None)
        now = time.time()
        for s in STEPS:  # decided here, found held by the other fleet (as not_ours does)
            c.elsewhere[s] = ("holder", now, False)
        c._poll.update(STEPS)
        assert list(c.tend(now)) == [] and c.examined == len(STEPS)  # each new step once
        for k in range(3):
            cmds.put(STEPS[k * 7:(k + 1) * 7])
            assert acks.get(timeout=60) == "written"
            before = c.examined
            assert list(c.tend(now + 1 + k)) == []
            assert c.examined - before == 7  # the seven the log named, not all 5,000
        before = c.examined
        assert list(c.tend(now + 10)) == [] and c.examined == before  # nothing changed: nothing looked at
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(30)
        c.log._looked = -1e9  # (its view of who is live is a second old at most)
        got = list(c.tend(now + 20))
        assert sorted(e.step for e in got if isinstance(e, Reclaim)) == sorted(STEPS)
        assert c.examined - before == len(STEPS) and not c.elsewhere
        events.close()
    finally:
        if holder.is_alive():
            holder.kill()
            holder.join(30)
