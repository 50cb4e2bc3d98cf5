"""Fleet beside the raw fork floor and a warm peer (issue 12, benchmark b).

    python benchmarks/peer_compare.py               # writes results/peer_compare.json and the
                                                    # "Fleet, the raw fork floor and a warm peer" README section
    python benchmarks/peer_compare.py --steps 300 --rounds 1 --no-write   # a smoke test
    python benchmarks/peer_compare.py --readme-only # rewrite the section from the saved results
    python benchmarks/peer_compare.py --baseline DIR # also fleet as it is in DIR (a checkout of an
                                                    # earlier commit), in the same rounds: before/after

Needs Parsl (`pip install parsl`, or `pip install -e .[bench]`). One process-run, in
rounds; each round measures, for each workload, the three systems one after the other,
in an order that rotates from round to round (the machine is shared and noisy: this
way every system meets the same neighbours as nearly as can be arranged):

- raw fork floor: two loops at once (one per core, as fleet has one one-core node per
  core), each in a process that imported numpy, scipy.linalg and the step functions,
  doing half the steps: fork; in the child pin to the loop's core, open a log file of
  its own (O_CREAT) and point stdout/stderr at it, do the step's work, os._exit; waitpid.
  Timed from a common start instant to the last loop's end.
- fleet: `fleet up --nodes 2 --preload numpy,scipy.linalg,fleet_bench_steps,fleet_bench_work`
  (the step functions' modules too, as the other two hold them), `fleet run` of a suite
  of the steps, `fleet down` (startup_throughput.fleet_run). Timed from the events:
  the first step's decision to the last exit record.
- warm peer: Parsl HighThroughputExecutor, 2 workers pinned one per core
  (`_parslpeer.py`), warmed by 40 tasks first. Timed from the first submit to the
  last result.

Workloads: (i) no-op; (ii) ~5 ms of single-threaded numpy (fleet_bench_work.matmul:
a 128 x 128 matmul repeated, the repeats calibrated once at the start to 5 ms of CPU);
OMP/OPENBLAS/MKL_NUM_THREADS=1 everywhere. CPU time of every process of each system is
read before and after the timed part (psutil / getrusage); "besides the work" subtracts
steps x the calibrated work's CPU.

Targets (issue 12 b): fleet >= 0.9 x the raw fork floor on both workloads; fleet's own
processes (coordinator, agents, zygotes) <= 1.5 ms of CPU per step besides the step's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _nodebench as nb  # noqa: E402
import startup_throughput as st  # noqa: E402
from readme_section import write_section  # noqa: E402

HEADING = "## Fleet, the raw fork floor and a warm peer"
KINDS = ("noop", "numpy")
SYSTEMS = ("floor", "fleet", "peer")
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
STEP_MODULES = ("fleet_bench_steps", "fleet_bench_work")
TARGET_FLOOR, TARGET_OWN_MS = 0.9, 1.5

FLOOR_CODE = r"""
import json, os, resource, sys, time
import numpy, scipy.linalg
import fleet_bench_steps, fleet_bench_work
cfg = json.loads(sys.argv[1])
n, core, logdir, work = cfg["n"], cfg["core"], cfg["logdir"], cfg["kind"] == "numpy"
os.makedirs(logdir, exist_ok=True)
while time.time() < cfg["start_at"]:
    time.sleep(0.005)
s0, c0, t0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN), time.time()
failed = 0
for i in range(n):
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.sched_setaffinity(0, {core})
            fd = os.open(f"{logdir}/s{i}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
            if work:
                fleet_bench_work.matmul(cfg["size"], cfg["reps"])
            code = 0
        finally:
            os._exit(code)
    failed += os.waitpid(pid, 0)[1] != 0
t1 = time.time()
s1, c1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"t0": t0, "t1": t1, "failed": failed,
                  "loop_cpu_s": s1.ru_utime + s1.ru_stime - s0.ru_utime - s0.ru_stime,
                  "children_cpu_s": c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime,
                  "loop_minflt": s1.ru_minflt - s0.ru_minflt, "children_minflt": c1.ru_minflt - c0.ru_minflt}))
