"""Node agents (e), stretch: would a child forked ahead of demand cut start latency?

    python benchmarks/prefork.py            # writes benchmarks/results/prefork.json

fleet's zygote forks when a Launch arrives. The alternative: keep one child forked
ahead, blocked on a pipe; a Launch is handed to it, and the fork of the next spare
happens off the start path. This measures both with fleet's own step code
(fleet.node.child.run_call: signals, process group, death signal, affinity,
environment, directories, log, then the step) in a server process that imports numpy
and scipy.linalg with the zygote's thread settings, driven over a pipe with the
zygote's Launch frames (fleet.wire.framing), one step at a time, with a pause (--gap,
20 ms) between a step's end and the next Launch so that the spare is ready, as it is
whenever demand is below the fork rate (the same pause in both modes):

- fork on demand: read the Launch, fork, the child runs run_call (as the zygote does);
- pre-forked: read the Launch, write it to the waiting spare, which decodes it and runs
  run_call; after the step is reaped the server forks the next spare;
- pre-forked and warm: as above, but while it waits the spare has already run the
  step set-up once on a scratch Launch (signals, process group, death signal,
  environment, a scratch directory and log, streams), so the code and data that set-up
  touches are faulted in before demand; run_call then repeats it for the real step.
  (The step's module cannot be imported ahead: which one is not known yet.)

Start latency = the child's work_start (its "begin" report) - decided_at (the driver
stamps it just before writing the Launch), the same definition as startup_s in
events.jsonl. fleet itself is unchanged by this benchmark: it is a measurement of
the idea, not an implementation.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _nodebench as nb  # noqa: E402

SERVER = r"""
import io, json, os, sys, time
from fleet.node import zygote as Z  # thread variables: set below, as the zygote does
for name in Z.THREAD_VARS:
    os.environ.setdefault(name, "1")
import numpy, scipy.linalg, msgpack
from fleet.node import child
from fleet.wire import framing, messages
mode, fd_in, fd_out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
report_r, report_w = os.pipe()
child.set_pdeathsig(15)
parent = os.getpid()
reader = framing.FrameReader()

def run(launch, first_at):
    child.run_call(launch, report_w, first_at=first_at, close_fds=(fd_in, fd_out, report_r),
                   restore_env=Z.INHERITED_THREAD_ENV, parent=parent)

def spare():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        if mode == "prefork-warm":  # what needs no Launch, done (and its pages faulted) ahead
            scratch = f"{sys.argv[4]}/warm{os.getpid()}"
            child._setup(messages.Launch(
                step="warm", attempt=1, kind="call", call="", args={}, command=None,
                cores=tuple(sorted(os.sched_getaffinity(0))), gpus=(), memory=0, workdir=scratch,
                log=scratch + "/log", run_dir=scratch, env={"FLEET_STEP": "", "FLEET_ATTEMPT": "",
                "FLEET_RUN_DIR": ""}), (fd_in, fd_out, report_r), Z.INHERITED_THREAD_ENV, parent)
            msgpack.packb({"pid": 0, "phase": "warm", "first_at": time.time()})  # the report path
        data = b""
        while True:  # the Launch frame, then end of file
            chunk = os.read(r, 65536)
            if not chunk:
                break
            data += chunk
        first_at = time.time()
        (launch,) = framing.FrameReader().feed(data)
        run(launch, first_at)
    os.close(r)
    return pid, w

def finish(pid):
    os.waitpid(pid, 0)
    recs = list(msgpack.Unpacker(io.BytesIO(os.read(report_r, 65536)), raw=False))
    framing.write_message(fd_out, messages.Refused(json.dumps(recs)))  # any frame type will do

next_spare = spare() if mode != "fork" else None
while True:
    msgs = reader.feed(os.read(fd_in, 65536))
    for launch in msgs:
        if isinstance(launch, messages.Shutdown):
            if next_spare:
                os.kill(next_spare[0], 9); os.waitpid(next_spare[0], 0)
            sys.exit(0)
        if mode == "fork":
            sys.stdout.flush(); sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                run(launch, time.time())
            finish(pid)
        else:
            pid, w = next_spare
            os.write(w, framing.frame(launch))
            os.close(w)
            finish(pid)  # reported before the next spare is forked: off the start path
            next_spare = spare()
