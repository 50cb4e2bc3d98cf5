"""System calls and loop turns of the coordinator and the agents, per step, on a real
2-node fleet (issue 12, benchmark b: the loop's per-turn fixed costs).

    cd /tmp && PYTHONPATH=<tree> python <tree>/benchmarks/turn_syscalls.py --steps 2000
    ... --trees /tmp/base,<tree> --rounds 2     # trees alternated in one run

`fleet up --nodes 2 --preload numpy,scipy.linalg,fleet_bench_steps`, then `strace -f`
attached to every thread of the coordinator and of each agent for the whole of a
`fleet run` of N no-op steps, then `fleet down`. Counted from strace's own lines, by
process, thread (the loop's thread is the process's first; the others are ZeroMQ's
I/O and authentication threads, the intake's worker) and system call. A loop turn of
the coordinator is one `poll` of its main thread with a non-zero timeout or one that
returned ready descriptors (libzmq's own zero-timeout polls of a socket's mailbox are
counted apart). Wake-ups: calls that waited (poll, epoll_wait, futex wait) and came back.
strace slows every call: read the counts, not the times.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _nodebench as nb  # noqa: E402
import startup_throughput as st  # noqa: E402

LINE = re.compile(r"^(\d+)\s+(?:\d+\.\d+\s+)?(?:<\.\.\. (\w+) resumed>|(\w+)\()(.*)$")


def threads(pids: dict[int, str]) -> dict[int, str]:
    """Every thread of pids -> its process's role (the main thread is the pid itself)."""
    return {int(tid): role for pid, role in pids.items() for tid in os.listdir(f"/proc/{pid}/task")}


def trace(tids: dict[int, str], out: Path) -> subprocess.Popen:
    """strace -f on every thread in tids, lines to out."""
    args = ["strace", "-f", "-qq", "-o", str(out)]
    for tid in tids:
        args += ["-p", str(tid)]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(1.0)  # attached (strace prints nothing to say so)
    return p


def count(path: Path, main_tids: dict[int, str], tids: dict[int, str]) -> dict:
    """Per role: system calls by name (all threads), by thread kind, the loop's turns."""
    calls: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    main: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    role_of: dict[int, str] = dict(tids)
    for line in path.read_text(errors="replace").splitlines():
        m = LINE.match(line)
        if not m:
            continue
        tid, name, rest = int(m.group(1)), m.group(2) or m.group(3), m.group(4)
        if "unfinished" in rest:
            continue  # counted when it resumes
        role = role_of.get(tid, "?")  # (a thread started meanwhile: none is, on this path)
        calls[role][name] += 1
        if tid in main_tids:
            main[role][name] += 1
            if name == "poll":
                waited = not re.search(r",\s*0\)\s*=", rest)
                ready = not rest.rstrip().endswith("= 0 (Timeout)")
                main[role]["(turn)" if (waited or ready) and "poll([{fd=" in line and _many_fds(line) else
                           "(mailbox poll)"] += 1
    return {"all": {r: dict(c) for r, c in calls.items()}, "main": {r: dict(c) for r, c in main.items()}}


def _many_fds(line: str) -> bool:
    return line.count("{fd=") >= 2  # the loop's poller watches several descriptors; a mailbox poll one


def one(tree: str, steps: int, tmp: Path) -> dict:
    env_path = os.pathsep.join([tree, os.environ.get("PYTHONPATH", "")])
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = env_path
    try:
        work = tmp / f"w-{time.monotonic_ns()}"
        work.mkdir()
        suite = work / "suite.toml"
        st.write_suite(suite, steps)
        run_dir = work / "run"
        fleet = nb.Fleet(run_dir, nodes=2, preload=nb.PRELOAD + ("fleet_bench_steps",))
        fleet.up()
        try:
            roles = fleet.roles()
            mains = {pid: r.split()[0] for pid, r in roles.items() if r.split()[0] in ("coordinator", "agent")}
            before = nb.cpu_snapshot(roles)
            out = work / "strace.txt"
            tids = threads(mains)
            tracer = trace(tids, out)
            t = time.perf_counter()
            r = nb.run(nb.fleet_cli("run", str(suite), "--run-dir", str(run_dir)), timeout=900, env=fleet.env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            wall = time.perf_counter() - t
            os.kill(tracer.pid, signal.SIGINT)
            tracer.wait(timeout=60)
            after = nb.cpu_snapshot(roles)
            if r.returncode != 0:
                raise RuntimeError(r.stdout.decode(errors="replace")[-2000:])
        finally:
            fleet.down()
        c = count(out, mains, tids)
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old
    per = {}
    for role in ("coordinator", "agent"):
        allc, mainc = c["all"].get(role, {}), c["main"].get(role, {})
        turns = mainc.get("(turn)", 0)
        per[role] = {"syscalls_per_step": round(sum(allc.values()) / steps, 2),
                     "main_thread_syscalls_per_step": round(sum(v for k, v in mainc.items() if k[0] != "(") / steps, 2),
                     "turns_per_step": round(turns / steps, 3),
                     "by_call_per_step": {k: round(v / steps, 2) for k, v in sorted(allc.items(), key=lambda kv: -kv[1])
                                          if v / steps >= 0.05},
                     "main_by_call_per_step": {k: round(v / steps, 2)
                                               for k, v in sorted(mainc.items(), key=lambda kv: -kv[1])
                                               if v / steps >= 0.05}}
    cpu = nb.cpu_delta(before, after)
    own = collections.Counter()
    for name, v in cpu.items():
        own[name.split()[0]] += v["own_s"]
    return {"tree": tree, "steps": steps, "wall_s_under_strace": round(wall, 2),
            "cpu_ms_per_step_under_strace": {k: round(v / steps * 1e3, 3) for k, v in own.items()}, **per}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--trees", default=str(nb.REPO), help="comma-separated checkouts, alternated")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--result", default="", help="results/NAME.json")
    ap.add_argument("--keep", default="", help="work here (traces kept) instead of a temporary directory")
    args = ap.parse_args(argv)
    trees = [str(Path(t).resolve()) for t in args.trees.split(",") if t]
    res = {"benchmark": "turn_syscalls", "command": "python benchmarks/turn_syscalls.py " + " ".join(argv or sys.argv[1:]),
           "date": nb.today(), "machine": nb.machine(), "runs": []}
    with (contextlib.nullcontext(args.keep) if args.keep else
          tempfile.TemporaryDirectory(prefix="turn-syscalls-", dir="/dev/shm")) as tmp:
        for k in range(args.rounds):
            for tree in trees:
                m = one(tree, args.steps, Path(tmp))
                m["round"] = k + 1
                print(json.dumps(m), flush=True)
                res["runs"].append(m)
    res["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.result:
        print(f"wrote {nb.write_result(args.result, res).relative_to(nb.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
