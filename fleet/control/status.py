"""The coordinator's answer to `fleet status`: bounded, whatever the allocation's size.

The answer is the map a StatusReply carries (laid out for a terminal by
fleet.control.statusview)."""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import asdict
from pathlib import Path

from fleet.control import nodestatus
from fleet.core.deadline import as_counted
from fleet.core.scheduler import Scheduler

STATUS_RUNNING = 500  # running steps listed in one status answer
STATUS_READY = 50  # ready steps listed, the first of each class of demand (fleet.core.queueview)
STATUS_QUEUED = 50  # steps handed ahead to their nodes listed (fleet.core.window)
# The latest submissions listed (`submissions_total` counts them all): a session that
# submits small batches for hours made every answer grow ~81 bytes a submission ever
# made, for good (2,000 of them: 162 KiB an answer), before 2026-12-06.
STATUS_SUBMISSIONS = 50


def answer(sched: Scheduler, agents: list, *, up_since: float, run_dir: Path, failures: list,
           dropped: dict, submissions: list, loop: dict | None = None, nodes_from: int = -1,
           quiet_s: float | None = None, longer_only: bool = False, preloading: dict | None = None,
           wall=None, kept: dict | None = None) -> dict:
    """The status map. `agents` in the order to list them (fleet.control.liveness.Agent),
    `submissions` as fleet.control.submissions.Submission, in the order made (any sized,
    reversible collection: the coordinator's own dict view, not a copy of it); `loop`: the coordinator loop's
    lag and the submissions not yet in (fleet.control.liveness.Liveness.loop_figures).
    With `nodes_from` >= 0, only a page of the whole node table from there; the nodes
    part of the default answer is bounded (fleet.control.nodestatus). `longer_only`: the
    drain's close found every step left needs a longer allocation (fleet.control.closing).
    `preloading`: a submission held for its suite's preload (fleet.control.preloads.Preloads.waiting).
    `wall`: the coordinator's fleet.control.wallsteps.WallClock, by which its uptime and its
    running steps' ages are told on its monotonic clock (None: as the wall clock tells them).
    `kept`: what the submissions keep of their steps (fleet.control.submissions.Submissions.kept)."""
    if nodes_from >= 0:
        return nodestatus.page(sched, agents, nodes_from)
    now, mono = time.time(), time.monotonic()
    age = (lambda t: now - t) if wall is None else (lambda t: wall.age(t, now, mono))  # noqa: E731
    # The first STATUS_RUNNING running steps in start order, and how many run in all.
    views = sched.running(STATUS_RUNNING)
    running = [dict(step=v.id, node=v.placement[0].node if v.placement else None,
                    cores=sum(len(s.cores) for s in v.placement), attempt=v.attempt,
                    elapsed_s=round(age(v.started_at), 3) if v.started_at else None, **_phase(sched, v.id))
               for v in views]
    up = {} if wall is None else {"up_s": round(wall.up_s(mono), 3)}
    return dict(up_since=up_since, **up, run_dir=str(run_dir), pid=os.getpid(),
                **nodestatus.summary(sched, agents, quiet_s),
                counts=as_counted(sched.counts(), sched.deadline.drained, sched.deadline.held_now), running=running,
                running_total=sched.running_count(),
                queued=[dict(step=sid, node=node, after=after) for sid, node, after in sched.queued_on_nodes(STATUS_QUEUED)],
                failures=failures[-10:], dropped=dict(dropped),
                submissions=[_submission(s) for s in reversed(list(itertools.islice(reversed(submissions),
                                                                                    STATUS_SUBMISSIONS)))],
                submissions_total=len(submissions), **({"submissions_kept": kept} if kept is not None else {}),
                loop=loop or {}, allocation=_allocation(sched, longer_only, now), preloading=preloading,
                ready=[asdict(h) for h in sched.waiting_heads(now, STATUS_READY)],
                reservations=[asdict(r) for r in sched.reservations()],
                waiting_children=[dict(step=sid, phase=phase, stage=stage, waiting_for=n, children=total,
                                       **({"parent": p} if (p := sched.family(sid)[0]) else {}))
                                  for sid, phase, stage, n, total in sched.suspended(STATUS_RUNNING)])


def _submission(s) -> dict:
    """A submission's line: its steps, how many ended (`finished`), and of those the steps
    the drain's close counted ended unstarted (`not_started`: fleet.control.closing), which
    `finished` leaves out (before 2026-12-07 it counted them: "20/20 finished (100%)" of a
    suite two of whose steps never started)."""
    n = s.step_count()  # (its steps may have been let go: fleet.control.submission)
    out = dict(id=s.id, suite=s.suite, steps=n, finished=n - s.remaining - s.not_started)
    if s.not_started:
        out["not_started"] = s.not_started
    return out


def _allocation(sched: Scheduler, longer_only: bool, now: float) -> dict | None:
    """The end and the drain (fleet.core.deadline), and whether what the drain left needs a
    longer allocation (then fleet status does not say the next run goes on). `left_s`: the
    time left, by this clock stepped as the scheduler knows (the monotonic deadline), so
    that a reader on another host, or after a step of the wall clock, need not guess it."""
    shown = sched.deadline.shown()
    if shown is not None and longer_only:
        shown["longer_only"] = True
    if shown is not None and shown["end"] is not None:
        shown["left_s"] = round(shown["end"] + shown["shift"] - now, 3)
    return shown


def _phase(sched: Scheduler, sid: str) -> dict:
    """A running step's parent, phase and stage, where it has them (fleet.core.phases)."""
    parent, phase, stage, _, _ = sched.family(sid)
    return {k: v for k, v in (("parent", parent), ("phase", phase), ("stage", stage)) if v}

