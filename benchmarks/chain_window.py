"""Chained node windows against the default window (issue 12, benchmark b).

    cd /tmp && python /work/main/benchmarks/chain_window.py [--variant NAME=PATH]...
                                                           # results/chain_window.json

`fleet up --window-depth D` lets D steps wait behind one running step on a node, and
with `--report-hold S` the agents and the zygotes hold their reports while steps are
queued, so that a wake-up of fleet's processes carries several steps. Measured beside
peer_compare's raw fork floor, on its two workloads (no-op; ~5 ms of numpy), 2,000 steps
each, two rounds in opposite orders: fleet with the default window, and with chains of
8 (hold 20 ms) and 16 (hold 50 ms). `--variant NAME=PATH` adds the chain of 16 run from
another checkout (PYTHONPATH=PATH), e.g. one whose zygote holds nothing, to learn what
each hold brings. `--chain D:S` (repeated) measures those chains and holds instead of
the default set, without the floor (`--out NAME`: results/NAME.json).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _nodebench as nb  # noqa: E402
import peer_compare as pc  # noqa: E402

CHAIN16 = ["--window-depth", "16", "--report-hold", "0.05"]
SYSTEMS = {
    "fleet (default window)": ([], None),
    "fleet --window-depth 8 --report-hold 0.02": (["--window-depth", "8", "--report-hold", "0.02"], None),
    "fleet --window-depth 16 --report-hold 0.05": (CHAIN16, None),
}


def measure(name: str, kind: str, work: dict, tmp: Path) -> dict:
    if name == "floor":
        return pc.MEASURE["floor"](kind, 2000, work, tmp)
    args, path = SYSTEMS[name]
    pc.FLEET_UP_ARGS[:] = args
    old = os.environ.get("PYTHONPATH")
    if path:
        os.environ["PYTHONPATH"] = os.pathsep.join([path] + ([old] if old else []))
    try:
        return pc.MEASURE["fleet"](kind, 2000, work, tmp)
    finally:
        if path:
            os.environ.pop("PYTHONPATH") if old is None else os.environ.__setitem__("PYTHONPATH", old)
        pc.FLEET_UP_ARGS[:] = []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", action="append", default=[], help="NAME=PATH: the chain of 16 from that checkout")
    ap.add_argument("--kinds", default=",".join(pc.KINDS))
    ap.add_argument("--chain", action="append", default=[], help="D:S: --window-depth D --report-hold S")
    ap.add_argument("--out", default="chain_window")
    args = ap.parse_args()
    if args.chain:
        SYSTEMS.clear()
        for c in args.chain:
            d, h = c.split(":")
            SYSTEMS[f"fleet --window-depth {d} --report-hold {h}"] = (["--window-depth", d, "--report-hold", h], None)
    for v in args.variant:
        name, path = v.split("=", 1)
        SYSTEMS[f"{name} (--window-depth 16 --report-hold 0.05)"] = (CHAIN16, path)
    work = pc.calibrate(0.005)
    names = [*([] if args.chain else ["floor"]), *SYSTEMS]
    rows = []
    with tempfile.TemporaryDirectory(prefix="fleet-chain-") as tmp:
        for rnd in range(2):
            for kind in args.kinds.split(","):
                for name in names if rnd == 0 else names[::-1]:
                    m = measure(name, kind, work, Path(tmp))
                    row = {"round": rnd + 1, "kind": kind, "system": name, "steps_per_s": m["steps_per_s"],
                           "own_cpu_ms_per_step": m.get("own_cpu_ms_per_step"), "cpu_ms_per_step": m["cpu_ms_per_step"],
                           "other_load_cores": m["other_load_cores"]}
                    print(row, file=sys.stderr, flush=True)
                    rows.append(row)
    res = {"benchmark": args.out, "command": "python benchmarks/chain_window.py " + " ".join(sys.argv[1:]),
           "date": nb.today(), "machine": nb.machine(), "work": work, "runs": rows}
    print(f"wrote {nb.write_result(args.out, res).relative_to(nb.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
