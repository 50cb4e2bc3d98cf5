"""Fleet and the raw fork floor with their files on this machine's disk and on tmpfs
(issue 12, benchmark b).

    cd /tmp && python /work/main/benchmarks/files_per_step.py    # results/files_per_step.json

A step under fleet makes four entries in the file system (its work directory, its log,
its records directory .fleet, its done marker), the floor's one (its log). What an
entry costs depends on the file system, and on this VM's disk it moves by an order of
magnitude from minute to minute. So peer_compare's floor and fleet measurements are made
here twice, with every file of both systems on the disk (the temporary directory's
file system, as peer_compare) and on tmpfs (/dev/shm), alternating: the floor, fleet's
default window and `--window-depth 16 --report-hold 0.05`, 2,000 steps of each workload
(no-op; ~5 ms of numpy), two rounds in opposite orders. Before and after each
measurement: the CPU a create (open O_CREAT of a new file) and a mkdir cost on that
file system (300 of each, this process's CPU). Counted: the entries each system left
in its directory a step.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _nodebench as nb  # noqa: E402
import peer_compare as pc  # noqa: E402

SYSTEMS = {"floor": None, "fleet (default window)": [],
           "fleet --window-depth 16 --report-hold 0.05": ["--window-depth", "16", "--report-hold", "0.05"]}


def entry_cost(base: str, n: int = 300) -> dict:
    """CPU us of a create and of a mkdir in a fresh directory under ``base`` (this process)."""
    d = tempfile.mkdtemp(prefix="fleet-fs-", dir=base)
    try:
        t0 = time.process_time()
        for i in range(n):
            os.close(os.open(f"{d}/f{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        t1 = time.process_time()
        for i in range(n):
            os.mkdir(f"{d}/d{i}")
        t2 = time.process_time()
        return {"create_us": round((t1 - t0) / n * 1e6, 1), "mkdir_us": round((t2 - t1) / n * 1e6, 1)}
    finally:
        nb.run(["rm", "-rf", d], timeout=120)


def entries(path: Path) -> int:
    n = 0
    for _, dirs, files in os.walk(path):
        n += len(dirs) + len(files)
    return n


def measure(system: str, kind: str, work: dict, base: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="fleet-files-", dir=base) as tmp:
        before = entry_cost(base)
        if SYSTEMS[system] is None:
            m = pc.MEASURE["floor"](kind, 2000, work, Path(tmp))
        else:
            pc.FLEET_UP_ARGS[:] = SYSTEMS[system]
            try:
                m = pc.MEASURE["fleet"](kind, 2000, work, Path(tmp))
            finally:
                pc.FLEET_UP_ARGS[:] = []
        made = entries(Path(tmp))
        after = entry_cost(base)
    cpu = m["cpu_ms_per_step"]
    return {"steps_per_s": m["steps_per_s"], "cpu_ms_per_step": cpu,
            "all_cpu_ms_per_step": round(sum(cpu.values()), 3),
            "own_cpu_ms_per_step": m.get("own_cpu_ms_per_step"),
            "entries_per_step": round(made / m["steps"], 2),
            "entry_cost_before": before, "entry_cost_after": after,
            "other_load_cores": m["other_load_cores"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kinds", default=",".join(pc.KINDS))
    ap.add_argument("--disk", default=tempfile.gettempdir(), help="the disk's directory (default: the temporary one)")
    ap.add_argument("--tmpfs", default="/dev/shm")
    ap.add_argument("--out", default="files_per_step")
    args = ap.parse_args()
    work = pc.calibrate(0.005)
    places = {"disk": args.disk, "tmpfs": args.tmpfs}
    rows = []
    for rnd in range(2):
        for kind in args.kinds.split(","):
            order = [(s, p) for s in SYSTEMS for p in places]
            for system, place in order if rnd == 0 else order[::-1]:
                row = {"round": rnd + 1, "kind": kind, "system": system, "files": place,
                       **measure(system, kind, work, places[place])}
                print(row, file=sys.stderr, flush=True)
                rows.append(row)
    res = {"benchmark": args.out, "command": "python benchmarks/files_per_step.py " + " ".join(sys.argv[1:]),
           "date": nb.today(), "machine": nb.machine(), "work": work, "places": places, "runs": rows}
    print(f"wrote {nb.write_result(args.out, res).relative_to(nb.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
