"""`fleet report` on a synthetic 100,000-step event stream (issue 7: under 10 s).

    python benchmarks/report_100k.py                  # writes benchmarks/results/report_100k.json
    python benchmarks/report_100k.py --steps 5000     # smaller, for a smoke test

The stream is made by a small list scheduler in the shape the coordinator writes:
8 nodes x 64 cores, 100,000 steps (1 core; every 20th takes 4), 30 % of them depending
on a recent earlier step, 0.2 % failing (their dependents blocked), a wait record for
the head of each kind of step that does not fit, startup 3-50 ms and work 0.5-30 s.
Then, each as a `fleet` subprocess (timed from outside, three times, median kept):
the terminal summary, `--json`, and `--trace` with `--html` together.
The section "## fleet report on 100,000 steps" of benchmarks/README.md is rewritten
from the results (other sections are left alone).
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

from readme_section import write_section  # noqa: E402 (benchmarks/ is sys.path[0])

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SECTION = "## fleet report on 100,000 steps"


def generate(path: Path, steps: int, nodes: int = 8, cores: int = 64, seed: int = 1) -> dict:
    rnd = random.Random(seed)
    out = open(path, "w", encoding="utf-8")
    n_rec = 0

    def w(t: float, kind: str, **f) -> None:
        nonlocal n_rec
        rec = {"t": round(t, 6), "kind": kind}
        rec.update(f)
        out.write(json.dumps(rec, separators=(",", ":")) + "\n")
        n_rec += 1

    t = 1_800_000_000.0
    mem = 256 * 2**30
    names = [f"node{k + 1}" for k in range(nodes)]
    w(t, "fleet_starting", nodes=nodes, pid=1)
    for k, name in enumerate(names):
        w(t + 2, "node_joined", node=name, host=f"x{k}", cores=list(range(cores)), gpus=[], memory=mem,
          pid=100 + k, zygote_pid=200 + k)
    w(t + 2, "fleet_up", nodes=names)
    t += 3
    ids = [f"s{i:06d}" for i in range(steps)]
    width = [4 if i % 20 == 0 else 1 for i in range(steps)]
    deps = [[ids[rnd.randrange(i - 100, i)]] if i >= 100 and rnd.random() < 0.3 else [] for i in range(steps)]
    work = [rnd.uniform(0.5, 30.0) for _ in range(steps)]
    startup = [rnd.uniform(0.003, 0.05) for _ in range(steps)]
    fails = [rnd.random() < 0.002 for _ in range(steps)]
    w(t, "submitted", submission=1, suite="bench.toml", name="bench", steps=steps, skipped=0, serial=False, force=False)
    for i in range(steps):
        w(t, "step", step=ids[i], submission=1, cores=width[i], min_cores=width[i], gpus=0, memory=None,
          deps=deps[i], priority=3, step_kind="call", task=ids[i])
    index = {sid: i for i, sid in enumerate(ids)}
    dependents: list[list[int]] = [[] for _ in range(steps)]
    unmet = [0] * steps
    for i, ds in enumerate(deps):
        for d in ds:
            dependents[index[d]].append(i)
            unmet[i] += 1
    free = [list(range(cores)) for _ in range(nodes)]
    queues = {1: deque(), 4: deque()}
    waiting_reason: dict[int, str] = {}
    for i in range(steps):
        if unmet[i] == 0:
            queues[width[i]].append(i)
    running: list[tuple[float, int, int, list[int]]] = []
    now = t

    def block(i: int, because: str, at: float) -> None:
        todo = [i]
        while todo:
            j = todo.pop()
            for k in dependents[j]:
                if unmet[k] > 0:
                    unmet[k] = -1
                    w(at, "blocked", step=ids[k], because=because)
                    todo.append(k)

    def schedule(at: float) -> None:
        for wd in (4, 1):
            q = queues[wd]
            while q:
                i = q[0]
                node = next((k for k in range(nodes) if len(free[k]) >= wd), None)
                if node is None:
                    total = sum(len(f) for f in free)
                    why = (f"needs {wd} cores, {total} free" if total < wd else
                           f"no node has {wd} cores free together (the step may not span nodes)")
                    if waiting_reason.get(i) != why:
                        waiting_reason[i] = why
                        w(at, "wait", step=ids[i], reason=why, behind=len(q) - 1)
                    break
                q.popleft()
                got, free[node] = free[node][:wd], free[node][wd:]
                placement = [{"node": names[node], "cores": got, "gpus": [], "memory": mem * wd // cores}]
                w(at, "start", step=ids[i], attempt=1, node=names[node], cores=got, gpus=[], memory=mem * wd // cores,
                  nodes=[names[node]], placement=placement)
                w(at + 0.002, "started", step=ids[i], attempt=1, node=names[node], pid=1000 + i)
                end = at + startup[i] + work[i] + 0.001
                heapq.heappush(running, (end, i, node, got))

    schedule(now)
    while running:
        end, i, node, got = heapq.heappop(running)
        now = end
        free[node] = sorted(free[node] + got)
        ok = not fails[i]
        decided = None
        w(now, "exit", step=ids[i], attempt=1, node=names[node], outcome="succeeded" if ok else "failed",
          returncode=0 if ok else 1, signal=None, cores=got, gpus=[], memory=mem * width[i] // cores,
          decided_at=(decided := end - startup[i] - work[i] - 0.001), first_at=decided + startup[i] / 2,
          work_start=decided + startup[i], work_end=decided + startup[i] + work[i], ended_at=end - 0.0005,
          startup_s=round(startup[i], 6), work_s=round(work[i], 6), utime=work[i] * 0.9, stime=0.01,
          maxrss_kb=50000, error=None if ok else "exit status 1", reason="" if ok else "exit status 1")
        if ok:
            for k in dependents[i]:
                if unmet[k] > 0:
                    unmet[k] -= 1
                    if unmet[k] == 0:
                        queues[width[k]].append(k)
        else:
            block(i, ids[i], now)
        schedule(now)
    w(now + 1, "fleet_down")
    out.close()
    return {"records": n_rec, "bytes": path.stat().st_size, "simulated_wall_s": round(now - t, 1)}


def timed(args: list[str], cwd: Path, timeout: float = 300) -> tuple[float, float, str]:
    """(wall s, CPU s of the fleet process, its stdout)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "fleet", *args], cwd=cwd, capture_output=True, text=True,
                       timeout=timeout, start_new_session=True)
    dt = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"fleet {' '.join(args)} exited {p.returncode}:\n{p.stderr}")
    return dt, (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime), p.stdout