"""


def bench_env() -> dict[str, str]:
    env = nb.bench_env()
    env.update({v: "1" for v in THREAD_VARS})
    return env


def busy(ct) -> float:
    return sum(getattr(ct, f) for f in ct._fields if f not in ("idle", "iowait", "guest", "guest_nice"))


def calibrate(target_s: float) -> dict:
    """The matmul repeats that take target_s of CPU on one core (in a fresh process, one thread)."""
    code = ("import json, os, fleet_bench_work as w; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            f"print(json.dumps(w.calibrate({target_s})))")
    r = nb.run([sys.executable, "-c", code], timeout=120, env=bench_env(), stdout=subprocess.PIPE)
    return json.loads(r.stdout)


def floor(kind: str, steps: int, work: dict, tmp: Path) -> dict:
    """Two fork loops at once, one per core, steps/2 each."""
    cores = sorted(os.sched_getaffinity(0))[:2]
    start_at = time.time() + 1.5  # after both have imported
    argvs = [[sys.executable, "-c", FLOOR_CODE, json.dumps(
        {"n": steps // len(cores), "core": c, "logdir": str(tmp / f"floor-{kind}-{c}"), "kind": kind,
         "size": work["n"], "reps": work["reps"], "start_at": start_at})] for c in cores]
    env = bench_env()
    sys0, ch0 = psutil.cpu_times(), resource.getrusage(resource.RUSAGE_CHILDREN)
    procs = [subprocess.Popen(a, env=env, stdout=subprocess.PIPE, start_new_session=True) for a in argvs]
    outs = []
    try:
        for p in procs:
            outs.append(json.loads(p.communicate(timeout=600)[0]))
    finally:
        for p in procs:
            nb.kill_group(p.pid)
    sys1, ch1 = psutil.cpu_times(), resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = max(o["t1"] for o in outs) - min(o["t0"] for o in outs)
    done = (steps // len(cores)) * len(cores)
    loop = sum(o["loop_cpu_s"] for o in outs)
    kids = sum(o["children_cpu_s"] for o in outs)
    whole = time.time() - start_at + 1.5  # busy time below covers the imports too
    ours = (ch1.ru_utime + ch1.ru_stime) - (ch0.ru_utime + ch0.ru_stime)
    return {"steps": done, "failed": sum(o["failed"] for o in outs), "loops": len(cores),
            "span_s": round(wall, 3), "steps_per_s": round(done / wall, 1),
            "cpu_ms_per_step": {"loop processes (fork, waitpid)": round(loop / done * 1e3, 3),
                                "step processes": round(kids / done * 1e3, 3)},
            "minor_faults_per_step": {"loop processes": round(sum(o["loop_minflt"] for o in outs) / done, 1),
                                      "step processes": round(sum(o["children_minflt"] for o in outs) / done, 1)},
            "other_load_cores": round(max(0.0, busy(sys1) - busy(sys0) - ours) / whole, 2)}


def fleet_suite(kind: str, work: dict):
    def write(path: Path, steps: int) -> None:
        call = (f'call = "{nb.STEPS_MODULE}:noop"' if kind == "noop" else
                f'call = "fleet_bench_work:matmul"\nargs = {{ n = {work["n"]}, reps = {work["reps"]} }}')
        path.write_text(f'[suite]\nname = "{kind}"\npreload = ["numpy", "scipy.linalg"]\n\n'
                        f'[[steps]]\nid = "{kind}/{{i}}"\narray = "0-{steps - 1}"\n{call}\n')
    return write


def fleet(kind: str, steps: int, work: dict, tmp: Path) -> dict:
    """startup_throughput.fleet_run on this workload; timed from the first decision."""
    w = tmp / f"fleet-{kind}-{time.monotonic_ns()}"
    r = st.fleet_run(w, steps, write=fleet_suite(kind, work), preload=nb.PRELOAD + STEP_MODULES, nodes=FLEET_NODES[0],
                     up_args=FLEET_UP_ARGS)
    exits = [json.loads(line) for line in (w / "run" / "events.jsonl").read_text().splitlines()
             if '"exit"' in line]
    exits = [e for e in exits if e.get("kind") == "exit"]
    span = max(e["t"] for e in exits) - min(e["decided_at"] for e in exits)
    own: dict[str, float] = {}
    for name, v in r["cpu_s"].items():
        role = name.split()[0]
        own[role] = own.get(role, 0.0) + v["own_s"]
    steps_cpu = sum(v["children_s"] for v in r["cpu_s"].values())
    faults: dict[str, float] = {}
    for name, v in r["cpu_s"].items():
        faults[name.split()[0]] = faults.get(name.split()[0], 0) + v["minflt"]
    faults["step processes"] = sum(v["children_minflt"] for v in r["cpu_s"].values())
    return {"steps": steps, "succeeded": r["succeeded"], "span_s": round(span, 3),
            "steps_per_s": round(len(exits) / span, 1), "per_node": r["per_node"],
            "startup_ms": r["startup_ms"], "breakdown_ms": r["breakdown_ms"],
            "cpu_ms_per_step": {**{f"{k} (own)": round(v / steps * 1e3, 3) for k, v in sorted(own.items())},
                                "step processes": round(steps_cpu / steps * 1e3, 3)},
            "own_cpu_ms_per_step": round(sum(own.values()) / steps * 1e3, 3),
            "minor_faults_per_step": {k: round(v / steps, 1) for k, v in sorted(faults.items())},
            "fleet_run_client_cpu_s": r["fleet_run_client_cpu_s"],
            "other_load_cores": r["other_load_cores_during_run"],
            "leftover_pids_killed": r["leftover_pids_killed"]}


BASELINE: list[str] = []  # --baseline: the checkout whose fleet "before" runs
FLEET_NODES = [2]  # fleet's pretend nodes on this machine (one_node.py sets 1)
FLEET_UP_ARGS: list[str] = []  # more `fleet up` options (chain_window.py sets --window-depth)


@contextlib.contextmanager
def _fleet_from(path: str):
    """Processes started meanwhile import fleet from `path` (PYTHONPATH first)."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([path] + ([old] if old else []))
    try:
        yield
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old


