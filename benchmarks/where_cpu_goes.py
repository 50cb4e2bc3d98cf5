"""Where a step's CPU goes, fleet beside the raw fork floor, by process and by kind of work
(issue 12, benchmark b: why fleet stays under 0.9 x the floor on this machine).

    python benchmarks/where_cpu_goes.py                 # 4,000 no-op steps and 2,000 numpy ones
    python benchmarks/where_cpu_goes.py --steps 1000 --kinds noop --no-write   # a smoke run

Needs `perf` (linux-perf) and the right to sample every CPU (perf_event_paranoid <= 1, or
root). For each workload of peer_compare.py (no-op; ~5 ms of numpy), one after the other:
the raw fork floor (peer_compare's two fork loops, one per core) and fleet
(`fleet up --nodes 2` with the same preloads, `fleet run`, `fleet down`), each under
`perf record -e cpu-clock -a -g` (every CPU, kernel and user stacks). Each sample is
put to the process it hit, by role (fleet: coordinator, agent, zygote, the zygote's
forking helper, and everything else: the step processes and the spares, with the
`fleet run` client; floor: the loop processes and their children), and to a kind of
work by its stack: the kernel forking (copy_process), page faults (copy-on-write and
first touches), a process's exit (its address space unmapped), other system calls,
other kernel work, the Python interpreter (libpython), other user code (libzmq,
libsodium, msgpack, libc...). Figures: CPU ms per step (samples / rate / steps).
Sampling is statistical: a few % either way.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _nodebench as nb  # noqa: E402
import peer_compare as pc  # noqa: E402

RATE = 999  # samples a second on each CPU (at 1,999, a 10-s run now and then lost most of its samples)
KINDS_OF_WORK = ("kernel: fork", "kernel: page faults", "kernel: exit (unmap)", "kernel: other system calls",
                 "kernel: other", "python interpreter", "other user code")


def kind_of(stack: list[str]) -> str:
    """The kind of work a sample's stack (leaf first) shows."""
    joined = " ".join(stack)
    if "exit_mmap" in joined:
        return "kernel: exit (unmap)"
    if "copy_process" in joined or "dup_mmap" in joined:
        return "kernel: fork"
    if "exc_page_fault" in joined or "handle_mm_fault" in joined:
        return "kernel: page faults"
    if "entry_SYSCALL" in joined:
        return "kernel: other system calls"
    leaf = stack[0] if stack else ""
    if "[kernel" in leaf:
        return "kernel: other"
    if "libpython" in leaf:
        return "python interpreter"
    return "other user code"


def record(out: Path):
    """perf record on every CPU until stopped (SIGINT)."""
    return subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", str(RATE), "-a", "-g", "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


def stop(perf: subprocess.Popen) -> str:
    """Stop perf record; what it said (how many samples it wrote, any it lost)."""
    perf.send_signal(signal.SIGINT)
    try:
        return perf.communicate(timeout=120)[1].decode(errors="replace").strip()
    finally:
        nb.kill_group(perf.pid)


def samples(data: Path):
    """(pid, stack leaf first) of every sample in `data`."""
    text = subprocess.run(["perf", "script", "-i", str(data), "-F", "pid,ip,sym,dso"], capture_output=True,
                          text=True, timeout=600).stdout
    pid, stack = None, []
    for line in text.splitlines() + [""]:
        if not line.strip():
            if pid is not None:
                yield pid, stack
            pid, stack = None, []
        elif line[0] not in " \t":
            head = line.split()
            pid = int(head[-1]) if head and head[-1].isdigit() else int(head[0]) if head[0].isdigit() else -1
        else:
            parts = line.strip().split(None, 1)
            if len(parts) == 2:
                stack.append(parts[1])


def tally(data: Path, roles: dict[int, str], other: str, steps: int) -> dict:
    """{role: {"ms_per_step": x, "kinds": {kind: ms per step}}}; pids not in roles are `other`."""
    n: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for pid, stack in samples(data):
        if pid == 0:  # the idle task
            continue
        n[roles.get(pid, other)][kind_of(stack)] += 1
    per = 1e3 / RATE / steps
    return {role: {"ms_per_step": round(sum(c.values()) * per, 3),
                   "kinds": {k: round(c[k] * per, 3) for k in KINDS_OF_WORK if c[k]}}
            for role, c in sorted(n.items())}


def floor_run(kind: str, steps: int, work: dict, tmp: Path) -> dict:
    """peer_compare's two fork loops under perf; their pids are the loops."""
    cores = sorted(os.sched_getaffinity(0))[:2]
    start_at = time.time() + 3.0  # the loops' imports done, perf recording
    argvs = [[sys.executable, "-c", pc.FLOOR_CODE, json.dumps(
        {"n": steps // len(cores), "core": c, "logdir": str(tmp / f"floor-{kind}-{c}"), "kind": kind,
         "size": work["n"], "reps": work["reps"], "start_at": start_at})] for c in cores]
    data = tmp / f"floor-{kind}.perf"
    procs = [subprocess.Popen(a, env=pc.bench_env(), stdout=subprocess.PIPE, start_new_session=True) for a in argvs]
    time.sleep(max(0.0, start_at - 0.5 - time.time()))
    perf = record(data)
    try:
        outs = [json.loads(p.communicate(timeout=600)[0]) for p in procs]
    finally:
        for p in procs:
            nb.kill_group(p.pid)
        said = stop(perf)
    span = max(o["t1"] for o in outs) - min(o["t0"] for o in outs)
    done = steps // len(cores) * len(cores)
    roles = {p.pid: "loop processes (fork, waitpid)" for p in procs}
    return {"steps": done, "steps_per_s": round(done / span, 1), "perf": said,
            "roles": tally(data, roles, "step processes", done)}


