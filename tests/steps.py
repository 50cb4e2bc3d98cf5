"""Step functions for the zygote tests (call targets "steps:NAME", with tests/ on
PYTHONPATH). Each records what it saw in ctx.workdir so the test can check it."""

import json
import os
import signal
import subprocess
import sys
import time

# Taken when the zygote preloads this module: what the zygote itself had.
ZYGOTE_OMP_NUM_THREADS = os.environ.get("OMP_NUM_THREADS")


def _write(ctx, name, data):
    path = os.path.join(ctx.workdir, name)
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)  # readers never see half a file


def record(ctx):
    """Write pid, process group, affinity, cwd and environment; print to both streams."""
    print("hello on stdout")
    print("hello on stderr", file=sys.stderr)
    os.write(1, b"raw fd 1\n")
    _write(ctx, "record.json", {
        "pid": os.getpid(), "pgid": os.getpgid(0), "sid": os.getsid(0), "ppid": os.getppid(),
        "affinity": sorted(os.sched_getaffinity(0)), "cwd": os.getcwd(),
        "id": ctx.id, "attempt": ctx.attempt, "cores": list(ctx.cores),
        "args": ctx.args, "log": ctx.log,
        "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "extra": os.environ.get("FLEET_TEST_EXTRA"),
        "omp_now": os.environ.get("OMP_NUM_THREADS"),
        "omp_in_zygote": ZYGOTE_OMP_NUM_THREADS,
        "sigterm_default": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
        "sigint_default": signal.getsignal(signal.SIGINT) == signal.SIG_DFL,
    })


def boom(ctx):
    raise RuntimeError("boom from the step")


def exit_with(ctx):
    sys.exit(ctx.args["code"])


def kill_self(ctx):
    os.kill(os.getpid(), signal.SIGKILL)


def sleep_with_grandchild(ctx):
    """Start a grandchild in the step's process group, record both pids, sleep."""
    grandchild = subprocess.Popen(["sleep", "60"])
    _write(ctx, "pids.json", {"pid": os.getpid(), "grandchild": grandchild.pid})
    time.sleep(60)


def ignore_sigterm(ctx):
    """A step that will only go with SIGKILL."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _write(ctx, "pids.json", {"pid": os.getpid()})
    time.sleep(60)


def burn(ctx):
    """Some CPU, so rusage has something to show."""
    end = time.process_time() + 0.05
    while time.process_time() < end:
        pass


def wait_for_file(ctx):
    """Run until the file args["path"] exists (the test's gate), at most 60 s."""
    deadline = time.monotonic() + 60
    while not os.path.exists(ctx.args["path"]) and time.monotonic() < deadline:
        time.sleep(0.005)


def draw(ctx):
    """Write a draw of the random module: a forked child must not repeat its parent's."""
    import random
    _write(ctx, "draw.json", {"draw": random.random(), "ppid": os.getppid()})


def descriptors(ctx):
    """What the step's process holds: its open fds and where they lead, what stdin gives,
    whether the collector runs for its code, and its environment."""
    import gc
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:  # listdir's own descriptor, closed by now
            pass
    print("to the log through sys.stdout")
    _write(ctx, "descriptors.json", {"fds": fds, "stdin": sys.stdin.read(), "gc": gc.isenabled(),
                                     "env": dict(os.environ)})
