"""Call targets for the fleet integration tests (module `fleet_steps`, with tests/ on
PYTHONPATH). Each leaves evidence in files so tests check what really happened."""

import json
import os
import signal
import time
from pathlib import Path


def nap(ctx):
    """Sleep for args.seconds (default 0.5), recording pid, cores and times."""
    t0 = time.time()
    time.sleep(float(ctx.args.get("seconds", 0.5)))
    Path(ctx.workdir, "nap.json").write_text(json.dumps(
        {"pid": os.getpid(), "cores": sorted(os.sched_getaffinity(0)), "start": t0, "end": time.time()}))


def produce(ctx):
    """Write a deterministic output from args (same input, same bytes)."""
    n = int(ctx.args.get("n", 10))
    data = {"id": ctx.id, "values": [i * i for i in range(n)]}
    for out in ctx.outputs:
        Path(out).write_text(json.dumps(data, sort_keys=True))
    print(f"{ctx.id}: wrote {len(ctx.outputs)} output(s)")


def combine(ctx):
    total = 0
    for inp in ctx.inputs:
        total += sum(json.loads(Path(inp).read_text())["values"])
    for out in ctx.outputs:
        Path(out).write_text(json.dumps({"total": total}, sort_keys=True))
    print(f"{ctx.id}: total {total}")


def fail_unless_flag(ctx):
    """Fail while the flag file named in args is missing (to test reruns)."""
    if not Path(ctx.args["flag"]).exists():
        raise RuntimeError(f"flag {ctx.args['flag']} is missing")
    Path(ctx.workdir, "ran").write_text(str(time.time()))


def count_runs(ctx):
    """Append one line per run to a file under the run directory."""
    with open(Path(ctx.run_dir, "runs.txt"), "a") as f:
        f.write(ctx.id + "\n")


def kill_self(ctx):
    time.sleep(float(ctx.args.get("after", 0.2)))
    os.kill(os.getpid(), signal.SIGKILL)


def sleep_forever(ctx):
    Path(ctx.workdir, "pid").write_text(str(os.getpid()))
    while True:
        time.sleep(1)