def _machine_busy() -> float:
    """CPU seconds the whole machine has been busy (all cores), from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def update_readme(res: dict) -> None:
    path = HERE / "README.md"
    g, m, c = res["stream"], res["median_s"], res["median_cpu_s"]
    body = f"""{SECTION}

`python benchmarks/report_100k.py` ([script](report_100k.py), [results](results/report_100k.json)):
a synthetic event stream of {res['steps']:,} steps on 8 nodes x 64 cores ({g['records']:,} records,
{g['bytes'] / 2**20:.0f} MiB; 30 % of the steps depend on an earlier one, 0.2 % fail and block their
dependents), reported by `fleet` as a subprocess on this {res['machine']['cpus']}-core machine
(median of {res['repeat']} runs, from process start to exit; CPU is the process's own user + system
time, which other load does not inflate much):

| command | wall, median | wall, max | CPU, median |
|---|---|---|---|
| `fleet report RUN_DIR` (terminal summary) | {m['text']:.2f} s | {res['max_s']['text']:.2f} s | {c['text']:.2f} s |
| `fleet report RUN_DIR --json` | {m['json']:.2f} s | {res['max_s']['json']:.2f} s | {c['json']:.2f} s |
| `fleet report RUN_DIR --json --trace T --html H` | {m['all']:.2f} s | {res['max_s']['all']:.2f} s | {c['all']:.2f} s |

