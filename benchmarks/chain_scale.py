"""Chained node windows at 1,000 simulated agents (issue 12, item 4): the coordinator's
CPU a step, step starts a second and how far ahead steps are handed, at window depths
1 (the default), 4 and 16, alternated in one tree.

    python benchmarks/chain_scale.py [--rounds 2] [--agents 1000] [--steps 200000]
        [--duration 1] [--depths 1,4,16] [--out results/chain_scale.json]

Each case is one `benchmarks/control_scale.py` run: simulated agents over real ZeroMQ
and CURVE, a node window of the node's cores times the depth (FLEET_SIM_WINDOW=cores, a
real fleet's default) and chains of that depth (FLEET_SIM_WINDOW_DEPTH, `fleet up
--window-depth`); the simulated agents keep a chain as a zygote does (fleet.node.queued:
a launch held behind a held one starts when that one has run). The report hold is the
coordinator's default for the allocation (the nodes / 5,000 s).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _scale_extra import common_row, comparison_args, save, sim_run  # noqa: E402


def one(depth: int, args, k: int) -> dict:
    r, code, t0 = sim_run("chain-scale", k, args, {"FLEET_SIM_WINDOW_DEPTH": str(depth)})
    run, seen = r.get("run") or {}, r.get("agents_seen") or {}
    row = {"depth": depth, "exit": code, "t": t0, **common_row(r),
           "decision_to_agent": seen.get("decision_to_agent"),
           "launches": seen.get("launches"), "duplicate_launches": seen.get("duplicate_launches"),
           "kills": seen.get("kills"), "held": seen.get("held"), "held_behind_held": seen.get("held_behind_held"),
           "counts": run.get("counts"), "status_during_run": run.get("status_during_run")}
    print(json.dumps(row), flush=True)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    comparison_args(ap, steps=200_000)
    ap.add_argument("--depths", default="1,4,16")
    ap.add_argument("--out", default=str(HERE / "results" / "chain_scale.json"))
    args = ap.parse_args(argv)
    depths = [int(d) for d in args.depths.split(",")]
    rows, k = [], 0
    for rnd in range(args.rounds):
        for depth in depths if rnd % 2 == 0 else depths[::-1]:
            k += 1
            rows.append(one(depth, args, k))
    save("chain_scale", argv if argv is not None else sys.argv[1:], rows, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
