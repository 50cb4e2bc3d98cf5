"""Call targets for the fleet integration tests (module `fleet_steps`, with tests/ on
PYTHONPATH). Each leaves evidence in files so tests check what really happened."""

import json
import os
import signal
import time
from pathlib import Path


def _gate(ctx) -> None:
    """Wait for the file args.gate, if named: the test makes it when the step may go on
    (at most 120 s, then the step goes on anyway)."""
    gate = ctx.args.get("gate")
    deadline = time.monotonic() + 120
    while gate and not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.02)


def nap(ctx):
    """Wait for the file args.gate, if named; sleep for args.seconds (default 0.5),
    recording pid, cores and times (of the sleep)."""
    _gate(ctx)
    t0 = time.time()
    time.sleep(float(ctx.args.get("seconds", 0.5)))
    Path(ctx.workdir, "nap.json").write_text(json.dumps(
        {"pid": os.getpid(), "cores": sorted(os.sched_getaffinity(0)), "start": t0, "end": time.time()}))


def produce(ctx):
    """Write a deterministic output from args (same input, same bytes), after `seconds`."""
    time.sleep(float(ctx.args.get("seconds", 0)))
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


def whereami(ctx):
    """Sleep for args.seconds (default 0.3) and record where the step really ran: the
    node as the batch system names it (SLURMD_NODENAME, inherited from the agent's
    srun task), the CPU affinity the kernel gave it, and the cores it was given."""
    t0 = time.time()
    time.sleep(float(ctx.args.get("seconds", 0.3)))
    Path(ctx.workdir, "where.json").write_text(json.dumps(
        {"slurmd_nodename": os.environ.get("SLURMD_NODENAME"), "affinity": sorted(os.sched_getaffinity(0)),
         "cores": list(ctx.cores), "pid": os.getpid(), "start": t0, "end": time.time()}))


# --- fault-injection evidence (tests/control/test_faults.py) --------------------------

def _note(ctx, what: str) -> None:
    """One line to <run dir>/evidence.txt in one O_APPEND write: what, $FLEET_STEP, pid,
    attempt, time, and $FLEET_TEST_SHARD (set for a whole `fleet run`; steps inherit it)."""
    line = (f"{what} {os.environ.get('FLEET_STEP', '?')} {os.getpid()} {ctx.attempt} {time.time():.6f} "
            f"{os.environ.get('FLEET_TEST_SHARD', '-')}\n")
    fd = os.open(Path(ctx.run_dir, "evidence.txt"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def once(ctx):
    """Note "start"; note "overlap" if an earlier attempt of this step is still alive;
    wait for the file args.gate, if named; sleep args.seconds; publish out/<step> by an exclusive link of a finished file (an
    attempt killed on the way leaves no output, a second success cannot overwrite the
    first: it fails); note "end"."""
    _note(ctx, "start")
    me = os.environ["FLEET_STEP"]
    for line in Path(ctx.run_dir, "evidence.txt").read_text().splitlines():
        f = line.split()
        if len(f) >= 3 and f[0] == "start" and f[1] == me and int(f[2]) != os.getpid() and _running(int(f[2])):
            _note(ctx, f"overlap:{f[2]}")
    _gate(ctx)
    time.sleep(float(ctx.args.get("seconds", 1.0)))
    out = Path(ctx.run_dir, "out", me.replace("/", "_"))
    out.parent.mkdir(exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{me} {os.getpid()}\n")
    try:
        os.link(tmp, out)
    finally:
        os.unlink(tmp)
    _note(ctx, "end")


def always_fails(ctx):
    _note(ctx, "start")
    raise RuntimeError("this step always fails")


# --- the everyday path (tests/control/test_calls.py) ------------------------------------

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def thread_report(ctx):
    """Record the thread variables this step sees and the size of every thread pool
    loaded in it (numpy's BLAS, imported here unless preloaded), as threads.json."""
    import sys
    preloaded = "numpy" in sys.modules  # inherited from the zygote, or not
    import numpy  # noqa: F401  (loads its BLAS, if the zygote did not)
    from threadpoolctl import threadpool_info
    pools = {p["internal_api"]: p["num_threads"] for p in threadpool_info()}
    Path(ctx.workdir, "threads.json").write_text(json.dumps(
        {"env": {v: os.environ.get(v) for v in THREAD_VARS}, "pools": pools,
         "ctx_threads": ctx.threads, "numpy_was_preloaded": preloaded}))


def scaled(n, label="plain"):
    """A function that knows nothing of fleet: its args by name, its step from
    fleet.context() (through a helper, as a library deep in a call would)."""
    Path("scaled.json").write_text(json.dumps({"n": n, "twice": 2 * n, "label": label, **_where()}))


def _where():
    import fleet
    ctx = fleet.context()
    return {"step": ctx.id, "attempt": ctx.attempt, "workdir": ctx.workdir}


def scaled_with_ctx(ctx, n, label="with ctx"):
    """The new form with a context: ctx and the args by name, side by side."""
    import fleet
    Path(ctx.workdir, "scaled.json").write_text(json.dumps(
        {"n": n, "label": label, "same_ctx": fleet.context() is ctx, "args": ctx.args}))


def says_attempt(ctx):
    """Print which attempt this is; fail the first one."""
    print(f"output of attempt {ctx.attempt}")
    if ctx.attempt == 1:
        raise RuntimeError("the first attempt fails")


def writes_nothing(ctx):
    print("succeeded without writing its outputs")


def oom_chain(ctx):
    """Record the oom_score_adj of this step and of its ancestors (zygote, agent,
    coordinator...), with each one's command line, to oom.json in the workdir."""
    chain, pid = [], os.getpid()
    while pid > 1 and len(chain) < 6:
        proc = Path(f"/proc/{pid}")
        cmd = (proc / "cmdline").read_bytes().split(b"\0")
        chain.append({"pid": pid, "cmd": [c.decode(errors="replace") for c in cmd[:4]],
                      "adj": int((proc / "oom_score_adj").read_text())})
        pid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    Path(ctx.workdir, "oom.json").write_text(json.dumps(chain))


def wait_for_file(ctx):
    """Wait (polling) until args.path exists, at most args.timeout s (then fail)."""
    deadline = time.monotonic() + float(ctx.args.get("timeout", 60))
    while not os.path.exists(ctx.args["path"]):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{ctx.args['path']} did not appear")
        time.sleep(0.05)


def env_report(ctx, names):
    """Record the values of the environment variables `names` this step sees, as env.json."""
    Path(ctx.workdir, "env.json").write_text(json.dumps({n: os.environ.get(n) for n in names}))


def clock_zone(ctx):
    """Record the time zone this step's time functions use (name and offset), as zone.txt."""
    Path(ctx.workdir, "zone.txt").write_text(time.strftime("%Z %z", time.localtime(0)))


def raises_lines(ctx):
    """Fails with a message of several lines, a colour, a bell and a carriage return."""
    raise ValueError("shapes do not match:\n a: (3, 4)\n b: (4, 5)\x1b[31m red\x07\r")
