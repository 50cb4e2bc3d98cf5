"""The coordinator's per-step record jobs by shape (branch cpurec), before and after, in
one process: what each costs per step, timed alternately (best of rounds), so that a
difference of a few microseconds shows through a shared machine's noise.

"Before" is the code at 6de7fab, kept here as it was: the `exit` record made, mapped by
to_dict and encoded; the `start` and `started` lines built as dicts and encoded; a
success's attempt record and marker built as dicts by fleet.control.store (a Path for
the attempt file and for the marker) and encoded; the step's .fleet Path made by three
joins; an in-flight attempt a frozen dataclass. "After" is what the coordinator runs now
(fleet.control.linetext, eventlines.exit_line/start/started, doneline.texts,
records.fleet_dir, store._Attempt).

    python benchmarks/record_shapes.py        # prints JSON (results/record_shapes.json)
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import sys
import timeit
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from fleet.control import doneline, eventlines, outcomes, store  # noqa: E402
from fleet.core.decisions import Start  # noqa: E402
from fleet.core.resources import Slot  # noqa: E402
from fleet.core.suite import parse_suite  # noqa: E402
from fleet.wire import events, records  # noqa: E402
from fleet.wire import messages as P  # noqa: E402

dumps = events.dumps
RUN = Path("/nonexistent/cpurec-bench/run")
SLOT = Slot("node0017", (5,), (), 1 << 30)
D = Start("s/12345", 1, (SLOT,))
VIEW = SimpleNamespace(placement=(SLOT,))
STARTED = P.Started(step="s/12345", attempt=1, pid=4242, pgid=4242, at=1796091680.5012345)
EXITED = P.Exited(step="s/12345", attempt=1, pid=4242, outcome="succeeded", returncode=0, signal=None,
                  decided_at=1796091680.4997356, first_at=1796091680.5012, work_start=1796091680.51234567,
                  work_end=1796091680.5134, ended_at=1796091680.5139, utime=0.0, stime=0.0, maxrss_kb=9000,
                  affinity=(5,), placement_ok=True, error=None)
NOW, FLEET = 1796091681.0123456, "host-1234-abcdef"
SPEC = parse_suite({"steps": [{"id": "dep", "command": "true"}, {"id": "s/12345", "command": "true", "deps": ["dep"]}]},
                   Path("/nonexistent/s.toml")).step("s/12345")
REC = outcomes.reported_exit(NOW, "node0017", EXITED, VIEW, None)
_ids = (f"s/{i}" for i in itertools.count())


def start_before(fleet, now, d):
    p = d.placement
    out = {"t": round(now, 6), "kind": "start"}
    if fleet:
        out["fleet"] = fleet
    out["step"], out["attempt"], out["node"] = d.step, d.attempt, p[0].node
    s = p[0]
    out["cores"], out["gpus"], out["memory"], out["nodes"] = list(s.cores), list(s.gpus), s.memory, [s.node]
    out["placement"] = [{"node": s.node, "cores": list(s.cores), "gpus": list(s.gpus), "memory": s.memory} for s in p]
    return dumps(out)


def started_before(fleet, now, node, msg):
    out = {"t": round(now, 6), "kind": "started"}
    if fleet:
        out["fleet"] = fleet
    out["step"], out["attempt"], out["node"], out["pid"], out["at"] = msg.step, msg.attempt, node, msg.pid, msg.at
    return dumps(out)


def success_before():
    """store_reported's records through the journal (recording at 6de7fab): the attempt
    record and its file's Path, the marker and its Path, both encoded, the line."""
    store.flying(RUN, SPEC, 1, 1)
    rec = REC  # (the exit record's cost is the first job's)
    _, att = store.attempt_record(RUN, SPEC.id, FLEET, 1, {
        "outcome": "succeeded", "node": "node0017", "reason": rec.reason, "work_s": rec.work_s,
        "started_at": EXITED.work_start, "ended_at": EXITED.ended_at, "spec": records.spec_hash(SPEC), "rerun": "",
        "submission": 1})
    path, marker = store.done_record(RUN, SPEC, {"attempt": 1, "node": "node0017", "work_s": rec.work_s,
                                                 "ended_at": EXITED.ended_at, "fleet": FLEET})
    text = dumps(marker)
    return f'{{"k":"done","step":{dumps(SPEC.id)},"rec":{text},"att":{dumps(att)},"t":{NOW!r}}}', os.fspath(path)


def success_after():
    store.flying(RUN, SPEC, 1, 1)
    d, ran, deps, gen, mid = store.succeeded(RUN, SPEC, 1)
    marker, att = doneline.texts(FLEET, "node0017", EXITED, REC.work_s, REC.reason, ran, deps, gen, mid, "", 1,
                                 records.spec_hash(SPEC))
    return f'{{"k":"done","step":{doneline.esc(SPEC.id)},"rec":{marker},"att":{att},"t":{NOW!r}}}', \
        f"{RUN}/steps/{SPEC.id}/.fleet/done.json"


@dataclasses.dataclass(frozen=True)
class _AttemptBefore:
    seq: int
    attempt: int
    generation: int
    spec: str
    deps: tuple


JOBS = {
    "exit record": (lambda: dumps(outcomes.reported_exit(NOW, "node0017", EXITED, VIEW, None).to_dict(FLEET)),
                    lambda: eventlines.exit_line(FLEET, NOW, "node0017", EXITED, VIEW)),
    "start line": (lambda: start_before(FLEET, NOW, D), lambda: eventlines.start(FLEET, NOW, D)),
    "started line": (lambda: started_before(FLEET, NOW, "node17", STARTED),
                     lambda: eventlines.started(FLEET, NOW, "node17", STARTED)),
    "a success's journal line and marker path": (success_before, success_after),
    "a new step's .fleet Path": (lambda: RUN / "steps" / next(_ids) / ".fleet",
                                 lambda: records.fleet_dir.__wrapped__(RUN, next(_ids))),
    "an in-flight attempt": (lambda: _AttemptBefore(1, 1, 1, "h", ()), lambda: store._Attempt(1, 1, 1, "h", ())),
}


def main() -> int:
    n, rounds = 20_000, 7
    out = {}
    for name, (before, after) in JOBS.items():
        assert name != "exit record" or before() == after()[0]
        b = a = float("inf")
        for _ in range(rounds):  # alternately, best of rounds: the machine is shared
            b = min(b, timeit.timeit(before, number=n) / n * 1e6)
            a = min(a, timeit.timeit(after, number=n) / n * 1e6)
        out[name] = {"before_us": round(b, 2), "after_us": round(a, 2)}
    out["total"] = {k: round(sum(v[k] for v in out.values()), 2) for k in ("before_us", "after_us")}
    out["loadavg"] = os.getloadavg()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