def fleet_roles(fleet: nb.Fleet) -> dict[int, str]:
    """The fleet's long-lived processes by role. A zygote's children that run the zygote's
    code are its forking helper (forked at its start) and its spare (forked by the helper
    with CLONE_PARENT, so the zygote's too, and soon a step): the oldest is the helper."""
    out, kids = {}, collections.defaultdict(list)
    for pid, role in fleet.roles().items():
        role = role.split()[0]
        try:
            proc = psutil.Process(pid)
            parent = proc.parent()
            if role == "zygote" and parent is not None and "fleet.node.zygote" in " ".join(parent.cmdline()):
                kids[parent.pid].append((proc.create_time(), pid))
                continue
        except psutil.Error:
            continue
        if role in ("coordinator", "agent", "zygote"):
            out[pid] = role
    for children in kids.values():
        out[min(children)[1]] = "helper"
    return out


def fleet_run(kind: str, steps: int, work: dict, tmp: Path) -> dict:
    w = tmp / f"fleet-{kind}"
    w.mkdir()
    suite = w / "suite.toml"
    pc.fleet_suite(kind, work)(suite, steps)
    fleet = nb.Fleet(w / "run", nodes=2, preload=nb.PRELOAD + pc.STEP_MODULES)
    fleet.env.update({v: "1" for v in pc.THREAD_VARS})
    fleet.up()
    data = w / "fleet.perf"
    try:
        time.sleep(1.0)  # the spares forked, the helpers up
        roles = fleet_roles(fleet)
        perf = record(data)
        client = subprocess.Popen(nb.fleet_cli("run", str(suite), "--run-dir", str(w / "run")), env=fleet.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        roles[client.pid] = "fleet run (the client)"
        try:
            out = client.communicate(timeout=900)[0]
        finally:
            said = stop(perf)
            nb.kill_group(client.pid)
        if client.returncode != 0:
            raise RuntimeError(f"fleet run exited {client.returncode}:\n{out.decode(errors='replace')[-3000:]}")
    finally:
        fleet.down()
    exits = [json.loads(line) for line in (w / "run" / "events.jsonl").read_text().splitlines() if '"exit"' in line]
    exits = [e for e in exits if e.get("kind") == "exit"]
    span = max(e["t"] for e in exits) - min(e["decided_at"] for e in exits)
    return {"steps": steps, "steps_per_s": round(len(exits) / span, 1), "perf": said,
            "roles": tally(data, roles, "step processes (and the spares)", steps)}


def table(res: dict) -> str:
    out = []
    for kind, systems in res["runs"].items():
        out += [f"\n{pc.WORKLOADS[kind]}:", "", "| system | process | CPU ms per step | "
                + " | ".join(KINDS_OF_WORK) + " |", "|---|---|---:|" + "---:|" * len(KINDS_OF_WORK)]
        for system, m in systems.items():
            for role, r in m["roles"].items():
                out.append(f"| {system} ({m['steps_per_s']:g} steps/s) | {role} | {r['ms_per_step']:.3f} | "
                           + " | ".join(f"{r['kinds'].get(k, 0):.3f}" for k in KINDS_OF_WORK) + " |")
            total = sum(r["ms_per_step"] for r in m["roles"].values())
            out.append(f"| {system} | all | {total:.3f} |" + " |" * len(KINDS_OF_WORK))
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4000, help="no-op steps (numpy: half as many)")
    ap.add_argument("--kinds", default="noop,numpy")
    ap.add_argument("--work-ms", type=float, default=5.0)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    if subprocess.run(["perf", "--version"], capture_output=True).returncode != 0:
        print("where_cpu_goes needs perf (Debian: linux-perf)", file=sys.stderr)
        return 2
    res = {"benchmark": "where_cpu_goes", "command": "python benchmarks/where_cpu_goes.py"
           + (f" --steps {args.steps}" if args.steps != 4000 else ""), "date": nb.today(), "machine": nb.machine(),
           "rate_hz_per_cpu": RATE, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="fleet-cpu-") as tmp:
        work = pc.calibrate(args.work_ms / 1e3)
        res["work"] = work
        for kind in [k for k in args.kinds.split(",") if k]:
            steps = args.steps if kind == "noop" else args.steps // 2
            res["runs"][kind] = {"floor": floor_run(kind, steps, work, Path(tmp)),
                                 "fleet": fleet_run(kind, steps, work, Path(tmp))}
            print(table({"runs": {kind: res["runs"][kind]}}), flush=True)
    res["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    if not args.no_write:
        print(f"wrote {nb.write_result('where_cpu_goes', res).relative_to(nb.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
