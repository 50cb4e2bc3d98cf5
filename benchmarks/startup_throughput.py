"""Node agents (a)+(b): per-step start cost and throughput of 2,000 no-op `call` steps
on `fleet up --nodes 2`, side by side in the same run with the raw fork floor and with
one fresh Python process per step.

    python benchmarks/startup_throughput.py                 # writes benchmarks/results/startup_throughput.json
    python benchmarks/startup_throughput.py --steps 500     # smaller, for a smoke test

In this order, in one run (preload numpy and scipy.linalg everywhere):

1. raw floor, two loops at once (both cores), for context: two fresh `python -c` that
   import numpy and scipy.linalg, then loop fork / os._exit(0) / waitpid 2,000 times.
2. subprocess per step: `python -c "import numpy, scipy.linalg"` run 40 times one after
   the other (and 40 more two at a time); the rate is extrapolated to 2,000 steps.
3. three pairs (--repeat) of:
   - the raw floor: one such loop, 2 x 2,000 forks (one core at a time);
   - fleet: `fleet up --nodes 2 --preload numpy,scipy.linalg`, `fleet run` of a suite
     of 2,000 `call = "fleet_bench_steps:noop"` steps, `fleet down`. Throughput is
     exits / (last exit record - first start record) in events.jsonl; start cost is
     the exit records' startup_s (decision to the step's first instruction of its own
     work). CPU time of every fleet process (steps included, as reaped children of
     the zygotes) is read with psutil around the run.
   The machine is shared: for every measurement, the cores used meanwhile by
   everything else (machine busy time minus ours) are recorded as "other load".
4. the zygote alone: one zygote driven directly over its pipes (no coordinator, no
   agent), one step in flight, to show what the layers above it add.

Targets (issue 3): fleet >= 0.5 x the raw floor (one loop; judged on the median of the
pairs' ratios, leaving out pairs where other work used over 0.5 cores if any are left)
and >= 30 x subprocess per step (one at a time).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _nodebench as nb  # noqa: E402

FLOOR_CODE = r"""
import json, os, sys, time
import numpy, scipy.linalg
n, reps = int(sys.argv[1]), int(sys.argv[2])
rates = []
for _ in range(reps):
    t = time.perf_counter()
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    rates.append(n / (time.perf_counter() - t))
print(json.dumps(rates))
"""


DISTURBED = 0.5  # cores used by other work during a measurement, above which a pair is set aside


def other_load(fn):
    """fn(), and how many cores everything else on the machine used meanwhile (machine
    busy time minus our children's CPU: what fn measures runs in child processes)."""
    def busy(ct):
        return sum(getattr(ct, f) for f in ct._fields if f not in ("idle", "iowait", "guest", "guest_nice"))
    a, ca, t = psutil.cpu_times(), resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    out = fn()
    b, cb, wall = psutil.cpu_times(), resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter() - t
    ours = (cb.ru_utime + cb.ru_stime) - (ca.ru_utime + ca.ru_stime)
    out["other_load_cores"] = round(max(0.0, busy(b) - busy(a) - ours) / wall, 2)
    return out


def raw_floor(n: int, reps: int, width: int = 1) -> dict:
    """`width` fork loops at once, each `reps` x `n` forks; steps/s over all of them."""
    argv = [sys.executable, "-c", FLOOR_CODE, str(n), str(reps)]
    t = time.perf_counter()
    with ThreadPoolExecutor(width) as pool:
        outs = list(pool.map(lambda _: nb.run(argv, timeout=300, stdout=subprocess.PIPE), range(width)))
    wall = time.perf_counter() - t
    rates = [r for o in outs for r in json.loads(o.stdout)]
    if width == 1:
        return {"loops": 1, "forks": n * reps, "rates": [round(r, 1) for r in rates],
                "steps_per_s": round(nb.median(rates), 1)}
    # Throughput of all loops together, over the whole time (imports excluded: each loop's
    # import time is a small, similar offset; the per-rep rates are kept too).
    return {"loops": width, "forks": n * reps * width, "rates": [round(r, 1) for r in rates],
            "steps_per_s": round(sum(nb.median(o) for o in (json.loads(x.stdout) for x in outs)), 1),
            "wall_s_incl_imports": round(wall, 2)}


def subprocess_per_step(count: int, width: int = 1) -> dict:
    argv = [sys.executable, "-c", "import numpy, scipy.linalg"]
    durations = []

    def one(_):
        t = time.perf_counter()
        r = nb.run(argv, timeout=120)
        if r.returncode:
            raise RuntimeError(f"{argv} exited {r.returncode}")
        durations.append(time.perf_counter() - t)

    t = time.perf_counter()
    with ThreadPoolExecutor(width) as pool:
        list(pool.map(one, range(count)))
    wall = time.perf_counter() - t
    rate = count / wall
    return {"processes": count, "at_once": width, "wall_s": round(wall, 3),
            "per_process_s_median": round(nb.median(durations), 4),
            "per_process_s_p95": round(nb.pct(durations, 95), 4),
            "steps_per_s": round(rate, 2),
            "extrapolated_2000_steps_s": round(2000 / rate, 1)}


def write_suite(path: Path, steps: int) -> None:
    path.write_text(
        '[suite]\nname = "noop"\npreload = ["numpy", "scipy.linalg"]\n\n'
        f'[[steps]]\nid = "noop/{{i}}"\narray = "0-{steps - 1}"\ncall = "{nb.STEPS_MODULE}:noop"\n')


def fleet_run(work: Path, steps: int, write=write_suite, preload=nb.PRELOAD, nodes: int = 2, up_args=()) -> dict:
    """`fleet up --nodes 2 --preload ...` in work/run (`nodes` pretend nodes sharing this
    machine's cores), `fleet run` of the suite that write(path, steps) writes (by default
    2,000 no-op steps), `fleet down`; the figures. peer_compare.py calls it with its own
    suites."""
    work.mkdir(parents=True, exist_ok=True)
    suite = work / "suite.toml"
    write(suite, steps)
    run_dir = work / "run"
    fleet = nb.Fleet(run_dir, nodes=nodes, preload=preload, up_args=up_args)
    leftovers: list[int] = []
    t_up = time.perf_counter()
    fleet.up()
    up_s = time.perf_counter() - t_up
    try:
        roles = fleet.roles()
        before = nb.cpu_snapshot(roles)
        sys_before = psutil.cpu_times()
        client_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        r = nb.run(nb.fleet_cli("run", str(suite), "--run-dir", str(run_dir)), timeout=900, env=fleet.env,
                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        run_wall = time.perf_counter() - t
        after = nb.cpu_snapshot(roles)
        sys_after = psutil.cpu_times()
        client_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if r.returncode != 0:
            raise RuntimeError(f"fleet run exited {r.returncode}:\n{r.stdout.decode(errors='replace')[-3000:]}")
    finally:
        leftovers = fleet.down()
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    starts = [e for e in events if e["kind"] == "start"]
    exits = [e for e in events if e["kind"] == "exit"]
    ok = [e for e in exits if e.get("outcome") == "succeeded"]
    t0, t1 = min(e["t"] for e in starts), max(e["t"] for e in exits)
    startup = [e["startup_s"] for e in ok]

    def ms(values):
        return {"median": round(nb.median(values) * 1e3, 3), "p95": round(nb.pct(values, 95) * 1e3, 3)}

    cpu = nb.cpu_delta(before, after)
    cpu_total = sum(v["own_s"] + v["children_s"] for v in cpu.values())
    client_s = (client_after.ru_utime + client_after.ru_stime) - (client_before.ru_utime + client_before.ru_stime)

    def busy(ct):
        return sum(getattr(ct, f) for f in ct._fields if f not in ("idle", "iowait", "guest", "guest_nice"))
    machine_busy = busy(sys_after) - busy(sys_before)
    nodes: dict[str, int] = {}
    by_node: dict[str, list] = {}
    for e in ok:
        nodes[e["node"]] = nodes.get(e["node"], 0) + 1
        by_node.setdefault(e["node"], []).append(e)
    # One node (one core) runs one step at a time, so its steps form a cycle: the
    # coordinator hears an exit, decides the next step, which starts, works, exits...
    turnaround, cycle = [], []
    for recs in by_node.values():
        recs.sort(key=lambda e: e["decided_at"])
        for prev, nxt in zip(recs, recs[1:]):
            turnaround.append(nxt["decided_at"] - prev["t"])
            cycle.append(nxt["decided_at"] - prev["decided_at"])
    return {
        "steps": steps, "succeeded": len(ok), "per_node": nodes,
        "fleet_up_s": round(up_s, 2), "fleet_run_wall_s": round(run_wall, 2),
        "span_s": round(t1 - t0, 3),
        "steps_per_s": round(len(exits) / (t1 - t0), 1),
        "startup_ms": ms(startup),
        # Where the start cost goes (all from the exit records):
        "breakdown_ms": {
            "decision_to_child_first_instruction": ms([e["first_at"] - e["decided_at"] for e in ok]),
            "child_setup_to_work_start": ms([e["work_start"] - e["first_at"] for e in ok]),
            "work": ms([e["work_s"] for e in ok]),
            "work_end_to_reaped": ms([e["ended_at"] - e["work_end"] for e in ok]),
            "reaped_to_coordinator_record": ms([e["t"] - e["ended_at"] for e in ok]),
            "decision_to_coordinator_record": ms([e["t"] - e["decided_at"] for e in ok]),
            "coordinator_record_to_next_decision_same_node": ms(turnaround),
            "cycle_per_node_decision_to_next_decision": ms(cycle),
        },
        "cpu_s": cpu, "cpu_s_total": round(cpu_total, 2),
        "cpu_ms_per_step": round(cpu_total / steps * 1e3, 3),
        "cpu_ms_per_step_in_steps": round(sum(v["children_s"] for v in cpu.values()) / steps * 1e3, 3),
        "cpu_cores_busy": round(cpu_total / (t1 - t0), 2),
        "fleet_run_client_cpu_s": round(client_s, 2),
        # The machine is shared: what everything else used while `fleet run` ran.
        "machine_busy_cores_during_run": round(machine_busy / run_wall, 2),
        "other_load_cores_during_run": round(max(0.0, machine_busy - cpu_total - client_s) / run_wall, 2),
        "leftover_pids_killed": leftovers,
    }


def zygote_direct(work: Path, steps: int) -> dict:
    """One zygote, driven over its pipes, one step at a time (no coordinator, no agent)."""
    env = nb.bench_env()
    code = r"""
import json, os, sys, time
import psutil
from fleet.wire import framing, messages
from fleet.node.agent import start_zygote
n, work = int(sys.argv[1]), sys.argv[2]
proc, req_w, rep_r = start_zygote("numpy,scipy.linalg")
hello = framing.read_message(rep_r)
assert isinstance(hello, messages.Hello), hello
reader = framing.FrameReader()
core = sorted(os.sched_getaffinity(0))[0]
def launch(i):
    wd = f"{work}/steps/s{i}"
    return messages.Launch(step=f"s{i}", attempt=1, kind="call", call="fleet_bench_steps:noop", args={},
                       command=None, cores=(core,), gpus=(), memory=0, workdir=wd, log=wd + "/log",
                       run_dir=work, decided_at=time.time(),
                       env={"FLEET_STEP": f"s{i}", "FLEET_ATTEMPT": "1", "FLEET_RUN_DIR": work})
zp = psutil.Process(proc.pid); c0 = zp.cpu_times()
startup = []
t = time.perf_counter()
for i in range(n):
    framing.write_message(req_w, launch(i))
    done = False
    while not done:
        for m in reader.feed(os.read(rep_r, 65536)):
            if isinstance(m, messages.Exited):
                assert m.outcome == "succeeded", m
                startup.append(m.work_start - m.decided_at)
                done = True
wall = time.perf_counter() - t
c1 = zp.cpu_times()
framing.write_message(req_w, messages.Shutdown(1.0))
proc.wait(timeout=20)
print(json.dumps({"steps": n, "wall_s": wall, "startup": startup,
                  "zygote_own_s": c1.user + c1.system - c0.user - c0.system,
                  "steps_own_s": c1.children_user + c1.children_system - c0.children_user - c0.children_system}))
"""
    r = nb.run([sys.executable, "-c", code, str(steps), str(work / "zygote")], timeout=600, env=env,
               stdout=subprocess.PIPE)
    d = json.loads(r.stdout)
    return {"steps": steps, "in_flight": 1, "steps_per_s": round(steps / d["wall_s"], 1),
            "startup_ms": {"median": round(nb.median(d["startup"]) * 1e3, 3),
                           "p95": round(nb.pct(d["startup"], 95) * 1e3, 3)},
            "cpu_ms_per_step_zygote": round(d["zygote_own_s"] / steps * 1e3, 3),
            "cpu_ms_per_step_in_steps": round(d["steps_own_s"] / steps * 1e3, 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--subprocesses", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=3, help="fleet runs (the median one is the headline)")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    res = {"benchmark": "startup_throughput", "command": "python benchmarks/startup_throughput.py"
           + (f" --steps {args.steps}" if args.steps != 2000 else "")
           + (f" --repeat {args.repeat}" if args.repeat != 3 else ""),
           "date": nb.today(), "machine": nb.machine(), "preload": list(nb.PRELOAD)}
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        work = Path(tmp)
        print("raw floor, two loops at once ...", file=sys.stderr, flush=True)
        floor_pair = other_load(lambda: raw_floor(2000, 1, width=2))
        print(f"subprocess per step ({args.subprocesses} + {args.subprocesses}) ...", file=sys.stderr, flush=True)
        sub1 = other_load(lambda: subprocess_per_step(args.subprocesses))
        sub2 = other_load(lambda: subprocess_per_step(args.subprocesses, width=2))
        floors, runs = [], []
        for k in range(args.repeat):
            # Each fleet run right after its own floor: the machine is shared, so a pair
            # sees the same neighbours as nearly as can be arranged.
            print(f"raw floor ({k + 1}/{args.repeat}) ...", file=sys.stderr, flush=True)
            floors.append(other_load(lambda: raw_floor(2000, 2)))
            print(f"fleet: {args.steps} no-op call steps on fleet up --nodes 2 ({k + 1}/{args.repeat}) ...",
                  file=sys.stderr, flush=True)
            runs.append(fleet_run(work / f"fleet{k}", args.steps))
        print("zygote alone ...", file=sys.stderr, flush=True)
        zd = zygote_direct(work, min(args.steps, 1000))
    pairs = [{"floor_steps_per_s": f["steps_per_s"], "floor_other_load_cores": f["other_load_cores"],
              "fleet_steps_per_s": r["steps_per_s"], "fleet_other_load_cores": r["other_load_cores_during_run"],
              "fleet_over_floor": round(r["steps_per_s"] / f["steps_per_s"], 3),
              "disturbed": max(f["other_load_cores"], r["other_load_cores_during_run"]) > DISTURBED}
             for f, r in zip(floors, runs)]
    # Judge on the pairs that other work left (mostly) alone, if there are any.
    calm = [p for p in pairs if not p["disturbed"]] or pairs
    # Headline: the fleet run of median throughput (its figures belong together), and the
    # pair ratios' median. Other load only ever slows a measurement down, so the best of
    # each (best fleet run / best floor) is also given: the least disturbed of both.
    fl = sorted(runs, key=lambda r: r["steps_per_s"])[(len(runs) - 1) // 2]
    floor = round(nb.median([f["steps_per_s"] for f in floors]), 1)
    floor_best = max(r for f in floors for r in f["rates"])
    fleet_best = max(r["steps_per_s"] for r in runs)
    res.update({
        "raw_floor": {"steps_per_s": floor, "best_steps_per_s": floor_best, "runs": floors,
                      "two_loops_at_once": floor_pair},
        "subprocess_per_step": {"one_at_a_time": sub1, "two_at_a_time": sub2,
                                "note": "measured on N processes, rate extrapolated to 2,000 steps"},
        "fleet": fl,
        "fleet_repeats": [{k: r[k] for k in ("steps_per_s", "startup_ms", "cpu_ms_per_step",
                                              "other_load_cores_during_run")} for r in runs],
        "pairs": pairs,
        "zygote_direct": zd,
    })
    ratio_floor = nb.median([p["fleet_over_floor"] for p in calm])
    ratio_best = fleet_best / floor_best
    ratio_sub = fl["steps_per_s"] / sub1["steps_per_s"]
    res["ratios"] = {
        "fleet_over_raw_floor_median_of_pairs": round(ratio_floor, 3),
        "pairs_judged": len(calm), "pairs_disturbed": sum(p["disturbed"] for p in pairs),
        "fleet_over_raw_floor_best_over_best": round(ratio_best, 3),
        "target_fleet_over_raw_floor": 0.5,
        "fleet_over_subprocess": round(ratio_sub, 1), "target_fleet_over_subprocess": 30,
        "fleet_over_two_raw_loops": round(fl["steps_per_s"] / floor_pair["steps_per_s"], 3),
        "fleet_over_two_subprocesses_at_once": round(fl["steps_per_s"] / sub2["steps_per_s"], 1),
        "floor_target_met": ratio_floor >= 0.5, "floor_target_met_best_over_best": ratio_best >= 0.5,
        "subprocess_target_met": ratio_sub >= 30,
    }
    res["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]

    rows = [
        (f"raw floor: fork/_exit/waitpid, 1 loop (median of {len(floors)})", floor, "-", "-"),
        ("raw floor: best 2,000-fork rep", floor_best, "-", "-"),
        ("raw floor: 2 loops at once", floor_pair["steps_per_s"], "-", "-"),
        (f"subprocess per step, 1 at a time (x{sub1['processes']})", sub1["steps_per_s"],
         f"{sub1['per_process_s_median'] * 1e3:.0f}", f"{sub1['per_process_s_p95'] * 1e3:.0f}"),
        (f"subprocess per step, 2 at a time (x{sub2['processes']})", sub2["steps_per_s"],
         f"{sub2['per_process_s_median'] * 1e3:.0f}", f"{sub2['per_process_s_p95'] * 1e3:.0f}"),
        (f"fleet up --nodes 2, {fl['steps']} no-op call steps (median run)", fl["steps_per_s"],
         f"{fl['startup_ms']['median']:.2f}", f"{fl['startup_ms']['p95']:.2f}"),
        (f"zygote alone, 1 in flight ({zd['steps']} steps)", zd["steps_per_s"],
         f"{zd['startup_ms']['median']:.2f}", f"{zd['startup_ms']['p95']:.2f}"),
    ]
    print(f"\n{'':52s} {'steps/s':>9s} {'start p50 ms':>13s} {'start p95 ms':>13s}")
    for name, rate, p50, p95 in rows:
        print(f"{name:52s} {rate:9.1f} {p50:>13s} {p95:>13s}")
    print("\npairs (raw floor, then fleet; other load = cores used by everything else meanwhile):")
    for p in pairs:
        print(f"  floor {p['floor_steps_per_s']:6.1f}/s (other {p['floor_other_load_cores']:.2f})   "
              f"fleet {p['fleet_steps_per_s']:6.1f}/s (other {p['fleet_other_load_cores']:.2f})   "
              f"fleet/floor {p['fleet_over_floor']:.2f}" + ("   DISTURBED" if p["disturbed"] else ""))
    n_disturbed = sum(p["disturbed"] for p in pairs)
    if n_disturbed:
        print(f"  {n_disturbed} pair(s) disturbed (other load over {DISTURBED} cores): "
              + (f"judged on the other {len(calm)}" if n_disturbed < len(pairs)
                 else "all were, so judged on all of them: rerun when the machine is quieter"))
    print(f"\nfleet / raw floor = {ratio_floor:.2f}, median of {len(calm)} pair(s) (target >= 0.5: "
          f"{'met' if ratio_floor >= 0.5 else 'MISSED'}); best fleet run / best floor rep = {ratio_best:.2f}")
    print(f"fleet / subprocess per step = {ratio_sub:.0f}x (target >= 30x: {'met' if ratio_sub >= 30 else 'MISSED'})")
    print("fleet start cost breakdown (ms, median / p95):")
    for k, v in fl["breakdown_ms"].items():
        print(f"  {k:40s} {v['median']:8.3f} {v['p95']:8.3f}")
    print(f"fleet CPU: {fl['cpu_ms_per_step']:.2f} ms per step over all processes "
          f"({fl['cpu_ms_per_step_in_steps']:.2f} in the step processes); {fl['cpu_cores_busy']:.2f} cores busy; "
          f"`fleet run` client {fl['fleet_run_client_cpu_s']:.2f} s; other load on the machine meanwhile "
          f"{fl['other_load_cores_during_run']:.2f} cores")
    for k, v in fl["cpu_s"].items():
        print(f"  {k:28s} own {v['own_s']:6.2f} s  reaped children {v['children_s']:6.2f} s")
    if fl["leftover_pids_killed"]:
        print(f"WARNING: fleet down left {fl['leftover_pids_killed']} (killed)")
    if not args.no_write:
        print(f"wrote {nb.write_result('startup_throughput', res).relative_to(nb.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
