"""The coordinator's per-step record jobs, before and after branch `records`, in one
process (issue 12 a): what each costs per step, timed alternately (best of rounds).

"Before" is the code the coordinator ran at 41213cc, which is still here: the `start`
and `started` records built as frozen dataclasses, mapped by to_dict and encoded; the
Launch and the `exit` record made by their __init__; three journal lines a step (start,
attempt, done) each a dict encoded, and the marker encoded again for its file. "After"
is what it runs now (fleet.control.eventlines, launching._launch, journal.Journal.start
and .done). The scale benchmark (control_scale.py) cannot tell a difference this size
from the machine's noise; this one can.

    python benchmarks/step_records.py        # prints JSON; results/step_records.json
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import timeit
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from fleet.control import eventlines, launching  # noqa: E402
from fleet.core.decisions import Start  # noqa: E402
from fleet.core.resources import Slot  # noqa: E402
from fleet.wire import events  # noqa: E402
from fleet.wire import messages as P  # noqa: E402
from fleet.wire.events import dumps  # noqa: E402

D = Start("s/123", 1, (Slot("node17", (5,), (), 1 << 30),))
MSG = P.Started(step="s/123", attempt=1, pid=4242, pgid=4242, at=1.5e9)
EXIT = dict(t=1.5e9, step="s/123", attempt=1, node="node17", outcome="succeeded", reason="", returncode=0,
            signal=None, cores=[5], gpus=[], memory=1 << 30, decided_at=1.5e9, first_at=1.5e9, work_start=1.5e9,
            work_end=1.5e9, ended_at=1.5e9, startup_s=0.001, work_s=0.0, utime=0.0, stime=0.0, maxrss_kb=9000,
            error=None, neighbours=None, memory_peak=None)
LAUNCH = dict(step="s/123", attempt=1, kind="call", call="m:f", args={}, command=None, cores=[5], gpus=[],
              memory=1 << 30, workdir="/run", log="/run/steps/s/123/log", run_dir="/run", inputs=[], outputs=[],
              placement=[["node17", [5], [], 1 << 30]], decided_at=1.5e9,
              env={"FLEET_STEP": "s/123", "FLEET_ATTEMPT": "1", "FLEET_RUN_DIR": "/run", "FLEET_ID": "f"},
              gpu_vars=[], threads=0, timeout=None, grace=10.0, memory_limit=0, after="")
ATT = {"fleet": "f", "attempt": 1, "generation": 1, "outcome": "succeeded", "node": "node17", "reason": "",
       "work_s": 0.0, "started_at": 1.5e9, "ended_at": 1.5e9, "spec": "0123456789abcdef", "rerun": "",
       "submission": 1}
REC = {"outcome": "succeeded", "spec": "0123456789abcdef", "attempt": 1, "node": "node17", "work_s": 0.0,
       "ended_at": 1.5e9, "fleet": "f", "id": "0011223344556677", "deps": {}, "generation": 1}


def _journal_before():
    out = [dumps({"k": "start", "step": "s/123", "attempt": 1, "generation": 1, "t": time.time()}),
           dumps({"k": "attempt", "step": "s/123", "rec": ATT, "t": time.time()}),
           dumps({"k": "done", "step": "s/123", "rec": REC, "t": time.time()})]
    return out, json.dumps(REC)  # (the marker file's text)


def _journal_after():
    starts = [["s/123", 1, 1]]  # one line per turn: its share of the encoding is left out here
    rec = dumps(REC)
    line = f'{{"k":"done","step":{dumps("s/123")},"rec":{rec},"att":{dumps(ATT)},"t":{time.time()!r}}}'
    return starts, line, rec


JOBS = {
    "start record": (lambda: dumps(launching.start_record(1.5e9, D).to_dict("f")),
                     lambda: eventlines.start("f", 1.5e9, D)),
    "started record": (lambda: dumps(events.Started(t=1.5e9, step=MSG.step, attempt=1, node="node17", pid=MSG.pid,
                                                     at=MSG.at).to_dict("f")),
                       lambda: eventlines.started("f", 1.5e9, "node17", MSG)),
    "exit record (made)": (lambda: events.Exit(**EXIT), lambda: eventlines.record(events.Exit, **EXIT)),
    "Launch message (made)": (lambda: P.Launch(**LAUNCH), lambda: launching._launch(**LAUNCH)),
    "journal lines and marker text": (_journal_before, _journal_after),
}


def main() -> int:
    n, rounds = 20_000, 7
    out = {}
    for name, (before, after) in JOBS.items():
        b = a = float("inf")
        for _ in range(rounds):  # alternately, best of rounds: the machine is shared
            b = min(b, timeit.timeit(before, number=n) / n * 1e6)
            a = min(a, timeit.timeit(after, number=n) / n * 1e6)
        out[name] = {"before_us": round(b, 2), "after_us": round(a, 2)}
    out["total"] = {k: round(sum(v[k] for v in out.values()), 2) for k in ("before_us", "after_us")}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
