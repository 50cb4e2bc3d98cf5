"""Fleet's own CPU a step on a small fleet, by thread, against its wake-ups a step
(issue 12, benchmark b: what the 1.5 ms target is made of).

    python benchmarks/wakeups.py                        # 2,000 steps of each kind, writes results/wakeups.json
    python benchmarks/wakeups.py --steps 300 --no-write # a smoke run

`fleet up --nodes 2` with peer_compare.py's preloads, `fleet run` of N steps of one kind,
`fleet down`, for each kind in turn:

- noop: nothing (fleet_bench_steps.noop);
- numpy: ~5 ms of single-threaded numpy (peer_compare.py's calibrated matmul);
- nap: 20 ms asleep (fleet_bench_steps.nap): the machine is idle between the fleet's
  wake-ups, as on a node whose steps wait on I/O or on other nodes.

Read from /proc before and after the run, for every thread of the fleet's long-lived
processes (coordinator, agents, zygotes and the zygotes' forking helpers): CPU time
(schedstat: ns on a CPU, user and system) and voluntary context switches (each one a sleep and a wake-up). A
zygote's spares and steps are not in it (their CPU is the step's). Per thread: CPU ms a
step, wake-ups a step, and CPU us a wake-up (what waking costs, with the work done each
time). Threads are named by what they are: each process's main thread ("loop"),
ZeroMQ's I/O thread ("ZMQbg/IO/0"), and the rest ("other threads": the coordinator's
worker and CURVE authenticator, an agent's marker writer).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _nodebench as nb  # noqa: E402
import peer_compare as pc  # noqa: E402
from where_cpu_goes import fleet_roles  # noqa: E402

KINDS = ("noop", "numpy", "nap")


def write_suite(kind: str, work: dict):
    def write(path: Path, steps: int) -> None:
        if kind != "nap":
            pc.fleet_suite(kind, work)(path, steps)
            return
        path.write_text(f'[suite]\nname = "nap"\n\n[[steps]]\nid = "nap/{{i}}"\narray = "0-{steps - 1}"\n'
                        f'call = "{nb.STEPS_MODULE}:nap"\n')
    return write


def threads(roles: dict[int, str]) -> dict[tuple[str, int, int], tuple[str, int, int]]:
    """(role, pid, tid) -> (thread kind, CPU ns (schedstat), voluntary context switches)."""
    out = {}
    for pid, role in roles.items():
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    head = f.read().rsplit(")", 1)[0]
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    ran_ns = int(f.read().split()[0])
                with open(f"/proc/{pid}/task/{tid}/status") as f:
                    status = f.read()
            except OSError:
                continue
            comm = head.split("(", 1)[1]
            kind = "loop" if tid == pid else comm if comm.startswith("ZMQbg/IO") else "other threads"
            switches = int(status.split("voluntary_ctxt_switches:", 1)[1].split()[0])
            out[(role, pid, tid)] = (kind, ran_ns, switches)
    return out


def run(kind: str, steps: int, work: dict, tmp: Path) -> dict:
    w = tmp / f"fleet-{kind}"
    w.mkdir()
    suite = w / "suite.toml"
    write_suite(kind, work)(suite, steps)
    fleet = nb.Fleet(w / "run", nodes=2, preload=nb.PRELOAD + pc.STEP_MODULES)
    fleet.env.update({v: "1" for v in pc.THREAD_VARS})
    fleet.up()
    try:
        time.sleep(1.0)  # the spares forked, the helpers up
        roles = fleet_roles(fleet)
        before = threads(roles)
        r = nb.run(nb.fleet_cli("run", str(suite), "--run-dir", str(w / "run")), timeout=900, env=fleet.env,
                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        after = threads(roles)
        if r.returncode != 0:
            raise RuntimeError(f"fleet run exited {r.returncode}:\n{r.stdout.decode(errors='replace')[-3000:]}")
    finally:
        fleet.down()
    exits = [json.loads(line) for line in (w / "run" / "events.jsonl").read_text().splitlines() if '"exit"' in line]
    exits = [e for e in exits if e.get("kind") == "exit"]
    span = max(e["t"] for e in exits) - min(e["decided_at"] for e in exits)
    rows: dict[str, list[float]] = {}
    for key, (tkind, ran_ns, switches) in after.items():
        if key not in before:
            continue
        row = rows.setdefault(f"{key[0]}: {tkind}", [0.0, 0])
        row[0] += (ran_ns - before[key][1]) / 1e9
        row[1] += switches - before[key][2]
    by_thread = {name: {"cpu_ms_per_step": round(cpu / steps * 1e3, 3), "wakeups_per_step": round(n / steps, 2),
                        "cpu_us_per_wakeup": round(cpu / n * 1e6, 1) if n else None}
                 for name, (cpu, n) in sorted(rows.items())}
    cpu = sum(cpu for cpu, _ in rows.values())
    wakes = sum(n for _, n in rows.values())
    return {"steps": steps, "succeeded": sum(e.get("outcome") == "succeeded" for e in exits),
            "steps_per_s": round(len(exits) / span, 1), "threads": by_thread,
            "all": {"cpu_ms_per_step": round(cpu / steps * 1e3, 3), "wakeups_per_step": round(wakes / steps, 2),
                    "cpu_us_per_wakeup": round(cpu / wakes * 1e6, 1) if wakes else None}}


def table(res: dict) -> str:
    out = ["| workload | steps/s | thread | CPU ms a step | wake-ups a step | CPU us a wake-up |",
           "|---|---:|---|---:|---:|---:|"]
    for kind, m in res["runs"].items():
        for name, t in list(m["threads"].items()) + [("all of fleet's own", m["all"])]:
            per = "" if t["cpu_us_per_wakeup"] is None else f"{t['cpu_us_per_wakeup']:.0f}"
            out.append(f"| {kind} | {m['steps_per_s']:g} | {name} | {t['cpu_ms_per_step']:.3f} | "
                       f"{t['wakeups_per_step']:.2f} | {per} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--work-ms", type=float, default=5.0)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    res = {"benchmark": "wakeups", "command": "python benchmarks/wakeups.py"
           + (f" --steps {args.steps}" if args.steps != 2000 else ""), "date": nb.today(), "machine": nb.machine(),
           "runs": {}}
    with tempfile.TemporaryDirectory(prefix="fleet-wake-") as tmp:
        work = pc.calibrate(args.work_ms / 1e3)
        res["work"] = work
        for kind in [k for k in args.kinds.split(",") if k]:
            res["runs"][kind] = run(kind, args.steps, work, Path(tmp))
            print(table({"runs": {kind: res["runs"][kind]}}), flush=True)
    res["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    if not args.no_write:
        print(f"wrote {nb.write_result('wakeups', res).relative_to(nb.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