def before(kind: str, steps: int, work: dict, tmp: Path) -> dict:
    """fleet() with the fleet code of the --baseline checkout."""
    with _fleet_from(BASELINE[0]):
        return fleet(kind, steps, work, tmp)


def peer(kind: str, steps: int, work: dict, tmp: Path) -> dict:
    """Parsl HTEX with 2 workers (_parslpeer.py), then nothing of it left running."""
    run_dir = str(tmp / f"parsl-{kind}-{time.monotonic_ns()}")
    cfg = {"kind": kind, "steps": steps, "size": work["n"], "reps": work["reps"], "run_dir": run_dir, "warm": 40}
    p = subprocess.Popen([sys.executable, str(nb.HERE / "_parslpeer.py"), json.dumps(cfg)], env=bench_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = p.communicate(timeout=600)
    finally:
        nb.kill_group(p.pid)  # the interchange is in the driver's process group
        left = [q.pid for q in psutil.process_iter() if _names(q, run_dir)]
        killed = nb.reap_or_kill(left, wait=10.0)
    if p.returncode != 0:
        raise RuntimeError(f"Parsl peer exited {p.returncode}:\n{err.decode(errors='replace')[-3000:]}")
    d = json.loads(out.decode().strip().splitlines()[-1])
    cpu = sum(d["cpu_s"].values())
    return {"steps": steps, "workers": d["workers"], "span_s": round(d["wall_s"], 3),
            "steps_per_s": round(steps / d["wall_s"], 1), "startup_and_warm_s": round(d["ready_s"], 2),
            "cpu_ms_per_step": {k: round(v / steps * 1e3, 3) for k, v in sorted(d["cpu_s"].items())},
            "other_load_cores": round(max(0.0, d["machine_busy_s"] - cpu) / d["wall_s"], 2),
            "leftover_pids_killed": killed}


def _names(proc: psutil.Process, run_dir: str) -> bool:
    try:
        return run_dir in " ".join(proc.cmdline())
    except psutil.Error:
        return False


MEASURE = {"floor": floor, "fleet": fleet, "peer": peer, "before": before}


def besides_work(m: dict, work_ms: float) -> float:
    """All of a system's CPU per step, less the work's own (0 for a no-op)."""
    return round(sum(m["cpu_ms_per_step"].values()) - work_ms, 3)


def summarize(runs: list[dict], work_ms: float) -> dict:
    """Per workload: each system's median rate and CPU per step; the per-round ratios."""
    out = {}
    for kind in [k for k in KINDS if any(r["kind"] == k for r in runs)]:  # (--kinds: what was run)
        wm = work_ms if kind == "numpy" else 0.0
        systems_run = [s for s in (*SYSTEMS, "before") if any(r["system"] == s for r in runs)]
        by = {s: [r for r in runs if r["kind"] == kind and r["system"] == s] for s in systems_run}
        rounds = sorted({r["round"] for r in runs if r["kind"] == kind})
        rate = {s: {r["round"]: r["steps_per_s"] for r in by[s]} for s in systems_run}
        pairs = [("fleet", "floor"), ("fleet", "peer")] + ([("before", "floor"), ("fleet", "before")]
                                                          if "before" in rate else [])
        ratio = {f"{a}_over_{o}": [round(rate[a][k] / rate[o][k], 3) for k in rounds
                                   if k in rate[a] and k in rate[o]] for a, o in pairs}
        systems = {}
        for s, ms in by.items():
            if not ms:
                continue
            roles = sorted({k for m in ms for k in m["cpu_ms_per_step"]})
            systems[s] = {
                "steps_per_s_median": round(nb.median([m["steps_per_s"] for m in ms]), 1),
                "steps_per_s": [m["steps_per_s"] for m in ms],
                "cpu_ms_per_step_median": {k: round(nb.median([m["cpu_ms_per_step"].get(k, 0.0) for m in ms]), 3)
                                           for k in roles},
                "cpu_ms_per_step_besides_work_median": round(nb.median([besides_work(m, wm) for m in ms]), 3),
                "other_load_cores": [m["other_load_cores"] for m in ms]}
            if "minor_faults_per_step" in ms[0]:
                systems[s]["minor_faults_per_step_median"] = {
                    k: round(nb.median([m["minor_faults_per_step"][k] for m in ms]), 1)
                    for k in ms[0]["minor_faults_per_step"]}
        for f in ("fleet", "before"):
            if by.get(f):
                systems[f]["own_cpu_ms_per_step_median"] = round(
                    nb.median([m["own_cpu_ms_per_step"] for m in by[f]]), 3)
                systems[f]["step_processes_besides_work_ms_median"] = round(
                    nb.median([m["cpu_ms_per_step"]["step processes"] - wm for m in by[f]]), 3)
        out[kind] = {"systems": systems, "ratios_per_round": ratio,
                     **{f"{k}_median": round(nb.median(v), 3) for k, v in ratio.items() if v}}
    return out


def verdicts(summary: dict) -> dict:
    floor_ok = {k: v["fleet_over_floor_median"] >= TARGET_FLOOR for k, v in summary.items()}
    own = {k: v["systems"]["fleet"]["own_cpu_ms_per_step_median"] for k, v in summary.items()}
    return {"target_fleet_over_floor": TARGET_FLOOR, "fleet_over_floor_met": floor_ok,
            "target_own_cpu_ms_per_step": TARGET_OWN_MS,
            "own_cpu_ms_per_step": own, "own_cpu_met": {k: v <= TARGET_OWN_MS for k, v in own.items()}}


def measure_all(args, work: dict, tmp: Path) -> list[dict]:
    runs = []
    systems = SYSTEMS + (("before",) if BASELINE else ())
    for k in range(args.rounds):
        for j, kind in enumerate(args.kinds):
            shift = (k + j) % len(systems)
            order = systems[shift:] + systems[:shift]  # rotates, so no system always goes first
            for i, system in enumerate(order):
                print(f"round {k + 1}/{args.rounds}: {kind}, {system} ...", file=sys.stderr, flush=True)
                m = MEASURE[system](kind, args.steps, work, tmp)
                m.update({"round": k + 1, "kind": kind, "system": system, "position_in_round": i + 1})
                print(f"  {m['steps_per_s']} steps/s, other load {m['other_load_cores']} cores",
                      file=sys.stderr, flush=True)
                runs.append(m)
    return runs


NAMES = {"floor": "raw fork floor (2 loops)", "fleet": "fleet up --nodes 2", "peer": "Parsl HTEX, 2 warm workers",
         "before": "fleet before (--baseline)"}
WORKLOADS = {"noop": "(i) no-op", "numpy": "(ii) numpy"}


def readme(res: dict) -> str:
    """The README section, from the results."""
    m, w, sm, v = res["machine"], res["work"], res["summary"], res["verdicts"]
    commit = m["code"]["commit"][:7] + (" + uncommitted changes" if m["code"]["uncommitted_in_fleet"] else "")
    out = [HEADING, "",
           f"`{res['command']}` ({res['date']}, commit {commit}; [script](peer_compare.py), "
           f"[results](results/peer_compare.json)): {res['steps']:,} steps per measurement, "
           f"{res['rounds']} rounds, each measuring the systems one after the other in a rotating "
           f"order; Parsl {res['parsl']}. The numpy step is {w['reps']} products of two "
           f"{w['n']} x {w['n']} matrices, {w['cpu_s'] * 1e3:.2f} ms of one core's CPU "
           f"({w['wall_s'] * 1e3:.2f} ms wall) when calibrated; one thread everywhere. "
           f"Load average {m['loadavg_at_start'][0]} at the start, {m['loadavg_at_end'][0]} at the end "
           f"({res['total_s']:.0f} s in all).", "",
           "| workload | system | steps/s, median | each round | CPU ms per step besides the work | "
           "other load (cores) |", "|---|---|---|---|---|---|"]
    for kind, s in sm.items():
        for name, x in s["systems"].items():
            out.append(f"| {WORKLOADS[kind]} | {NAMES[name]} | {x['steps_per_s_median']:.1f} | "
                       f"{', '.join(f'{r:.0f}' for r in x['steps_per_s'])} | "
                       f"{x['cpu_ms_per_step_besides_work_median']:.2f} | "
                       f"{', '.join(f'{r:.2f}' for r in x['other_load_cores'])} |")
    out += ["", "| workload | fleet / floor, median (each round) | fleet / Parsl, median (each round) | "
            "fleet's own processes, CPU ms per step | its step processes, CPU ms per step besides the work |",
            "|---|---|---|---|---|"]
    for kind, s in sm.items():
        f = s["systems"]["fleet"]
        r = s["ratios_per_round"]
        out.append(f"| {WORKLOADS[kind]} | {s['fleet_over_floor_median']:.2f} ({', '.join(map(str, r['fleet_over_floor']))}) | "
                   f"{s['fleet_over_peer_median']:.2f} ({', '.join(map(str, r['fleet_over_peer']))}) | "
                   f"{f['own_cpu_ms_per_step_median']:.2f} | {f['step_processes_besides_work_ms_median']:.2f} |")
    out += _before_after(sm)
    out += ["", "Fleet's CPU per step by process (median of the rounds, ms): " + "; ".join(
        f"{WORKLOADS[k]}: " + ", ".join(f"{r} {x:.2f}" for r, x in s["systems"]["fleet"]["cpu_ms_per_step_median"].items())
        for k, s in sm.items()) + ".",
        "Parsl's: " + "; ".join(
        f"{WORKLOADS[k]}: " + ", ".join(f"{r} {x:.2f}" for r, x in s["systems"]["peer"]["cpu_ms_per_step_median"].items())
        for k, s in sm.items()) + ".",
        "Minor page faults per step (median; a forked child's first write to each shared page is one): " + "; ".join(
        f"{WORKLOADS[k]}: " + ", ".join(f"{NAMES[n]}: " + ", ".join(f"{r} {x:.0f}" for r, x in sy.get(
            "minor_faults_per_step_median", {}).items()) for n, sy in s["systems"].items() if n != "peer")
        for k, s in sm.items()) + ".", "",
        "Targets (issue 12 b): fleet >= 0.9 x the raw fork floor: " + ", ".join(
            f"{WORKLOADS[k]} {'met' if ok else 'missed'}" for k, ok in v["fleet_over_floor_met"].items())
        + "; fleet's own processes <= 1.5 ms of CPU per step besides the step's: " + ", ".join(
            f"{WORKLOADS[k]} {'met' if ok else 'missed'} ({v['own_cpu_ms_per_step'][k]:.2f} ms)"
            for k, ok in v["own_cpu_met"].items()) + ".", ""]
    out += NOTES
    return "\n".join(out) + "\n"


def _before_after(sm: dict) -> list[str]:
    """With --baseline: fleet before and after, each against the floor of the same round."""
    if not all("before" in s["systems"] for s in sm.values()):
        return []
    out = ["", "Before (the --baseline checkout) and after (this checkout), measured in the same rounds:", "",
           "| workload | before / floor (each round) | after / floor (each round) | after / before (each round) | "
           "own CPU ms per step, before -> after: coordinator, agents, zygotes |", "|---|---|---|---|---|"]
    for kind, s in sm.items():
        r = s["ratios_per_round"]
        b, f = s["systems"]["before"]["cpu_ms_per_step_median"], s["systems"]["fleet"]["cpu_ms_per_step_median"]
        roles = ", ".join(f"{b.get(k, 0):.2f} -> {f.get(k, 0):.2f}" for k in
                          ("coordinator (own)", "agent (own)", "zygote (own)"))
        out.append(f"| {WORKLOADS[kind]} | {s['before_over_floor_median']:.2f} ({', '.join(map(str, r['before_over_floor']))}) | "
                   f"{s['fleet_over_floor_median']:.2f} ({', '.join(map(str, r['fleet_over_floor']))}) | "
                   f"{s['fleet_over_before_median']:.2f} ({', '.join(map(str, r['fleet_over_before']))}) | {roles} |")
    return out


# Written after looking at the recorded run (the figures above are regenerated; this is not).
NOTES: list[str] = [
    "What the figures say (the run of 2026-12-03 09:44 UTC, from a neutral working directory: `cd /tmp && "
    "python /work/main/benchmarks/peer_compare.py`). A quiet machine: other work used at most 0.03 of the 2 "
    "cores in any measurement (the load average of 2.2 at the end is this run's own). The first recorded run "
    "(2026-11-30, under load, before most of issue 12's work) is the first subsection below; the subsections "
    "after it measure each change on the way:",
    "",
    "- fleet / floor 0.41 on no-ops and 0.69 on the numpy step: the 0.9 x target is missed on both. Both "
    "systems are bound by CPU on these 2 cores, so fleet can reach at most the ratio of their CPU a step: "
    "~0.44 and ~0.84 (\"where a step's CPU goes\", below).",
    "- Fleet's own processes: 1.82 ms of CPU a step on no-ops, 2.24 on the numpy step (5.2-5.6 ms in the first "
    "recorded run): target 1.5 ms, missed by 0.3-0.7 ms. About 0.8 ms of it is the forking helpers' fork of "
    "the preloaded process, which the floor's loops pay too (0.52-0.59 ms here); the rest is about ten "
    "wake-ups of fleet's processes a step, at 130-360 us each, because on two one-core nodes each loop turn "
    "carries about one step (\"fleet's own CPU a step is wake-ups\", below: the same coordinator code costs "
    "73 us a step when a turn carries dozens).",
    "- Fleet's step processes cost more than the floor's: 2.65 against 1.36 ms a no-op step (the child's "
    "set-up: signals, process group, death signal, pinning, environment, directories, log, two reports, and "
    "~260 more copy-on-write faults), 9.32 against 7.46 ms on the numpy step, where the step's own work also "
    "runs slower among fleet's processes than alone (it was calibrated alone at 5.48 ms).",
    "- What giving each step its own process costs, against Parsl's shared warm workers: fleet / Parsl 0.33 "
    "on no-ops and 0.63 on the numpy step, and the raw floor itself is 0.82 and 0.92 x Parsl; longer steps "
    "dilute it. What it buys is isolation (a step's globals, leaks, threads, signal handlers, crashes or "
    "os._exit cannot reach the next step; its memory is returned when it exits; it can be killed alone), "
    "per-step logs, pinning and placement.",
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work-ms", type=float, default=5.0, help="CPU ms of the numpy step")
    ap.add_argument("--kinds", default=",".join(KINDS), help="workloads: noop,numpy")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--readme-only", action="store_true")
    ap.add_argument("--baseline", default="", help="a checkout of fleet to measure too, as \"before\"")
    ap.add_argument("--result", default="peer_compare",
                    help="results/NAME.json; another name leaves the README section as it is (printed only)")
    args = ap.parse_args(argv)
    if args.baseline:
        BASELINE.append(str(Path(args.baseline).resolve()))
    args.kinds = tuple(k for k in args.kinds.split(",") if k)
    if args.readme_only:
        write_section(HEADING, readme(json.loads((nb.RESULTS / "peer_compare.json").read_text())))
        return 0
    try:
        import parsl
    except ImportError:
        print("peer_compare needs Parsl for the warm peer: pip install parsl (or pip install -e .[bench])",
              file=sys.stderr)
        return 2
    res = {"benchmark": "peer_compare", "command": "python benchmarks/peer_compare.py"
           + (f" --steps {args.steps}" if args.steps != 2000 else "")
           + (f" --rounds {args.rounds}" if args.rounds != 3 else "")
           + (f" --baseline {args.baseline}" if args.baseline else "")
           + (f" --result {args.result}" if args.result != "peer_compare" else ""),
           "date": nb.today(), "machine": nb.machine(), "parsl": parsl.__version__,
           "steps": args.steps, "rounds": args.rounds}
    t = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fleet-peer-") as tmp:
        work = calibrate(args.work_ms / 1e3)
        print(f"numpy step: {work['reps']} x matmul {work['n']}x{work['n']}, "
              f"{work['cpu_s'] * 1e3:.2f} ms CPU", file=sys.stderr, flush=True)
        runs = measure_all(args, work, Path(tmp))
    res["work"] = work
    res["runs"] = runs
    res["summary"] = summarize(runs, work["cpu_s"] * 1e3)
    res["verdicts"] = verdicts(res["summary"])
    res["total_s"] = round(time.perf_counter() - t, 1)
    res["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    if not args.no_write:  # first: a run of some kinds only has no README text
        print(f"wrote {nb.write_result(args.result, res).relative_to(nb.REPO)}")
    print(readme(res))
    if not args.no_write:
        if args.result == "peer_compare":
            write_section(HEADING, readme(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
