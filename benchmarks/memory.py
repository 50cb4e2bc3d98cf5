"""Node agents (c): what 24 forked steps really cost in memory.

    python benchmarks/memory.py            # writes benchmarks/results/memory.json
    python benchmarks/memory.py --steps 8  # smaller

This machine has 2 cores, so the zygote is driven directly, as its agent would drive
it: `python -m fleet.node.zygote --fd-in R --fd-out W --preload numpy,scipy.linalg`
started by fleet.node.agent.start_zygote, then 24 Launch messages (fleet.wire.messages)
for a `call` step (fleet_bench_steps:sleep) that writes a "ready" file and sleeps.
All 24 are forked at once, each pinned to every core (no core is reserved: this is
about memory, not placement). Once all 24 are ready (and after a short settle), each
process's USS, PSS and RSS are read with psutil (memory_full_info, from
/proc/PID/smaps_rollup), then the zygote is told to shut down (it SIGTERMs the
steps' process groups and reaps them).

USS (unique set size): pages only that process maps, what it would free by exiting.
PSS: each page divided by the number of processes mapping it, so the PSS of the
zygote plus its children adds up to what the node really spends. RSS counts every
shared page again in every process: summed over forked children it is wrong by
about the parent's size per child. Target (issue 3): summed USS of the 24 steps <
the zygote's own RSS.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _nodebench as nb  # noqa: E402

MIB = 2**20


def measure(pid: int) -> dict:
    m = psutil.Process(pid).memory_full_info()
    return {"rss": m.rss, "pss": m.pss, "uss": m.uss, "shared": m.shared}


def run(steps: int, settle: float, work: Path, preload: tuple[str, ...]) -> dict:
    os.environ["PYTHONPATH"] = nb.bench_env()["PYTHONPATH"]  # inherited by the zygote
    from fleet.wire import framing, messages
    from fleet.node.agent import start_zygote

    proc, req_w, rep_r = start_zygote(",".join(preload))
    reader = framing.FrameReader()
    started: dict[str, int] = {}
    exited: list = []
    try:
        hello = framing.read_message(rep_r)
        if not isinstance(hello, messages.Hello):
            raise RuntimeError(f"zygote refused: {hello}")
        zygote_before = measure(proc.pid)
        cores = tuple(sorted(os.sched_getaffinity(0)))
        t0 = time.time()
        for i in range(steps):
            wd = str(work / "steps" / f"sleep{i}")
            framing.write_message(req_w, messages.Launch(
                step=f"sleep/{i}", attempt=1, kind="call", call=f"{nb.STEPS_MODULE}:sleep",
                args={"seconds": 120}, command=None, cores=cores, gpus=(), memory=0, workdir=wd,
                log=wd + "/log", run_dir=str(work), decided_at=time.time(),
                env={"FLEET_STEP": f"sleep/{i}", "FLEET_ATTEMPT": "1", "FLEET_RUN_DIR": str(work)}))
        deadline = time.monotonic() + 60
        os.set_blocking(rep_r, False)
        while time.monotonic() < deadline:
            try:
                data = os.read(rep_r, 65536)
            except BlockingIOError:
                data = None
            for m in reader.feed(data or b""):
                if isinstance(m, messages.Started):
                    started[m.step] = m.pid
                elif isinstance(m, messages.Exited):
                    exited.append(m)
            if exited:
                raise RuntimeError(f"a step exited early: {exited[0]}")
            ready = sum((work / "steps" / f"sleep{i}" / "ready").exists() for i in range(steps))
            if len(started) == steps and ready == steps:
                break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"only {len(started)} started / not all ready within 60 s")
        all_ready_s = time.time() - t0
        time.sleep(settle)
        zygote = measure(proc.pid)
        children = {step: measure(pid) for step, pid in started.items()}
    finally:
        try:
            os.set_blocking(rep_r, True)
            framing.write_message(req_w, messages.Shutdown(1.0))
            proc.wait(timeout=20)
        except Exception:
            nb.kill_group(proc.pid)  # not its own group: kill it and its steps by pid
            for pid in [proc.pid, *started.values()]:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            proc.wait(timeout=10)
    leftovers = nb.reap_or_kill(started.values(), wait=5)
    s = {k: sum(c[k] for c in children.values()) for k in ("uss", "pss", "rss")}
    per_uss = [c["uss"] for c in children.values()]
    return {
        "preload": list(preload), "steps": steps, "all_ready_s": round(all_ready_s, 2), "settle_s": settle,
        "zygote_hello_import_s": round(hello.import_s, 3),
        "zygote_alone_mib": {k: round(v / MIB, 1) for k, v in zygote_before.items()},
        "zygote_mib": {k: round(v / MIB, 1) for k, v in zygote.items()},
        "children_sum_mib": {k: round(v / MIB, 1) for k, v in s.items()},
        "child_uss_mib": {"median": round(nb.median(per_uss) / MIB, 2), "max": round(max(per_uss) / MIB, 2),
                          "min": round(min(per_uss) / MIB, 2)},
        "node_total_pss_mib": round((zygote["pss"] + s["pss"]) / MIB, 1),
        "ratios": {
            "children_uss_over_zygote_rss": round(s["uss"] / zygote["rss"], 3),
            "children_pss_over_zygote_rss": round(s["pss"] / zygote["rss"], 3),
            "children_rss_over_zygote_rss": round(s["rss"] / zygote["rss"], 2),
            "node_total_pss_over_zygote_rss": round((zygote["pss"] + s["pss"]) / zygote["rss"], 3),
        },
        "target_met": s["uss"] < zygote["rss"],
        "leftover_pids_killed": leftovers,
    }


def report(res: dict, title: str) -> None:
    z, c, r = res["zygote_mib"], res["children_sum_mib"], res["ratios"]
    n = res["steps"]
    print(f"\n{title}")
    print(f"{'':44s} {'RSS MiB':>9s} {'PSS MiB':>9s} {'USS MiB':>9s}")
    print(f"{'zygote, before any step':44s} {res['zygote_alone_mib']['rss']:9.1f} "
          f"{res['zygote_alone_mib']['pss']:9.1f} {res['zygote_alone_mib']['uss']:9.1f}")
    print(f"{f'zygote, with {n} steps forked':44s} {z['rss']:9.1f} {z['pss']:9.1f} {z['uss']:9.1f}")
    print(f"{f'{n} sleeping steps, summed':44s} {c['rss']:9.1f} {c['pss']:9.1f} {c['uss']:9.1f}")
    print(f"{'one step, median':44s} {'':9s} {'':9s} {res['child_uss_mib']['median']:9.2f}")
    print(f"{'node total (zygote PSS + steps PSS)':44s} {'':9s} {res['node_total_pss_mib']:9.1f}")
    print(f"summed USS / zygote RSS = {r['children_uss_over_zygote_rss']:.3f} "
          f"(target < 1: {'met' if res['target_met'] else 'MISSED'}); summed PSS / zygote RSS = "
          f"{r['children_pss_over_zygote_rss']:.3f}")
    print(f"naive summed RSS = {c['rss']:.0f} MiB = {r['children_rss_over_zygote_rss']:.1f} x the zygote's RSS: "
          f"every shared page counted {n} times; the node really holds {res['node_total_pss_mib']:.0f} MiB "
          f"for the zygote and all {n} steps together")
    if res["leftover_pids_killed"]:
        print(f"WARNING: had to kill {res['leftover_pids_killed']}")


def main(argv=None) -> int:
    import tempfile
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--settle", type=float, default=1.0, help="seconds to wait after all are ready")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    res = {"benchmark": "memory", "command": "python benchmarks/memory.py"
           + (f" --steps {args.steps}" if args.steps != 24 else ""),
           "date": nb.today(), "machine": nb.machine(),
           "measure": "psutil memory_full_info(): uss, pss from /proc/PID/smaps_rollup; rss"}
    with tempfile.TemporaryDirectory(prefix="fleet-bench-mem-") as tmp:
        res.update(run(args.steps, args.settle, Path(tmp) / "a", nb.PRELOAD))
        # For comparison: the same with the steps' own module preloaded too, so that a
        # step does not import it (and fault in the import machinery) after the fork.
        res["with_step_module_preloaded"] = run(args.steps, args.settle, Path(tmp) / "b",
                                                (*nb.PRELOAD, nb.STEPS_MODULE))
    report(res, f"preload {','.join(nb.PRELOAD)} (the benchmark)")
    report(res["with_step_module_preloaded"],
           f"preload {','.join(nb.PRELOAD)},{nb.STEPS_MODULE} (for comparison: the step's module preloaded)")
    print(f"\ntarget (summed USS of the steps < the zygote's RSS): "
          f"{'met' if res['target_met'] else 'MISSED'} ({res['ratios']['children_uss_over_zygote_rss']:.3f})")
    if not args.no_write:
        print(f"wrote {nb.write_result('memory', res).relative_to(nb.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
