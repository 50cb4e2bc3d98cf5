"""How an attempt ended, as the event stream and the run directory keep it.

An exit an agent reported is recorded with its times, rusage and the split between
startup and the step's own work; one killed by a signal also names what ran beside
it on its node, since that is usually who took the memory (and says so where its node
saw the kernel's OOM killer take it within its own memory: `oom_kills`). One the fleet itself
stopped (it was going down) is "interrupted": that is no attempt of the step, and its
neighbours are not suspects.

Attempt records carry what `fleet audit` needs to tell a legitimate rerun from a step
that ran twice: the definition's hash (`spec`), why it ran again (`rerun`: "forced",
"changed", "dependency changed", "removed" or "") and the submission that ran it (`submission`,
with the record's `fleet`: the key of its fleet.wire.manifest record).
"""

from __future__ import annotations

import signal
from pathlib import Path

from fleet.control import eventlines, store
from fleet.core import states as S
from fleet.core.scheduler import Scheduler
from fleet.wire import events
from fleet.wire import messages as P
from fleet.wire.fencing import UNHEARD
from fleet.wire.numtext import work_seconds
from fleet.wire.records import spec_hash

STOPPED_WITH_FLEET = "stopped with the fleet (it was going down)"


def reported_exit(now: float, node: str, msg: P.Exited, view, sched: Scheduler) -> events.Exit:
    """The `exit` record of an attempt its agent reported; `view` is the step as the
    scheduler holds it (its placement)."""
    neighbours = None
    reason = msg.error or ""
    if msg.outcome == S.TERMINATED and not (msg.error and UNHEARD in msg.error):  # (its agent's stop: said so)
        neighbours = [dict(step=v.id, cores=v.spec.cores, memory=v.spec.memory, gpus=v.spec.gpus)
                      for v in sched.running_on(node) if v.id != msg.step]
        sig = signal.Signals(msg.signal).name if msg.signal else "a signal"
        # Its node says so where the kernel's OOM killer took it (fleet.node.memwatch.oom_note).
        head = msg.error if msg.oom_kills and msg.error else f"killed by {sig}"
        reason = (f"{head}; running beside it on {node}: "
                  + (", ".join(f"{n['step']} (cores={n['cores']}, memory={n['memory'] or 'share'}, gpus={n['gpus']})"
                               for n in neighbours) or "nothing"))
    return eventlines.record(  # an events.Exit (fleet.control.eventlines)
        events.Exit, t=now, step=msg.step, attempt=msg.attempt, node=node, outcome=msg.outcome, reason=reason,
        returncode=msg.returncode, signal=msg.signal,
        cores=[c for s in view.placement for c in s.cores],
        gpus=[g for s in view.placement for g in s.gpus],
        memory=sum(s.memory for s in view.placement),
        decided_at=msg.decided_at, first_at=msg.first_at, work_start=msg.work_start,
        work_end=msg.work_end, ended_at=msg.ended_at,
        startup_s=round(max(0.0, msg.work_start - msg.decided_at), 6),
        work_s=work_seconds(msg.work_start, msg.work_end, msg.worked_s),
        utime=msg.utime, stime=msg.stime, maxrss_kb=msg.maxrss_kb, error=msg.error, neighbours=neighbours,
        memory_peak=msg.memory_peak, oom_kills=msg.oom_kills)


def written(log, now: float, node: str, msg: P.Exited, view, sched: Scheduler):
    """Write a reported exit's `exit` record (after its placement mismatch, if any) and
    return what else reads it: the record itself for a step killed by a signal (it names
    its neighbours), else its line put together by shape (fleet.control.eventlines.exit_line)."""
    if msg.outcome == S.TERMINATED:
        rec = reported_exit(now, node, msg, view, sched)
        if not msg.placement_ok:
            log.write(mismatch(now, node, msg, rec.cores))
        log.write(rec)
        return rec
    line, ended = eventlines.exit_line(log.fleet, now, node, msg, view)
    if not msg.placement_ok:
        log.write(mismatch(now, node, msg, ended.cores))
    log.write_encoded((line,))
    return ended


