"""Call targets for how a call step's function runs to its end (tests/node/test_call_step_ends.py,
tests/control/test_step_sessions.py): coroutines, generators, threads and atexit handlers,
an undecodable file name in an error, what a step runs under `timeout` and `set -m`."""

import asyncio
import atexit
import json
import os
import subprocess
import threading
import time

import fleet

# A handler registered when a zygote preloads this module: the zygote's, never a step's.
_ZYGOTE_ATEXIT = os.environ.get("FLEET_TEST_ZYGOTE_ATEXIT")
if _ZYGOTE_ATEXIT:
    atexit.register(lambda: open(_ZYGOTE_ATEXIT, "a").write(f"{os.getpid()}\n"))

LATIN1_NAME = os.fsdecode(b"caf\xe9.nc")  # as os.listdir gives a Latin-1 name: 'caf\udce9.nc'


async def coroutine(ctx):
    await asyncio.sleep(0.01)
    with open("coroutine.txt", "w") as f:
        f.write("ran")


async def coroutine_raises(ctx):
    await asyncio.sleep(0)
    raise ValueError("raised in the coroutine")


def generator(ctx):
    with open("generator.txt", "w") as f:
        f.write("ran")
    yield 1


async def async_generator(ctx):
    yield 1


def returns_generator(ctx):
    return generator(ctx)


def late_thread_and_atexit(ctx):
    """Return at once; a thread writes the declared output a second later, and an atexit
    handler notes the step's pid (the step is done only when both have run)."""
    def write():
        time.sleep(1.0)
        with open(ctx.outputs[0], "w") as f:
            f.write("late")
    threading.Thread(target=write).start()
    atexit.register(lambda: open("atexit.txt", "w").write(str(os.getpid())))


def endless_thread(ctx):
    """Return at once, leaving a non-daemon thread that never ends: held to its timeout."""
    threading.Thread(target=lambda: time.sleep(3600)).start()


def cannot_read(ctx):
    raise RuntimeError(f"cannot read {LATIN1_NAME}")


def broken_by_name(ctx):
    raise fleet.Broken(f"no data in {LATIN1_NAME}")


def session_jobs(ctx):
    """What a step runs under coreutils `timeout` and a `set -m` shell's job (each in a
    process group of its own), then sleep; the sleeps are found by their durations."""
    a, b = ctx.args["a"], ctx.args["b"]
    procs = [subprocess.Popen(["timeout", "300", "sleep", str(a)]),
             subprocess.Popen(["bash", "-c", f"set -m; sleep {b} & wait"])]
    with open("pids.json.tmp", "w") as f:
        json.dump([p.pid for p in procs], f)
    os.replace("pids.json.tmp", "pids.json")
    time.sleep(3600)


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("this exception cannot be said")


def raises_unprintable(ctx):
    raise Unprintable()
