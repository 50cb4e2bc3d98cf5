"""Call targets for the node-agent benchmarks (module `fleet_bench_steps`, importable
by agents and zygotes when benchmarks/ is on PYTHONPATH; the benchmark scripts set
that up themselves)."""

import os
import time


def noop(ctx):
    """Nothing at all: what is measured around it is fleet's own cost."""


def sleep(ctx):
    """Say "ready" (a file in the work directory), then sleep args.seconds (default 60)."""
    with open(os.path.join(ctx.workdir, "ready"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(float(ctx.args.get("seconds", 60)))


def fails_unless_flag(ctx):
    """Fail (raise) unless the file args.flag exists: a suite whose every step fails once,
    then succeeds when rerun after the flag is made (benchmarks/metadata_ops.py --rerun)."""
    if not os.path.exists(ctx.args["flag"]):
        raise RuntimeError(f"no {ctx.args['flag']} yet")


def nap(ctx):
    """Sleep args.seconds (default 0.02) and do nothing else: the machine stays idle
    between the fleet's wake-ups (benchmarks/wakeups.py)."""
    time.sleep(float(ctx.args.get("seconds", 0.02)))