def interrupted_exit(now: float, node: str, msg: P.Exited, view, why: str = STOPPED_WITH_FLEET) -> events.Exit:
    """The `exit` record of an attempt the fleet stopped while going down (or draining
    before the allocation's end: `why`): its times and status as reported, outcome
    interrupted, and no neighbours (nothing beside it is to blame)."""
    how = msg.error or (f"exit status {msg.returncode}" if msg.returncode else "")
    return events.Exit(
        t=now, step=msg.step, attempt=msg.attempt, node=node, outcome=S.INTERRUPTED,
        reason=why + (f"; {how}" if how else ""), returncode=msg.returncode, signal=msg.signal,
        cores=[c for s in view.placement for c in s.cores], gpus=[g for s in view.placement for g in s.gpus],
        memory=sum(s.memory for s in view.placement), decided_at=msg.decided_at, first_at=msg.first_at,
        work_start=msg.work_start, work_end=msg.work_end, ended_at=msg.ended_at,
        startup_s=round(max(0.0, msg.work_start - msg.decided_at), 6),
        work_s=work_seconds(msg.work_start, msg.work_end, msg.worked_s),
        utime=msg.utime, stime=msg.stime, maxrss_kb=msg.maxrss_kb, error=msg.error)


def unreported_interrupted(now: float, view, why: str = STOPPED_WITH_FLEET) -> events.Exit:
    """The `exit` record of a step still running when the fleet's agents were gone
    (`why`: the fleet went down, or the drain's reason): interrupted, though its exit
    never reached the coordinator."""
    return events.Exit(t=now, step=view.id, attempt=view.attempt,
                       node=view.placement[0].node if view.placement else None, outcome=S.INTERRUPTED,
                       reason=why + "; its agent did not report its end",
                       cores=[c for s in view.placement for c in s.cores],
                       gpus=[g for s in view.placement for g in s.gpus],
                       memory=sum(s.memory for s in view.placement))


def record_unreported(sched: Scheduler, interrupted: set, log_, now: float) -> None:
    """Steps still running when the agents are gone (or would not say goodbye in
    time): interrupted too, though no exit was reported (moved here from the
    coordinator, unchanged, to make room there)."""
    for v in sched.running():
        if v.id not in interrupted:
            interrupted.add(v.id)
            log_.write(unreported_interrupted(now, v))


def mismatch(now: float, node: str, msg: P.Exited, given: list) -> events.PlacementMismatch:
    """The record of a step whose process ran on other cores than it was given."""
    return events.PlacementMismatch(t=now, step=msg.step, attempt=msg.attempt, node=node, given=given,
                                    actual=list(msg.affinity))


def store_reported(run_dir: Path, fleet_id: str, node: str, msg: P.Exited, rec: events.Exit, spec, *,
                   rerun: str = "", submission: int | None = None, sink=store) -> bool:
    """The attempt record of a reported exit and, for a success, the done marker;
    True if the step succeeded here (its claim is then to be released). `rerun` says
    why a step that had succeeded runs again; `submission` is this fleet's number of
    the submission that ran it. `sink` writes them: per-step files (fleet.control.store),
    or the journal of a fleet holding the run directory's lease (fleet.control.recording)."""
    sink.record_attempt(run_dir, msg.step, fleet_id, msg.attempt, {
        "outcome": msg.outcome, "node": node, "reason": rec.reason, "work_s": rec.work_s,
        "started_at": msg.work_start, "ended_at": msg.ended_at,
        "spec": spec_hash(spec) if spec is not None else None, "rerun": rerun, "submission": submission})
    if msg.outcome == S.SUCCEEDED and spec is not None:
        sink.write_done(run_dir, spec, {
            "attempt": msg.attempt, "node": node, "work_s": rec.work_s, "ended_at": msg.ended_at,
            "fleet": fleet_id})
        return True
    return False