"""


MODES = ("fork", "prefork", "prefork-warm")
LABELS = {"fork": "fork on demand (fleet today)", "prefork": "pre-forked spare child",
          "prefork-warm": "pre-forked, launch-free setup done"}


def measure(mode: str, steps: int, work: Path, gap: float) -> dict:
    import os
    import time
    os.environ["PYTHONPATH"] = nb.bench_env()["PYTHONPATH"]
    from fleet.wire import framing, messages
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    (work / "scratch").mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", SERVER, mode, str(req_r), str(rep_w), str(work / "scratch")],
                            pass_fds=(req_r, rep_w), stdin=subprocess.DEVNULL, start_new_session=True)
    os.close(req_r)
    os.close(rep_w)
    reader = framing.FrameReader()
    core = sorted(os.sched_getaffinity(0))[0]
    lat, first = [], []
    try:
        time.sleep(2.0)  # imports done (a first, unmeasured step below warms the path)
        for i in range(-5, steps):
            wd = str(work / mode / f"s{i}")
            time.sleep(gap)  # demand below the fork rate: the spare is ready (both modes alike)
            decided = time.time()
            framing.write_message(req_w, messages.Launch(
                step=f"s{i}", attempt=1, kind="call", call=f"{nb.STEPS_MODULE}:noop", args={},
                command=None, cores=(core,), gpus=(), memory=0, workdir=wd, log=wd + "/log",
                run_dir=str(work), decided_at=decided,
                env={"FLEET_STEP": f"s{i}", "FLEET_ATTEMPT": "1", "FLEET_RUN_DIR": str(work)}))
            msgs: list = []
            while not msgs:
                msgs = reader.feed(os.read(rep_r, 65536))
            recs = json.loads(msgs[0].reason)
            begin = next(r for r in recs if r["phase"] == "begin")
            if i >= 0:
                lat.append(begin["work_start"] - decided)
                first.append(begin["first_at"] - decided)
        framing.write_message(req_w, messages.Shutdown(0))
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            nb.kill_group(proc.pid)
            proc.wait(timeout=10)
        os.close(req_w)
        os.close(rep_r)

    def ms(v):
        return {"median": round(nb.median(v) * 1e3, 3), "p95": round(nb.pct(v, 95) * 1e3, 3)}
    return {"mode": mode, "steps": steps, "gap_s": gap, "start_ms": ms(lat),
            "to_first_instruction_ms": ms(first)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--gap", type=float, default=0.02, help="seconds between a step's end and the next Launch")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    res = {"benchmark": "prefork", "command": "python benchmarks/prefork.py", "date": nb.today(),
           "machine": nb.machine(), "preload": list(nb.PRELOAD)}
    with tempfile.TemporaryDirectory(prefix="fleet-bench-prefork-") as tmp:
        # Interleaved halves, so that a noisy minute hits both alike.
        halves = [measure(m, args.steps // 2, Path(tmp) / f"{m}{k}", args.gap)
                  for k in range(2) for m in MODES]
    out = {}
    for mode in MODES:
        runs = [h for h in halves if h["mode"] == mode]
        out[mode] = {"runs": runs,
                     "start_ms_median": round(nb.median([r["start_ms"]["median"] for r in runs]), 3),
                     "start_ms_p95": round(max(r["start_ms"]["p95"] for r in runs), 3),
                     "to_first_instruction_ms_median":
                         round(nb.median([r["to_first_instruction_ms"]["median"] for r in runs]), 3)}
    res.update(out)
    res["saving_ms_median"] = {m: round(out["fork"]["start_ms_median"] - out[m]["start_ms_median"], 3)
                               for m in MODES[1:]}
    res["target_ms_median"] = 1.0
    res["prefork_meets_target"] = min(out[m]["start_ms_median"] for m in MODES[1:]) < 1.0
    print(f"\n{'':34s} {'start p50 ms':>13s} {'start p95 ms':>13s} {'to 1st instr p50':>17s}")
    for mode, label in LABELS.items():
        o = out[mode]
        print(f"{label:34s} {o['start_ms_median']:13.3f} {o['start_ms_p95']:13.3f} "
              f"{o['to_first_instruction_ms_median']:17.3f}")
    for m in MODES[1:]:
        print(f"{LABELS[m]}: saves {res['saving_ms_median'][m]:.2f} ms at the median; a start costs "
              f"{out[m]['start_ms_median']:.2f} ms")
    print(f"stretch target (median start < 1 ms): {'met' if res['prefork_meets_target'] else 'not met'}")
    if not args.no_write:
        print(f"wrote {nb.write_result('prefork', res).relative_to(nb.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
