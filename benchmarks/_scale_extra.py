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
