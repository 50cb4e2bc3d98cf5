"""The coordinator's per-step jobs this pass changed (branch coordcpu2), before and
after, in one process: what each costs per step, timed alternately (best of rounds).

"Before" is fd122c2's code, still reachable here: a Started and an Exited decoded from
msgpack maps (the map path of fleet.wire.messages.decode, which still takes them), a
Launch encoded as a map, the spec hash as sha256 of repr(spec.identity()) per step,
a step's work directory through pathlib. "After" is what the coordinator runs now:
the reports and the Launch by shape (fleet.wire.shapes), the hash made piece by piece
(fleet.wire.spechash) and taken on the worker thread at submission (so "after" on the
loop is a cache hit: fleet.wire.records.spec_hash), the work directory joined as text.
The scale benchmark (control_scale.py) cannot tell differences this size from the
machine's noise; this one can.

    python benchmarks/step_jobs.py        # prints JSON
"""

from __future__ import annotations

import hashlib
import json
import sys
import timeit
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import msgpack  # noqa: E402

from fleet.control import launching  # noqa: E402
from fleet.core.suite import read_suite  # noqa: E402
from fleet.wire import messages as P  # noqa: E402
from fleet.wire import records, spechash  # noqa: E402

STARTED = P.Started(step="s/123", attempt=1, pid=4242, pgid=4242, at=1.5e9)
EXITED = P.Exited(step="s/123", attempt=1, pid=4242, outcome="succeeded", returncode=0, signal=None,
                  decided_at=1.5e9, first_at=1.5e9, work_start=1.5e9, work_end=1.5e9, ended_at=1.5e9, utime=0.0,
                  stime=0.0, maxrss_kb=9000, affinity=(5,), placement_ok=True, error=None)
LAUNCH = launching._launch(step="s/123", attempt=1, kind="command", call="", args={}, command="true", cores=[5],
                           gpus=[], memory=1 << 30, workdir="/run/steps/s/123", log="/run/steps/s/123/log",
                           run_dir="/run", inputs=[], outputs=[], placement=[["node17", [5], [], 1 << 30]],
                           decided_at=1.5e9, env={"FLEET_STEP": "s/123", "FLEET_ATTEMPT": "1",
                                                  "FLEET_RUN_DIR": "/run", "FLEET_ID": "f"}, gpu_vars=[])


def _map(msg) -> bytes:  # fd122c2's encoding of every message
    return msgpack.packb({"v": P.VERSION, "type": msg.TYPE, **msg.__dict__}, use_bin_type=True)


def _specs(n: int = 1000) -> list:
    """The steps of control_scale.py's suite (an array of commands), as the coordinator has them."""
    raw = tomllib.loads(f'[suite]\nname = "scale"\nrun_dir = "/run"\nmax_steps = {n}\n\n'
                        f'[[steps]]\nid = "s/{{i}}"\narray = "1-{n}"\ncommand = "true"\n')
    return list(read_suite(raw, Path("/run/suite.toml")).suite.steps)


def _cycle(items):
    while True:
        yield from items


def jobs() -> dict:
    smap, emap, sarr, earr = _map(STARTED), _map(EXITED), P.encode(STARTED), P.encode(EXITED)
    specs = _specs()
    old_hash, new_hash, cached = _cycle(specs), _cycle(specs), _cycle(specs)
    for s in specs:
        records.spec_hash(s)  # what the worker thread does at submission
    return {
        "decode Started and Exited": (lambda: (P.decode(smap), P.decode(emap)),
                                      lambda: (P.decode(sarr), P.decode(earr))),
        "encode the Launch": (lambda: _map(LAUNCH), lambda: P.encode(LAUNCH)),
        "spec hash, computed": (lambda: hashlib.sha256(repr(next(old_hash).identity()).encode()).hexdigest()[:16],
                                lambda: spechash.spec_hash(next(new_hash))),
        "spec hash on the loop": (lambda: hashlib.sha256(repr(next(old_hash).identity()).encode()).hexdigest()[:16],
                                  lambda: records.spec_hash(next(cached))),
        "work directory": (lambda: str(Path("/run") / f"steps/s/{next(old_hash).id}"),
                           lambda: launching._workdir("/run", f"steps/s/{next(new_hash).id}")),
    }


def main() -> int:
    n, rounds = 20_000, 7
    out = {}
    for name, (before, after) in jobs().items():
        b = a = float("inf")
        for _ in range(rounds):  # alternately, best of rounds: the machine is shared
            b = min(b, timeit.timeit(before, number=n) / n * 1e6)
            a = min(a, timeit.timeit(after, number=n) / n * 1e6)
        out[name] = {"before_us": round(b, 2), "after_us": round(a, 2)}
    loop = [k for k in out if k != "spec hash, computed"]  # (computed: on the worker thread now)
    out["total on the loop"] = {k: round(sum(out[j][k] for j in loop), 2) for k in ("before_us", "after_us")}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
