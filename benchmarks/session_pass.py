"""What one pass over /proc costs (fleet.node.session): the zygote makes one when it
stops a command step, to signal the groups of the step's session its command made.

    python benchmarks/session_pass.py     # writes results/session_pass.json and its README section

With N extra sleeping processes on the machine (0, 100, 300, 1000), the CPU (this
process's user + system time) of one `session.sessions()` pass, the median of 7 rounds
of 50 passes. The kernel formats each process's /proc/PID/stat for the pass, so the
cost grows with the processes on the node, not with the steps being stopped.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
from pathlib import Path

from readme_section import write_section  # noqa: E402 (benchmarks/ is sys.path[0])

from fleet.node import session

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "session_pass.json"
HEADING = "## A stopped step's session: one pass over /proc (fleet.node.session)"


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def per_pass(rounds: int = 7, passes: int = 50) -> float:
    times = []
    for _ in range(rounds):
        t = cpu()
        for _ in range(passes):
            session.sessions()
        times.append((cpu() - t) / passes)
    return statistics.median(times)


def main() -> int:
    rows = []
    extra: list[subprocess.Popen] = []
    try:
        for n in (0, 100, 300, 1000):
            while len(extra) < n:
                extra.append(subprocess.Popen(["sleep", "600"], start_new_session=True))
            procs = sum(1 for x in os.listdir("/proc") if x.isdigit())
            ms = per_pass() * 1e3
            rows.append({"extra": n, "processes": procs, "ms_per_pass": round(ms, 3),
                         "us_per_process": round(1e3 * ms / procs, 1)})
            print(rows[-1], file=sys.stderr, flush=True)
    finally:
        for p in extra:
            p.kill()
        for p in extra:
            p.wait(timeout=30)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    res = {"benchmark": "session_pass", "command": "python benchmarks/session_pass.py", "commit": commit,
           "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                       "load_average": [round(x, 2) for x in os.getloadavg()]},
           "rows": rows}
    RESULTS.write_text(json.dumps(res, indent=1) + "\n")
    lines = [HEADING, "", f"{res['date']}, commit {commit}, {os.cpu_count()} cores, load average "
             f"{res['machine']['load_average'][0]} at the end:", "", "    python benchmarks/session_pass.py", "",
             "Results: `benchmarks/results/session_pass.json`. The CPU of one pass over /proc (every process's "
             "`stat`), as the zygote makes it when it stops a command step (one pass serves every signal and reap "
             "within 50 ms of it: a stop's SIGTERM and SIGCONT, the burst of a node shutting down), with N extra "
             "sleeping processes:", "",
             "| extra processes | processes on the machine | CPU a pass (ms) | per process (us) |",
             "|---:|---:|---:|---:|"]
    lines += [f"| {r['extra']} | {r['processes']} | {r['ms_per_pass']} | {r['us_per_process']} |" for r in rows]
    big = next(r for r in rows if r["extra"] == 300)
    lines += ["", "Paid only for steps being stopped (a timeout, a cancel, `fleet down`, the drain), never at a "
              f"step's own end. At a pass for each signal and reap (three a step), a node of {big['processes']} "
              f"processes shutting down with 104 steps would spend about 3 x 104 x {big['ms_per_pass']} ms = "
              f"{3 * 104 * big['ms_per_pass'] / 1e3:.1f} s (computed from that row, not measured); a pass shared "
              "by everything within 50 ms of it makes that a few passes."]
    write_section(HEADING, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