The machine is shared: meanwhile everything else kept {res['other_load_cores']:.1f} of its
{res['machine']['cpus']} cores busy on average (load average {res['machine']['loadavg_1m'][0]:.1f} at the
start, {res['machine']['loadavg_1m'][1]:.1f} at the end), so wall times are up to twice the CPU times.
About 1.8 s of each report is parsing the 100 MB of JSON lines (one `json.loads` of the whole stream
as an array; the cyclic garbage collector is off while the records are read and reduced).

Target (issue 7): the report in under 10 s: **{'met' if res['target_met'] else 'NOT met'}**
(median wall time of the summary and of `--json`).
The trace has {res['trace_events']:,} events ({res['trace_bytes'] / 2**20:.0f} MiB) and the HTML page is
{res['html_bytes'] / 2**20:.1f} MiB (beyond {res['exact_bars']:,} bars the timeline is drawn per pixel column).
"""
    write_section(SECTION, body, path)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "report_100k.json"))
    ap.add_argument("--no-readme", action="store_true")
    args = ap.parse_args()
    from fleet.report.html import EXACT_BARS
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        run.mkdir()
        t0 = time.monotonic()
        gen = generate(run / "events.jsonl", args.steps)
        gen["generate_s"] = round(time.monotonic() - t0, 2)
        print(f"stream: {gen}", flush=True)
        times: dict[str, list[float]] = {"text": [], "json": [], "all": []}
        cpus: dict[str, list[float]] = {"text": [], "json": [], "all": []}
        load = [os.getloadavg()[0]]
        busy0 = _machine_busy()
        t_bench = time.monotonic()
        for _ in range(args.repeat):
            for key, extra in (("text", []), ("json", ["--json"]),
                               ("all", ["--json", "--trace", str(Path(tmp) / "t.json"),
                                        "--html", str(Path(tmp) / "r.html")])):
                dt, cpu, out = timed(["report", str(run), *extra], cwd=Path(tmp))
                times[key].append(dt)
                cpus[key].append(cpu)
                if key == "json":
                    j = json.loads(out)
                    assert len(j["steps"]) == args.steps, len(j["steps"])
            print({k: (round(v[-1], 2), round(cpus[k][-1], 2)) for k, v in times.items()}, flush=True)
        load.append(os.getloadavg()[0])
        # Cores busy meanwhile with everything else (the machine is shared).
        other = (_machine_busy() - busy0 - sum(sum(v) for v in cpus.values())) / (time.monotonic() - t_bench)
        trace = json.loads((Path(tmp) / "t.json").read_text())
        from fleet.report.trace import validate
        problems = validate(trace)
        res = {
            "steps": args.steps, "repeat": args.repeat, "stream": gen,
            "median_s": {k: round(statistics.median(v), 3) for k, v in times.items()},
            "median_cpu_s": {k: round(statistics.median(v), 3) for k, v in cpus.items()},
            "other_load_cores": round(other, 2),
            "max_s": {k: round(max(v), 3) for k, v in times.items()},
            "all_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
            "target_s": 10.0,
            "target_met": max(statistics.median(times["text"]), statistics.median(times["json"])) < 10.0,
            "report": {k: j[k] for k in ("wall_s", "work_s", "speedup", "floor_s", "startup_s")},
            "trace_events": len(trace["traceEvents"]), "trace_bytes": (Path(tmp) / "t.json").stat().st_size,
            "trace_problems": problems[:5], "html_bytes": (Path(tmp) / "r.html").stat().st_size,
            "exact_bars": EXACT_BARS,
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "loadavg_1m": load},
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))
    if not args.no_readme and args.steps == 100_000:
        update_readme(res)
    return 0 if res["target_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
