"""The report's wait segments when a kind's first wait record comes after its steps became ready.

    python benchmarks/report_late_record.py --trees /tmp/old,.   # each tree's fleet, in turn

report_100k.generate's stream (100,000 steps), its submission and step records moved 0.5 s
before the scheduler's first pass (as a big submission's are: declared over several turns
of the coordinator's loop before the pass writes the kind's record). Each tree (a checkout
or `git archive`) builds the report in a subprocess: the CPU of the whole build and of
fleet.report.waits.wait_segments, and the waits by cause. Prints one JSON line a tree.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from report_100k import generate  # noqa: E402 (benchmarks/ is sys.path[0])

MEASURE = """
import json, sys, time
import fleet.report as R
from fleet.report import ingest, waits
spent, orig = [], waits.wait_segments
def timed(*a, **k):
    t0 = time.process_time(); orig(*a, **k); spent.append(time.process_time() - t0)
waits.wait_segments = timed
t0 = time.process_time()
r = R.build(ingest.blocks(sys.argv[1]))
print(json.dumps({"tree": R.__file__.rsplit("/fleet/", 1)[0], "build_cpu_s": round(time.process_time() - t0, 2),
                  "wait_segments_cpu_s": round(spent[0], 3),
                  "waits": {k: [v["steps"], round(v["step_s"])] for k, v in r.waits.items()}}))
"""


def late(src: Path, dst: Path, early: float = 0.5) -> None:
    """src's stream with the first submission's records `early` s before they were written."""
    first = None
    with open(src) as f, open(dst, "w") as out:
        for line in f:
            rec = json.loads(line)
            if rec["kind"] == "submitted" and first is None:
                first = rec["t"]
            if first is not None and rec["kind"] in ("submitted", "step") and rec["t"] == first:
                rec["t"] = round(first - early, 6)
                line = json.dumps(rec, separators=(",", ":")) + "\n"
            out.write(line)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trees", default=".", help="comma-separated checkouts to compare")
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        made, run = Path(tmp) / "made.jsonl", Path(tmp) / "run"
        run.mkdir()
        generate(made, args.steps)
        late(made, run / "events.jsonl")
        for _ in range(args.rounds):
            for tree in args.trees.split(","):
                env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
                p = subprocess.run([sys.executable, "-c", MEASURE, str(run)], env=env, cwd=tmp, capture_output=True,
                                   text=True, timeout=600, start_new_session=True)
                print(p.stdout.strip() or p.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
