"""File opens of a fleet that waits for steps another fleet runs on a shared run directory
(another shard's steps its own depend on), per period, before and after the claims log
said which steps ended.

    python benchmarks/foreign_wait_ops.py              # 2,000 steps each side, 10 s of waiting
    python benchmarks/foreign_wait_ops.py --steps 200 --wait 4

Needs strace. Shard 1 (`fleet run --shard 1/2`, use/{i} depends on make/{i}) starts
alone under `strace -f`, waits --wait seconds (nobody runs make/*), then shard 0 runs
make/* (untraced) and both finish. Counted from the trace: opens and stats of
steps/make/*/.fleet/{done,final,claim} by the waiting shard, while it waited alone
and in all. Prints JSON; the figures go to benchmarks/README.md by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CALLS = "openat,stat,newfstatat,statx,access"
WAITED = re.compile(r"^\d+\s+(\d+\.\d+)\s+(\w+)\(.*steps/make/\d+/\.fleet/(done\.json|final\.json|claim)")


def suite(path: Path, n: int) -> None:
    path.write_text(f"""[suite]
name = "foreign"
run_dir = "run"
[[steps]]
id = "make/{{i}}"
array = "0-{n - 1}"
task = "0"
call = "fleet_bench_steps:noop"
[[steps]]
id = "use/{{i}}"
array = "0-{n - 1}"
task = "1"
call = "fleet_bench_steps:noop"
deps = ["make/{{i}}"]
""")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--wait", type=float, default=10.0)
    args = ap.parse_args(argv)
    if shutil.which("strace") is None:
        print("foreign_wait_ops needs strace: apt-get install -y strace", file=sys.stderr)
        return 2
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])}
    with tempfile.TemporaryDirectory(prefix="fleet-foreign-") as tmp:
        work = Path(tmp)
        suite(work / "s.toml", args.steps)
        trace = work / "waiter.strace"
        fleet = [sys.executable, "-m", "fleet", "run", str(work / "s.toml"), "--nodes", "1"]
        waiter = subprocess.Popen(["strace", "-f", "-qq", "-ttt", "-e", f"trace={CALLS}", "-o", str(trace),
                                   *fleet, "--shard", "1/2"], cwd=work, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while not (work / "run" / "events.jsonl").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(2.0)  # the submission checked and declared (its marker reads are not the wait's)
            t0 = time.time()
            time.sleep(args.wait)
            t1 = time.time()
            other = subprocess.run([*fleet, "--shard", "0/2"], cwd=work, env=env, capture_output=True, timeout=900)
            out = waiter.communicate(timeout=900)[0].decode(errors="replace")
        finally:
            if waiter.poll() is None:
                os.killpg(waiter.pid, 9)
                waiter.communicate()
        if other.returncode or waiter.returncode:
            print(out[-2000:], other.stdout.decode()[-2000:], other.stderr.decode()[-2000:], file=sys.stderr)
            return 1
        waiting = total = 0
        for line in trace.read_text(errors="replace").splitlines():
            m = WAITED.match(line)
            if m:
                total += 1
                waiting += t0 <= float(m.group(1)) < t1
    print(json.dumps({"steps": args.steps, "wait_s": round(t1 - t0, 2),
                      "reads_while_waiting": waiting, "reads_while_waiting_per_s": round(waiting / (t1 - t0), 1),
                      "reads_in_all": total, "reads_in_all_per_step": round(total / args.steps, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
