"""What one `Progress` answer costs the coordinator's loop, by the size of its submission.

A waiting `fleet run` client (or `Fleet.wait`) asks for its submission's progress up to
every 0.5 s; each answer carries the submission's steps counted by state. This builds a
submission of N steps in one process through the coordinator's real objects and
handlers (a suite file read and checked by fleet.control.submissions.check, registered
and entered by the real Submissions, handed to the real Scheduler with one 64-core node
joined; 1,000 steps then run to success, their Finished acted on as the coordinator
does), and times one progress answer, best and median of rounds. An answer that may
keep counts it made less than 0.5 s before (the code before branch `progress`) is
timed with its counts out of date, as one of every 0.5 s is.

It also times the step cycle (start -> exit -> finished, through the scheduler and
Submissions.ended) with and without the scheduler telling Submissions of each change of
state: what keeping the counts up to date costs per step.

    PYTHONPATH=$PWD python benchmarks/progress_cost.py --steps 10000,100000,1000000 \
        --label after --out benchmarks/results/progress_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from fleet.control.submissions import Submissions, check  # noqa: E402
from fleet.core import states as S  # noqa: E402
from fleet.core.resources import NodeSpec  # noqa: E402
from fleet.core.scheduler import Finished, NodeJoined, Scheduler, Start, StepExited  # noqa: E402
from fleet.wire import messages as P  # noqa: E402
from fleet.wire.events import EventLog  # noqa: E402

NODE = NodeSpec("n0", tuple(range(64)), (), 256 << 30)


def build(work: Path, steps: int) -> tuple[Submissions, int, list]:
    """A submission of `steps` steps entered through the real handlers; (its Submissions,
    its id, the Start decisions not yet acted on)."""
    run = work / "run"
    suite = work / "s.toml"
    suite.write_text(f'[suite]\nname = "cost"\nrun_dir = "{run}"\n'
                     f'[[steps]]\nid = "s/{{i}}"\narray = "1-{steps}"\ncommand = "true"\n')
    sched = Scheduler()
    subs = Submissions(run, sched, {}, EventLog(run / "events.jsonl", fleet="bench"))
    msg = P.Submit(str(suite))
    checked = check(msg, [NODE], run)
    acc = subs.register(checked, msg)
    sched.handle(NodeJoined(NODE), 0.0)
    todo = sched.handle(subs.enter(acc, msg, 0.0), 0.0)
    subs.events.flush()
    return subs, acc.sub.id, [d for d in todo if isinstance(d, Start)]


def cycle(subs: Submissions, starts: list, n: int, t: float) -> tuple[float, list]:
    """Run n steps to success as the coordinator acts on it; (seconds, Starts left)."""
    sched = subs.sched
    t0 = time.perf_counter()
    done = 0
    while done < n and starts:
        d = starts.pop()
        for out in sched.handle(StepExited(d.step, d.attempt, S.SUCCEEDED), t):
            if isinstance(out, Finished):
                subs.ended(out.step, out.outcome, out.attempt, out.reason, final=True)
            elif isinstance(out, Start):
                starts.append(out)
        done += 1
    return time.perf_counter() - t0, starts


def answer_cost(subs: Submissions, sid: int, rounds: int) -> list[float]:
    """Seconds per progress answer, each with counts to make afresh where they are kept."""
    out = []
    for _ in range(rounds):
        sub = subs.subs[sid]
        if hasattr(sub, "counted"):  # the code before: counts kept for 0.5 s, then recounted
            sub.counted = None
        t0 = time.perf_counter()
        reply = subs.progress(P.Progress(sid, 0))
        out.append(time.perf_counter() - t0)
    assert sum(reply.counts.values()) == len(subs.subs[sid].steps), reply.counts
    return out


def case(steps: int, rounds: int, hook_steps: int) -> dict:
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as tmp:
        t0 = time.perf_counter()
        subs, sid, starts = build(Path(tmp), steps)
        built = time.perf_counter() - t0
        _, starts = cycle(subs, starts, 1000, 1.0)
        times = answer_cost(subs, sid, rounds)
        res = dict(steps=steps, build_s=round(built, 1), rounds=rounds,
                   answer_best_us=round(min(times) * 1e6, 1), answer_median_us=round(statistics.median(times) * 1e6, 1),
                   counts=subs.progress(P.Progress(sid, 0)).counts)
        if hook_steps:  # the step cycle with and without the counts kept, alternating
            hooked = getattr(subs.sched, "moved", None)
            per = {"with": [], "without": []}
            for r in range(6):
                which = "with" if r % 2 == 0 else "without"
                if hooked is not None:
                    subs.sched.moved = hooked if which == "with" else None
                secs, starts = cycle(subs, starts, hook_steps, 2.0 + r)
                per[which].append(secs / hook_steps * 1e6)
            if hooked is not None:
                subs.sched.moved = hooked
                step = next(iter(subs.step_subs))  # one change of state counted, alone (then undone)
                t0 = time.perf_counter()
                for _ in range(50000):
                    hooked(step, S.READY, S.RUNNING)
                    hooked(step, S.RUNNING, S.READY)
                res["one_change_us"] = round((time.perf_counter() - t0) / 100000 * 1e6, 3)
            res["cycle_us_per_step"] = {k: round(min(v), 2) for k, v in per.items()}
            res["cycle_note"] = ("best of 3 rounds of %d steps each; 'without' is the same as 'with' in code "
                                 "that has no hook" % hook_steps) if hooked is None else \
                ("best of 3 rounds of %d steps each, alternating" % hook_steps)
        return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", default="10000,100000,1000000")
    ap.add_argument("--label", default="")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--hook-steps", type=int, default=10000, help="steps per round of the cycle timing (0: none)")
    a = ap.parse_args(argv)
    from _nodebench import machine
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                            text=True).stdout.strip()
    res = dict(benchmark="progress_cost", label=a.label, command="python benchmarks/progress_cost.py "
               + " ".join(argv if argv is not None else sys.argv[1:]),
               date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), commit=commit,
               code=str(Path(sys.modules["fleet"].__file__).parent), machine=machine(), cases=[])
    for n in (int(x) for x in a.steps.split(",")):
        rounds = 30 if n <= 100000 else 10
        res["cases"].append(case(n, rounds, a.hook_steps if n == 100000 else 0))
        print(json.dumps(res["cases"][-1]), file=sys.stderr, flush=True)
    res["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(res, indent=1)
    if a.out:
        old = json.loads(a.out.read_text()) if a.out.exists() else {"runs": []}
        old["runs"].append(res)
        a.out.write_text(json.dumps(old, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
