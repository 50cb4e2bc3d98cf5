"""A rerun of a suite whose every step is done: how long `fleet up` and the rerun's
`fleet run` take, the coordinator's memory, and how many done markers the coordinator
opens (an audit hook in its process counts them).

The run directory is one a control_scale.py run left (its --work directory: suite.toml
and run/), whose journals are copied aside once (<work>/fleet-pristine) and put back
before each measurement, so every tree starts from the same records:

    python benchmarks/control_scale.py --agents 1000 --steps 1000000 --duration 1 --work /dev/shm/m1 ...
    python benchmarks/rerun_done.py --work /dev/shm/m1 --trees /tmp/base,. --out results/rerun_done.json

Each tree is run with its own checkout on PYTHONPATH (`.`: this one), one at a time;
`TREE@fold` runs it with FLEET_TEST_FOLD_FILES=1 (the fold at every start, as before
fleet.control.fold.FOLD_FILES).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HOOK = '''
import os, sys
_path = os.environ.get("FLEET_BENCH_OPEN_LOG")
if _path:  # every process of the fleet: its opens of done markers, said at its exit
    import atexit
    _n = [0]
    def _hook(event, args):
        if event == "open" and args and isinstance(args[0], str) and args[0].endswith("/.fleet/done.json"):
            _n[0] += 1
    sys.addaudithook(_hook)
    atexit.register(lambda: _n[0] and open(_path, "a").write("%d %d\\n" % (os.getpid(), _n[0])))
'''


def coordinator_pid(run_dir: Path) -> int | None:
    out = subprocess.run(["pgrep", "-f", f"fleet.control.coordinator --run-dir {run_dir}"],
                         capture_output=True, text=True).stdout.split()
    return int(out[0]) if out else None


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(tree: Path, work: Path, hook: Path, fold_every_start: bool = False, spy: Path | None = None) -> dict:
    run_dir, pristine = work / "run", work / "fleet-pristine"
    shutil.rmtree(run_dir / ".fleet", ignore_errors=True)
    shutil.copytree(pristine, run_dir / ".fleet", symlinks=True)
    (run_dir / "events.jsonl").write_bytes(b"")  # (what earlier reruns appended: not read by a rerun)
    log = work / "opens.txt"
    log.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": f"{hook}{os.pathsep}{tree}", "FLEET_BENCH_OPEN_LOG": str(log)}
    env.pop("FLEET_RUN_DIR", None)
    if fold_every_start:
        env["FLEET_TEST_FOLD_FILES"] = "1"
    fleet = [sys.executable, "-m", "fleet"]
    t0 = time.time()
    subprocess.run([*fleet, "up", "--local", "--run-dir", str(run_dir), "--nodes", "1", "--timeout", "600"],
                   env=env, cwd="/tmp", check=True, capture_output=True, timeout=900)
    up_s = time.time() - t0
    pid = coordinator_pid(run_dir)
    time.sleep(2)
    rss_up = rss_mib(pid)
    client = [*fleet, "run", "--run-dir", str(run_dir), str(work / "suite.toml")]
    spies = []
    if spy:  # py-spy on the coordinator and on the client, for the rerun only (raw: collapsed stacks)
        spy.mkdir(parents=True, exist_ok=True)
        spies.append(subprocess.Popen(["py-spy", "record", "--format", "raw", "--threads", "--rate", "200",
                                       "-o", str(spy / "coordinator.txt"), "-p", str(pid)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        client = ["py-spy", "record", "--format", "raw", "--rate", "200", "-o", str(spy / "client.txt"), "--", *client]
    t0 = time.time()
    r = subprocess.run(client, env=env, cwd="/tmp", capture_output=True, text=True, timeout=1800)
    rerun_s = time.time() - t0
    for p in spies:
        p.send_signal(signal.SIGINT)
        p.wait(timeout=120)
    rss_after = rss_mib(pid)
    time.sleep(12)  # past the coordinator's next heap trim (fleet.control.heap.TRIM_S): like for like across trees
    rss_later = rss_mib(pid)
    subprocess.run([*fleet, "down", "--run-dir", str(run_dir)], env=env, cwd="/tmp", capture_output=True, timeout=600)
    deadline = time.time() + 120
    while coordinator_pid(run_dir) and time.time() < deadline:
        time.sleep(0.5)
    opens = dict(tuple(map(int, line.split())) for line in log.read_text().splitlines()) if log.exists() else {}
    return {"tree": str(tree) + ("@fold" if fold_every_start else ""), "up_s": round(up_s, 1), "rerun_s": round(rerun_s, 1), "rerun_rc": r.returncode,
            "rerun_last_line": r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr[-300:],
            "coordinator_rss_mib_after_up": round(rss_up, 1), "coordinator_rss_mib_after_rerun": round(rss_after, 1),
            "coordinator_rss_mib_12s_after_rerun": round(rss_later, 1),
            "coordinator_done_marker_opens": opens.get(pid, 0), "all_done_marker_opens": sum(opens.values()),
            "loadavg": os.getloadavg()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", required=True, help="a control_scale.py --work directory whose suite ran")
    ap.add_argument("--trees", default=".", help="checkouts to measure, comma-separated, in this order")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out", help="write the results here (JSON)")
    ap.add_argument("--spy", help="py-spy the rerun's coordinator and client into this directory (raw stacks; "
                                  "the figures then include py-spy's sampling)")
    a = ap.parse_args()
    work = Path(a.work).resolve()
    if not (work / "fleet-pristine").exists():
        shutil.copytree(work / "run" / ".fleet", work / "fleet-pristine", symlinks=True)
    hook = work / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOOK)
    trees = [(Path(t.removesuffix("@fold")).resolve(), t.endswith("@fold")) for t in a.trees.split(",")]
    out = {"command": "python benchmarks/" + " ".join([Path(__file__).name, *sys.argv[1:]]), "runs": []}
    for _ in range(a.rounds):
        for tree, fold_every_start in trees:
            res = measure(tree, work, hook, fold_every_start, Path(a.spy) / tree.name if a.spy else None)
            print(json.dumps(res), flush=True)
            out["runs"].append(res)
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
