"""The coordinator's answer to `fleet status`: bounded, whatever the allocation's size.

The answer is the map a StatusReply carries (laid out for a terminal by
fleet.control.statusview)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from fleet.core.scheduler import Scheduler

STATUS_RUNNING = 500  # running steps listed in one status answer


def answer(sched: Scheduler, agents: list, *, up_since: float, run_dir: Path, failures: list,
           dropped: dict, submissions: list, loop: dict | None = None) -> dict:
    """The status map. `agents` in the order to list them (fleet.control.liveness.Agent),
    `submissions` as fleet.control.submissions.Submission; `loop`: the coordinator loop's
    lag and the submissions not yet in (fleet.control.liveness.Liveness.loop_figures)."""
    now = time.time()
    # The first STATUS_RUNNING running steps in start order, and how many run in all.
    views = sched.running(STATUS_RUNNING)
    running = [dict(step=v.id, node=v.placement[0].node if v.placement else None,
                    cores=sum(len(s.cores) for s in v.placement), attempt=v.attempt,
                    elapsed_s=round(now - v.started_at, 3) if v.started_at else None, **_phase(sched, v.id))
               for v in views]
    return dict(up_since=up_since, run_dir=str(run_dir), pid=os.getpid(),
                nodes=_nodes(sched, agents), counts=sched.counts(), running=running,
                running_total=sched.running_count(), failures=failures[-10:], dropped=dict(dropped),
                submissions=[dict(id=s.id, suite=s.suite, steps=len(s.steps),
                                  finished=len(s.steps) - s.remaining) for s in submissions],
                loop=loop or {}, allocation=sched.deadline.shown(),
                waiting_children=[dict(step=sid, phase=phase, stage=stage, waiting_for=n, children=total,
                                       **({"parent": p} if (p := sched.family(sid)[0]) else {}))
                                  for sid, phase, stage, n, total in sched.suspended(STATUS_RUNNING)])


def _phase(sched: Scheduler, sid: str) -> dict:
    """A running step's parent, phase and stage, where it has them (fleet.core.phases)."""
    parent, phase, stage, _, _ = sched.family(sid)
    return {k: v for k, v in (("parent", parent), ("phase", phase), ("stage", stage)) if v}


def _nodes(sched: Scheduler, agents: list) -> list[dict]:
    """Each agent's node and what of it is held; one that never reached the scheduler is not alive."""
    nodes = []
    specs = {n.name: n for n in sched.pool.nodes()}
    for a in agents:
        spec = specs.get(a.node)
        if spec is not None:
            free_c, free_g, free_m = sched.pool.free_on(a.node)
            nodes.append(dict(node=a.node, host=a.host, alive=a.alive, cores=len(spec.cores),
                              cores_busy=len(spec.cores) - free_c, gpus=len(spec.gpus),
                              gpus_busy=len(spec.gpus) - free_g, memory=spec.memory,
                              memory_held=spec.memory - free_m, memory_used=a.memory_used, memlimit=a.memlimit))
        else:
            nodes.append(dict(node=a.node, host=a.host, alive=False))
    return nodes
