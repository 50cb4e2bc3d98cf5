"""Children submitted from inside steps: how fast they get in, and how soon a parent
goes on after its last child (issue 13).

`python benchmarks/children.py [--parents 2] [--children 5000] [--out results/children.json]`
runs a suite of PARENTS call steps on an embedded one-node fleet (`fleet run`); each
submits CHILDREN no-op children with one `ctx.submit` and raises fleet.WaitForChildren.
From the steps' own notes and events.jsonl:

- submit rate: all children / (first ctx.submit's start -> the last child's `step`
  record, i.e. declared by the coordinator): the step's checking and durable write,
  the worker's reading and checking, and the loop's declaring, end to end;
- the same for the coordinator alone: from each parent's `exit` (wait) record to its
  last child's `step` record;
- resume latency per parent: its last child's `exit` record -> its own next `start`
  record (the decision), and -> its first instruction (its note).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def run(parents: int, children: int, work: Path) -> dict:
    suite = work / "kids.toml"
    suite.write_text(f'[suite]\nname = "kids"\nrun_dir = "run"\n[[steps]]\nid = "p{{i}}"\narray = "0-{parents - 1}"\n'
                     f'call = "fleet_bench_children:parent"\nargs = {{ n = {children} }}\n')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(REPO), os.environ.get("PYTHONPATH", "")]))
    t0 = time.time()
    p = subprocess.run([sys.executable, "-m", "fleet", "run", str(suite)], cwd=work, env=env, capture_output=True,
                       text=True, timeout=3600, start_new_session=True)
    wall = time.time() - t0
    if p.returncode != 0:
        raise SystemExit(f"fleet run failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return measure(work / "run", parents, children, wall)


def measure(run_dir: Path, parents: int, children: int, wall: float) -> dict:
    ev = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    declared: dict[str, float] = {}
    exits: dict[str, list] = {}
    starts: dict[str, list] = {}
    for e in ev:
        if e["kind"] == "step":
            declared[e["step"]] = e["t"]
        elif e["kind"] == "exit":
            exits.setdefault(e["step"], []).append(e)
        elif e["kind"] == "start":
            starts.setdefault(e["step"], []).append(e["t"])
    notes = {f"p{i}": json.loads((run_dir / f"steps/p{i}/submit.json").read_text()) for i in range(parents)}
    resumed = {f"p{i}": json.loads((run_dir / f"steps/p{i}/resumed.json").read_text()) for i in range(parents)}
    kids = [s for s in declared if "/" in s]
    assert len(kids) == parents * children, (len(kids), parents * children)
    first = min(n["start"] for n in notes.values())
    last = max(declared[s] for s in kids)
    per_parent = []
    for p in notes:
        mine = [s for s in kids if s.startswith(p + "/")]
        wait_exit = exits[p][0]["t"]
        last_child_exit = max(exits[s][-1]["t"] for s in mine)
        per_parent.append({
            "parent": p, "submit_in_step_s": round(notes[p]["end"] - notes[p]["start"], 4),
            "coordinator_intake_s": round(max(declared[s] for s in mine) - wait_exit, 4),
            "resume_decision_ms": round((starts[p][-1] - last_child_exit) * 1000, 2),
            "resume_first_instruction_ms": round((resumed[p]["at"] - last_child_exit) * 1000, 2)})
    intake = sum(r["coordinator_intake_s"] for r in per_parent)
    return {"parents": parents, "children_each": children, "children": len(kids), "wall_s": round(wall, 2),
            "submit_rate_end_to_end_per_s": round(len(kids) / (last - first)),
            "coordinator_intake_rate_per_s": round(len(kids) / intake) if intake else None,
            "per_parent": per_parent, "cpus": os.cpu_count(),
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parents", type=int, default=2)
    ap.add_argument("--children", type=int, default=5000)
    ap.add_argument("--out", default=str(HERE / "results" / "children.json"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        result = run(a.parents, a.children, Path(d))
    Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
