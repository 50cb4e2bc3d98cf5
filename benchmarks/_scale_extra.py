"""Figures benchmarks/control_scale.py adds for long runs (1,000,000 steps), kept small
in the results file: no per-step list goes into it, only summaries of them.

- sustained start rates: Launches received per 10-second window from the first start
  to the last (median, 10th percentile, lowest and highest window), so a run's steady
  pace is told apart from its ramp-up and tail;
- the slowest Status answers, each with when it was sent (seconds after the Submit),
  to line them up with the coordinator's own records (e.g. its turn trace,
  fleet.control.turntrace);
- the machine: its load average and the run's wall time, sampled by the caller.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

WINDOW_S = 10.0


def run_scale(cmd: list[str], env: dict, work: Path, out: Path, timeout: float) -> tuple[dict, int]:
    """Run a control_scale.py command that writes `out`: (its results, or {"error": its stderr's
    end}; its exit status). `work` and `out` are removed after."""
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    try:
        r = json.loads(out.read_text())
    except (OSError, ValueError):
        r = {"error": p.stderr[-2000:]}
    shutil.rmtree(work, ignore_errors=True)
    out.unlink(missing_ok=True)
    return r, p.returncode


HERE = Path(__file__).resolve().parent
REPO = HERE.parent
KEYS = ("starts_per_s", "starts_per_s_after_submission", "coordinator_cpu_us_per_step",
        "coordinator_cpu_us_per_step_after_submission", "coordinator_and_helpers_cpu_us_per_step_after_submission",
        "coordinator_loop_cpu_us_per_step_after_submission", "wall_s")


def comparison_args(ap, steps: int) -> None:
    """The options every comparison of control_scale runs takes (sim_run reads them)."""
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--duration", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=1800.0)


def sim_run(name: str, k: int, args, extra_env: dict) -> tuple[dict, int, float]:
    """The k-th control_scale.py run of a comparison (``args``: agents, steps, duration,
    timeout), its work on /dev/shm, with a real fleet's node window and the agents'
    reports unbatched; ``extra_env`` on top: (its results, its exit status, its start)."""
    work = Path(f"/dev/shm/{name}-{os.getpid()}-{k}")
    room_for(work, args.steps)
    out = work.with_suffix(".json")
    cmd = [sys.executable, str(HERE / "control_scale.py"), "--agents", str(args.agents), "--steps", str(args.steps),
           "--duration", str(args.duration), "--idle", "2", "--agent-timeout", "120", "--timeout", str(args.timeout),
           "--work", str(work), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "FLEET_SIM_UNBATCHED": "1", "FLEET_SIM_WINDOW": "cores",
           **extra_env}
    t0 = time.time()
    r, code = run_scale(cmd, env, work, out, args.timeout + 300)
    return r, code, t0


def common_row(r: dict) -> dict:
    """What every comparison keeps of a run's results: the KEYS, the coordinator's CPU a
    step after the submission by thread (its loop, ZeroMQ's I/O thread, others), the
    sustained start rates, whether each step ran once, the load, an error."""
    run, ev = r.get("run") or {}, r.get("events") or {}
    threads = run.get("coordinator_threads_cpu_s_after_submission") or {}
    n = r.get("steps") or 1
    return {**{key: r.get(key) for key in KEYS},
            "threads_us_per_step_after_submission": {k: round(1e6 * v / n, 1) for k, v in threads.items()},
            "sustained": r.get("starts_sustained"), "each_step_once": ev.get("each_step_once"),
            "loadavg": [run.get("loadavg_at_submit"), run.get("loadavg_at_done")], "error": r.get("error")}


def save(benchmark: str, argv: list[str], rows: list[dict], out: str) -> None:
    """The comparison's rows to ``out`` with its command, date and commit."""
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    res = {"benchmark": benchmark, "command": f"python benchmarks/{benchmark}.py " + " ".join(argv),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit,
           "cpus": os.cpu_count(), "rows": rows}
    Path(out).write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {out}")


INODES_PER_STEP = 4  # a finished step's directory, its .fleet, its done marker (3.4 measured), and room


def room_for(work: Path, steps: int) -> None:
    """Stop with a clear message if `work`'s file system has too few free inodes for
    `steps` steps' records: a run that runs out part way (a /dev/shm left full by earlier
    runs) fails its markers' writes and loses agents, and its figures mean nothing."""
    probe = work if work.exists() else work.parent
    while not probe.exists():
        probe = probe.parent
    st = os.statvfs(probe)
    if st.f_files and st.f_favail < INODES_PER_STEP * steps:
        raise SystemExit(f"{probe}: {st.f_favail:,} free inodes, {INODES_PER_STEP * steps:,} wanted for {steps:,} "
                         "steps: remove earlier runs' work directories first")


def sustained(received: list[float], window: float = WINDOW_S) -> dict:
    """Starts per second over fixed windows of the sorted receipt times (the last,
    partial window left out)."""
    if len(received) < 2 or received[-1] - received[0] < 2 * window:
        return {}
    t0, counts = received[0], []
    n_windows = int((received[-1] - t0) // window)
    counts = [0] * n_windows
    for t in received:
        k = int((t - t0) // window)
        if k < n_windows:
            counts[k] += 1
    rates = sorted(c / window for c in counts)
    pick = lambda q: rates[min(len(rates) - 1, int(q * (len(rates) - 1) + 0.5))]  # noqa: E731
    return {"window_s": window, "windows": n_windows, "median": round(pick(0.5), 1), "p10": round(pick(0.1), 1),
            "min": round(rates[0], 1), "max": round(rates[-1], 1)}


def slowest(samples: list[tuple[float, float]], t_submit: float, n: int = 8) -> list[dict]:
    """The n slowest Status answers: sent at (s after the Submit) and seconds taken."""
    worst = sorted(samples, key=lambda s: s[1], reverse=True)[:n]
    return [{"sent_after_submit_s": round(sent - t_submit, 2), "answer_s": round(lat, 3)} for sent, lat in worst]


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]
