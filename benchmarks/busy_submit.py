"""A big second submission into a busy fleet: do the first suite's steps go on while
it is entered? (issue 12, item 2; fleet.core.generations, Entry.passes)

    FLEET_SIM_UNBATCHED=1 FLEET_SIM_WINDOW=cores python benchmarks/busy_submit.py \\
        [--agents 1000] [--first 400000] [--second 200000] [--rev f55e1a6]
                                                             # results/busy_submit.json

For this tree and for the tree at REV (`git archive` into a temporary directory, put
first on the coordinator's PYTHONPATH), one run each: control_scale.py's real
coordinator and simulated agents (AGENTS of 64 cores, steps of --duration s), a first
suite of FIRST steps submitted and running for --lead s, then a second of SECOND new
steps (other ids, no deps) submitted while it runs (with --renew, also a/1 of the
first suite, changed: a renewal, which holds every exit until it is in). From the agents' Launch receipt
times: the Launches a second in the --lead s before the second Submit, during its
whole handling (Submit sent -> reply), and during the scheduler's entry of it (the
last of its steps declared in events.jsonl -> the reply). Then the fleet is brought
down: the steps still to run are not waited for.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for p in (str(REPO), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

import control_scale as cs  # noqa: E402
from _reports import merge_reports  # noqa: E402
from _scale_extra import room_for  # noqa: E402

from fleet.control.client import Client  # noqa: E402
from fleet.wire import messages as P  # noqa: E402


def suite(path: Path, run_dir: Path, name: str, prefix: str, steps: int, renew: bool = False) -> Path:
    """`steps` steps `prefix/i`; with `renew`, the first suite's a/1 too, changed (run anew)."""
    path.write_text(f'[suite]\nname = "{name}"\nrun_dir = "{run_dir}"\nmax_steps = {steps + 1}\n\n'
                    f'[[steps]]\nid = "{prefix}/{{i}}"\narray = "1-{steps}"\ncommand = "true"\n'
                    + ('\n[[steps]]\nid = "a/1"\ncommand = "true --changed"\n' if renew else ''))
    return path


def rate(received: list[float], t0: float, t1: float) -> dict:
    n = sum(1 for t in received if t0 <= t < t1)
    return {"s": round(t1 - t0, 3), "launches": n, "per_s": round(n / (t1 - t0), 1) if t1 > t0 else None}


def one(tree: Path, work: Path, a) -> dict:
    path = os.pathsep.join([str(tree), str(REPO)])  # the coordinator's fleet first
    cs.env = lambda: {**os.environ, "PYTHONPATH": path}
    work.mkdir(parents=True)
    room_for(work, a.first + a.second)
    run = work / "run"
    run.mkdir(mode=0o700)
    procs = cs.Processes(work)
    deadline = time.monotonic() + a.timeout
    res: dict = {"tree": str(tree)}
    try:
        outs = cs.start_fleet(procs, run, a.agents, a.duration, 1.0, a.timeout, agent_timeout=120.0)
        conn = cs.wait_up(run, procs, deadline - time.monotonic())
        c = Client(conn)
        try:
            t = time.time()
            r1 = c.ask(P.Submit(str(suite(work / "first.toml", run, "first", "a", a.first))), timeout=a.timeout)
            res["first_submit_s"] = round(time.time() - t, 2)
            time.sleep(a.lead)
            t0 = time.time()
            second = suite(work / "second.toml", run, "second", "b", a.second, a.renew)
            r2 = c.ask(P.Submit(str(second)), timeout=a.timeout)
            t1 = time.time()
            assert r1.ok and r2.ok, (r1.problems, r2.problems)
            time.sleep(1.0)
            c.ask(P.Down(), timeout=60)
        finally:
            c.close()
        procs.wait(timeout=120)
    finally:
        procs.kill()
    received = merge_reports(outs)["received"]
    declared = 0.0
    with open(run / "events.jsonl", "rb") as f:
        for line in f:
            if b'"kind":"step"' in line and b'"step":"b/' in line:
                declared = max(declared, json.loads(line)["t"])
    res.update(second_submit_s=round(t1 - t0, 2), entry_s=round(t1 - declared, 2),
               before=rate(received, t0 - a.lead, t0), during_submit=rate(received, t0, t1),
               during_entry=rate(received, declared, t1), after=rate(received, t1, t1 + 1.0))
    shutil.rmtree(work, ignore_errors=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--first", type=int, default=400_000)
    ap.add_argument("--second", type=int, default=200_000)
    ap.add_argument("--duration", type=float, default=1.0)
    ap.add_argument("--lead", type=float, default=5.0)
    ap.add_argument("--rev", default="f55e1a6")
    ap.add_argument("--renew", action="store_true",
                    help="the second suite also changes a/1 of the first (a renewal: every exit waits for it)")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--work", default="/dev/shm/busy_submit")
    ap.add_argument("--out", default=str(HERE / "results" / "busy_submit.json"))
    a = ap.parse_args()
    old = Path(tempfile.mkdtemp(prefix="busy_rev_"))
    subprocess.run(f"git -C {REPO} archive {a.rev} fleet | tar -x -C {old}", shell=True, check=True)
    rows = []
    for name, tree in ((a.rev, old), ("this tree", REPO)):
        r = one(tree, Path(a.work) / name.replace(" ", "_"), a)
        rows.append({"name": name, **r})
        print(f"{name:>10}: second Submit {r['second_submit_s']} s, its entry {r['entry_s']} s; launches/s "
              f"before {r['before']['per_s']}, during the Submit {r['during_submit']['per_s']}, "
              f"during the entry {r['during_entry']['per_s']} ({r['during_entry']['launches']})", flush=True)
    shutil.rmtree(old, ignore_errors=True)
    Path(a.out).write_text(json.dumps({
        "command": "FLEET_SIM_UNBATCHED={} FLEET_SIM_WINDOW={} python benchmarks/busy_submit.py {}".format(
            os.environ.get("FLEET_SIM_UNBATCHED", ""), os.environ.get("FLEET_SIM_WINDOW", ""), " ".join(sys.argv[1:])),
        "agents": a.agents, "renew": a.renew, "first": a.first, "second": a.second, "duration": a.duration, "lead": a.lead,
        "loadavg": os.getloadavg(), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
