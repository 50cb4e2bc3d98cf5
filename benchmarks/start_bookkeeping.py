"""The coordinator's per-step bookkeeping around a step's start and end, timed in one
process per tree, trees alternated (as benchmarks/msg_path_jobs.py): what a lone
fleet (the run directory's lease held alone, the common case) does per step in
Recorder.claim (may it start: the attempts known, what runs remembered for its marker,
the journal's start), Coordinator._started (the report checked, the `started` line),
Coordinator._exited (the report checked, the `exit` line; the coordinator's other
parts it calls are left out) and Recorder.exited for a success (the marker's and
attempt's texts, the journal line, the marker owed); and a step's definition hash,
taken for each step of a submission on the worker thread (in the coordinator's process).

    python benchmarks/start_bookkeeping.py --trees /tmp/base,. [--rounds 5] [--out FILE]

Each tree is put first on PYTHONPATH of a child process that times every job (best
of 5 repeats of 10,000 calls, in the thread's CPU time: a loaded machine's preemption is
not counted; claim and exit take a new step each call, as a run
does); the rounds alternate the trees and the best per tree is kept. The same calls
in every tree (a real Recorder on a run directory under /tmp, a real Scheduler, the
coordinator's own methods on a stand-in holding what they read), so any two compare.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
import timeit
from pathlib import Path

import _trees  # noqa: E402
from types import SimpleNamespace

N, REPEAT = 10_000, 5


def _coordinator_stand_in(sched, specs):
    from fleet.control.coordinator import Coordinator
    nothing = lambda *a, **k: None  # noqa: E731
    c = SimpleNamespace(sched=sched, specs=specs, stopping=False, drain=SimpleNamespace(drained=False),
                        transport=SimpleNamespace(warn=nothing), events=SimpleNamespace(fleet="f-1", write_encoded=nothing),
                        intake=SimpleNamespace(children=SimpleNamespace(exited=nothing)),
                        recorder=SimpleNamespace(exited=nothing))
    if hasattr(Coordinator, "_view"):  # (older trees: the whole view, through this)
        c._view = lambda step: Coordinator._view(c, step)
    return Coordinator, c


def jobs() -> dict:
    """us per call of each job, in this process's fleet."""
    from fleet.control import store
    from fleet.control.claims import Claims
    from fleet.control.eventlines import Ended
    from fleet.control.recording import Recorder
    from fleet.core.decisions import NodeJoined, Start, submission
    from fleet.core.resources import NodeSpec, Slot
    from fleet.core.scheduler import Scheduler
    from fleet.core.suite import parse_suite
    from fleet.wire import messages as P
    from fleet.wire import records, spechash

    total = N * REPEAT
    tmp = Path(tempfile.mkdtemp(prefix="start-bookkeeping-"))
    run_dir = tmp / "run"
    specs = parse_suite({"steps": [{"id": "s/{i}", "array": f"1-{total}", "command": "true"}]},
                        run_dir / "s.toml").steps
    by_id = {s.id: s for s in specs}
    for s in specs:  # as a submission does, on its worker thread (fleet.control.submissions): timed apart
        records.spec_hash(s)
    fresh = iter(parse_suite({"steps": [{"id": "h/{i}", "array": f"1-{total}", "command": "run {i}"}]},
                             run_dir / "h.toml").steps)
    sched = Scheduler()
    sched.handle(NodeJoined(NodeSpec("node17", tuple(range(64)), (), 64 << 30)), 0.0)
    d = next(x for x in sched.handle(submission(specs), 0.0) if isinstance(x, Start))
    store.declared(run_dir, specs, {s.id: s.deps for s in specs}, {}, {})
    c = SimpleNamespace(run_dir=run_dir, fleet_id="f-1", sched=sched, _todo=[],
                        submissions=SimpleNamespace(step_subs={}, rerun={}, specs=by_id, durable=None))
    c.claims = Claims(run_dir, "f-1", sched, by_id, None, stale_after=600.0, max_attempts=5)
    rec = Recorder(c)
    slot = Slot("node17", (5,), (), 1 << 30)
    starts = [Start(s.id, 1, (slot,)) for s in specs]
    exits = [P.Exited(step=s.id, attempt=1, pid=4242, outcome="succeeded", returncode=0, signal=None,
                      decided_at=1.5e9, first_at=1.5e9, work_start=1.5e9, work_end=1.5e9 + 0.25, ended_at=1.5e9 + 0.3,
                      utime=0.0, stime=0.0, maxrss_kb=9000, affinity=(5,), placement_ok=True, error=None)
             for s in specs]
    ended = Ended("", 0.25, [5])
    started = P.Started(step=d.step, attempt=1, pid=4242, pgid=4242, at=1.5e9)
    exited = P.Exited(step=d.step, attempt=1, pid=4242, outcome="succeeded", returncode=0, signal=None,
                      decided_at=1.5e9, first_at=1.5e9, work_start=1.5e9, work_end=1.5e9, ended_at=1.5e9,
                      utime=0.0, stime=0.0, maxrss_kb=9000, affinity=(5,), placement_ok=True, error=None)
    node = d.placement[0].node
    Coord, coord = _coordinator_stand_in(sched, by_id)
    ci, ei = iter(range(total)), iter(range(total))

    def claim():
        i = next(ci)
        rec.claim(starts[i], specs[i])

    def success():
        i = next(ei)
        rec.exited("node17", exits[i], ended, specs[i])

    t = lambda f: round(min(timeit.repeat(f, number=N, repeat=REPEAT, timer=time.thread_time)) / N * 1e6, 3)  # noqa: E731
    try:
        out = {"Recorder.claim (alone)": t(claim),
               "Coordinator._started": t(lambda: Coord._started(coord, node, started, 1.5e9)),
               "Coordinator._exited (check, exit line)": t(lambda: Coord._exited(coord, node, exited, 1.5e9)),
               "Recorder.exited (a success)": t(success),
               "definition hash (at submission, worker thread)": t(lambda: spechash.spec_hash(next(fresh)))}
    finally:
        rec.lease.release()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


if __name__ == "__main__":
    sys.exit(_trees.main(__file__, jobs, 5))
