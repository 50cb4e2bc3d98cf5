"""The coordinator's CPU to enter a big submission, phase by phase, per tree (issue 12:
a 1,000,000-step suite submitted in < 60 s; the whole run <= 100 us of coordinator CPU
a step).

One process per tree (PYTHONPATH=tree, so each tree's fleet is the one imported)
writes the suite benchmarks/million_submit.py submits (control_scale.write_suite: one
array table of STEPS one-core `command` steps) and enters it through the real code,
in the order the coordinator does it, timing each phase (time.process_time):

- on the worker thread (fleet.control.submissions.check, phase by phase): `read` the
  file (TOML, every step built), `graph` (build_graph: deps, producers, inputs on disk,
  cycles), `fit` (checks.fit_problems on 2 nodes of 64 cores), `merge` (the problems in
  setup order), `order` (topological_order), `markers` (read_markers), `done`
  (submissions._done), `leftovers`, `hash` (each definition's spec hash), `pack` (the
  Checked);
- on the loop: `register`, `declare` (announce, then DECLARE steps a turn: counted,
  noted in the store, StepDeclared lines encoded and flushed), `enter` (the scheduler's
  Submitted of CHUNK steps a part and EnterMore until it is all in; 2 nodes of 64 cores
  joined, so the first 128 start).

The run directory is new (a first run: no markers). The collector is frozen before each
phase as fleet.control.heap does while a submission comes in. Best of REPEAT runs a
process, trees alternated over --rounds. `--profile` runs one tree's whole entry under
cProfile and prints the top functions by own time instead. `--deps`: two arrays of
STEPS/2, each step of the second depending on its twin in the first.

    python benchmarks/submit_phases.py --trees /tmp/base,. [--rounds 2] [--steps 100000] [--out FILE]
    PYTHONPATH=. python benchmarks/submit_phases.py --profile [--steps 100000]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import _trees  # noqa: E402

REPEAT = 2
PHASES = ("read", "graph", "fit", "merge", "order", "markers", "done", "leftovers", "hash", "pack",
          "register", "declare", "enter")


def _suite(work: Path, steps: int) -> Path:
    if os.environ.get("SUBMIT_PHASES_DEPS"):  # --deps: half the steps each depend on one of the other half
        half = steps // 2
        path = work / "suite.toml"
        path.write_text(f'[suite]\nname = "scale"\nrun_dir = "{work / "run"}"\nmax_steps = {steps}\n\n'
                        f'[[steps]]\nid = "s/{{i}}"\narray = "1-{half}"\ncommand = "true"\n\n'
                        f'[[steps]]\nid = "t/{{i}}"\narray = "1-{half}"\ncommand = "true"\ndeps = ["s/{{i}}"]\n')
        return path
    from control_scale import write_suite
    return write_suite(work / "suite.toml", work / "run", steps)


def _check(path: Path, nodes, run_dir: Path, t: dict, lap):
    """fleet.control.submissions.check, no shard and no selection, a phase at a time."""
    from fleet.control import checks, leftovers
    from fleet.control import submissions as subs
    from fleet.core.graph import build_graph, topological_order
    from fleet.wire import records
    reading = lap("read", checks.read_suite_file, path)
    suite = reading.suite
    hook = checks.missing_on_disk(run_dir, reading.unparsed_outputs)
    graph, later = lap("graph", build_graph, suite.steps, known_done=reading.unparsed, unproduced=hook)
    later += lap("fit", checks.fit_problems, suite, nodes)
    assert not lap("merge", reading.merged, later)
    steps, deps = suite.steps, graph.deps
    by_id = {s.id: s for s in steps}
    order = lap("order", lambda: tuple(sid for sid in topological_order(graph) if sid in by_id))
    markers = lap("markers", subs.read_markers, run_dir, order)
    done, again = lap("done", subs._done, by_id, order, deps, set(), markers, False)
    left = lap("leftovers", lambda: leftovers.scan(run_dir, leftovers.to_scan(markers, done, set())))
    lap("hash", lambda: [records.spec_hash(s) for s in steps])
    return lap("pack", lambda: subs.Checked(
        suite.name, [s.id for s in suite.steps], steps, deps, order, frozenset(done), frozenset(),
        markers, {k: v for k, v in again.items() if v is not None},
        frozenset(k for k, v in again.items() if v is None), [s.id for s in steps], suite.preload, left))


def _run(steps: int) -> tuple[dict, str]:
    """One entry of a fresh suite: CPU s per phase, and a digest of the scheduler's decisions."""
    from fleet.control import intake
    from fleet.control.submissions import Submissions
    from fleet.core.decisions import EnterMore, Entering, NodeJoined
    from fleet.core.resources import NodeSpec
    from fleet.core.scheduler import Scheduler
    from fleet.wire import messages as P
    from fleet.wire.events import EventLog

    work = Path(tempfile.mkdtemp(prefix="subph-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    try:
        path, run_dir = _suite(work, steps), work / "run"
        run_dir.mkdir()
        t: dict = {}

        def lap(name, fn, *a, **k):
            gc.freeze()
            t0 = time.process_time()
            out = fn(*a, **k)
            t[name] = t.get(name, 0.0) + time.process_time() - t0
            return out

        sched = Scheduler(window=None)
        nodes = [NodeSpec(f"n{i}", tuple(range(64)), (), 256 << 30) for i in range(2)]
        digest = hashlib.sha256()
        for n in nodes:
            digest.update(repr(sched.handle(NodeJoined(n), 0.0)).encode())
        log = EventLog(run_dir / "events.jsonl", fleet="f1")
        subs = Submissions(run_dir, sched, {}, log)
        msg = P.Submit(suite=str(path))
        checked = _check(path, list(sched.pool.nodes()), run_dir, t, lap)
        acc = lap("register", subs.register, checked, msg)
        lap("declare", subs.announce, acc, msg, 1.0)
        for i in range(0, len(acc.steps), intake.DECLARE):
            lap("declare", subs.declare, acc, acc.steps[i:i + intake.DECLARE], 1.0)
            lap("declare", log.flush)
        out = lap("enter", sched.handle, Submissions.submitted(acc, msg, intake.CHUNK), 1.0)
        while True:
            digest.update(repr(out).encode())
            if not any(isinstance(d, Entering) and d.entered < d.total for d in out):
                break
            out = lap("enter", sched.handle, EnterMore(), 1.0)
        log.close()
        return t, digest.hexdigest()[:16]
    finally:
        gc.unfreeze()
        shutil.rmtree(work, ignore_errors=True)
        gc.collect()


def jobs(steps: int) -> dict:
    """This tree's best us per step of each phase (of REPEAT runs), and its digest."""
    best: dict = {}
    digests = set()
    for _ in range(REPEAT):
        t, digest = _run(steps)
        digests.add(digest)
        for k, s in t.items():
            us = round(s / steps * 1e6, 2)
            best[k] = min(us, best.get(k, us))
    assert len(digests) == 1, digests
    out = {k: best[k] for k in PHASES if k in best}
    out["total"] = round(sum(out.values()), 2)
    out["digest"] = digests.pop()
    return out


def _profile(steps: int) -> None:
    import cProfile
    import pstats
    prof = cProfile.Profile()
    prof.enable()
    _run(steps)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(35)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", help="comma-separated trees holding fleet/")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--out", default="")
    ap.add_argument("--deps", action="store_true", help="two arrays, each step of the second depending on one of the first")
    ap.add_argument("--profile", action="store_true", help="this tree's entry under cProfile")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.deps:
        os.environ["SUBMIT_PHASES_DEPS"] = "1"  # (the children inherit it)
    if args.profile:
        _profile(args.steps)
        return 0
    if args.one:
        print(json.dumps(jobs(args.steps)))
        return 0
    os.environ["SUBMIT_PHASES_STEPS"] = str(args.steps)
    load0 = os.getloadavg()
    best = _trees.best_per_tree(__file__, args.trees, args.rounds)
    result = {"command": "python benchmarks/submit_phases.py " + " ".join(sys.argv[1:]), "rounds": args.rounds,
              "repeat": REPEAT, "steps": args.steps, "deps": args.deps, "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "loadavg_before_after": [load0, os.getloadavg()], "us_per_step_best": best,
              "same_decisions": len({b["digest"] for b in best.values()}) == 1}
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    if "--one" in sys.argv and "SUBMIT_PHASES_STEPS" in os.environ:
        sys.argv += ["--steps", os.environ["SUBMIT_PHASES_STEPS"]]
    sys.exit(main())
