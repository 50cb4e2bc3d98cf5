"""Done markers written by the steps' nodes (fleet.control.nodemarkers) against the
coordinator's threads (FLEET_MARKERS_ON=coordinator), in one tree, the cases alternated:
the coordinator's CPU per step (by thread), step starts per second, and how long
`fleet run` waits after the last exit for the markers.

    python benchmarks/markers_on_nodes.py [--rounds 2] [--agents 1000] [--steps 300000]
        [--duration 1] [--slow-ms 0] [--out results/markers_on_nodes.json]

Each case is one `benchmarks/control_scale.py` run (simulated agents over real ZeroMQ
and CURVE; they write the markers they are given, as an agent's thread does). With
--slow-ms X each marker's write takes X ms (FLEET_TEST_MARKER_SLEEP_MS): slept on the
coordinator's threads; on the simulated nodes modelled per node (each node's files
X ms apart, every node on its own, as each real node's writer thread is), since the
simulated agents share a few processes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _scale_extra import common_row, comparison_args, save, sim_run  # noqa: E402


def one(label: str, extra_env: dict, args, k: int) -> dict:
    r, code, t0 = sim_run("markers-on-nodes", k, args, extra_env)
    run, ev = r.get("run") or {}, r.get("events") or {}
    row = {"case": label, "env": extra_env, "exit": code, "t": t0, **common_row(r),
           # (threads after the submission: the loop, the markers' threads ("python"), ZeroMQ's I/O thread)
           # the last exit recorded -> the Progress answer that said done (polled each second): the
           # wait for the submission's markers to be written
           "last_exit_to_done_s": (round(run["t_done_polled"] - ev["last_exit_t"], 1)
                                   if run.get("t_done_polled") and ev.get("last_exit_t") else None)}
    print(json.dumps(row), flush=True)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    comparison_args(ap, steps=300_000)
    ap.add_argument("--slow-ms", type=float, default=0.0)
    ap.add_argument("--out", default=str(HERE / "results" / "markers_on_nodes.json"))
    args = ap.parse_args(argv)
    slow = {"FLEET_TEST_MARKER_SLEEP_MS": f"{args.slow_ms:g}"} if args.slow_ms else {}
    cases = [("coordinator's threads", {"FLEET_MARKERS_ON": "coordinator", **slow}),
             ("nodes", {"FLEET_MARKERS_ON": "nodes", **slow})]
    rows, k = [], 0
    for _ in range(args.rounds):
        for label, extra in cases:
            k += 1
            rows.append(one(label, extra, args, k))
    save("markers_on_nodes", argv if argv is not None else sys.argv[1:], rows, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
