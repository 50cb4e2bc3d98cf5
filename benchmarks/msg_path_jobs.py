"""The coordinator's per-step jobs on the message and decision path, timed in one
process per tree, trees alternated: decoding an agent's Started and Exited, making
and encoding the Launch, a step's view (Scheduler.view, looked at on each report).

    python benchmarks/msg_path_jobs.py --trees /tmp/base,. [--rounds 7] [--out FILE]

Each tree is put first on PYTHONPATH of a child process that times every job (best of
5 repeats of 20,000, in the thread's CPU time: a loaded machine's
preemption is not counted); the rounds alternate the trees, and the best per tree is kept.
The same public calls in every tree (fleet.wire.messages.decode/encode,
fleet.control.launching.launch, Scheduler.view), so any two trees compare.
"""

from __future__ import annotations

import sys
import time
import timeit
from pathlib import Path

import _trees  # noqa: E402

N, REPEAT = 20_000, 5


def jobs() -> dict:
    """us per call of each job, in this process's fleet."""
    from fleet.control import launching
    from fleet.core.decisions import NodeJoined, Start, submission
    from fleet.core.resources import NodeSpec
    from fleet.core.scheduler import Scheduler
    from fleet.core.suite import parse_suite
    from fleet.site.profiles import Profile
    from fleet.wire import messages as P

    started = P.encode(P.Started(step="s/123", attempt=1, pid=4242, pgid=4242, at=1.5e9))
    exited = P.encode(P.Exited(step="s/123", attempt=1, pid=4242, outcome="succeeded", returncode=0, signal=None,
                               decided_at=1.5e9, first_at=1.5e9, work_start=1.5e9, work_end=1.5e9, ended_at=1.5e9,
                               utime=0.0, stime=0.0, maxrss_kb=9000, affinity=(5,), placement_ok=True, error=None))
    spec = parse_suite({"steps": [{"id": "s/{i}", "array": "1-2", "command": "true"}]}, Path("/run/s.toml")).steps[0]
    sched = Scheduler()
    sched.handle(NodeJoined(NodeSpec("node17", tuple(range(64)), (), 64 << 30)), 0.0)
    d = next(x for x in sched.handle(submission([spec]), 0.0) if isinstance(x, Start))
    run_dir, profile = Path("/run"), Profile("local", "")
    msg = launching.launch(profile, spec, d, run_dir, "f")
    t = lambda f: round(min(timeit.repeat(f, number=N, repeat=REPEAT, timer=time.thread_time)) / N * 1e6, 3)  # noqa: E731
    return {"decode Started": t(lambda: P.decode(started)), "decode Exited": t(lambda: P.decode(exited)),
            "Launch made": t(lambda: launching.launch(profile, spec, d, run_dir, "f")),
            "Launch encoded": t(lambda: P.encode(msg)), "step view": t(lambda: sched.view(d.step))}


if __name__ == "__main__":
    sys.exit(_trees.main(__file__, jobs, 7, lambda b: sum(b.values()) + b["step view"]))
