"""Fleet as one node of two cores against two pretend nodes of one core (issue 12, b).

    cd /tmp && python /work/main/benchmarks/one_node.py     # results/one_node.json

peer_compare.py measures `fleet up --nodes 2` (one pretend node a core, as the floor
has one loop a core). On a machine of two cores `fleet up --nodes 1` is the natural
shape: one agent and one zygote, so two steps ending together could be reaped, reported
and relayed in one wake-up each. Does that cut fleet's own CPU a step? The floor,
fleet --nodes 1 and fleet --nodes 2 on peer_compare's two workloads, 2,000 steps each,
two rounds in opposite orders; peer_compare's measurements, as they are.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _nodebench as nb  # noqa: E402
import peer_compare as pc  # noqa: E402

SYSTEMS = (("floor", 2), ("fleet", 1), ("fleet", 2))


def main() -> int:
    work = pc.calibrate(0.005)
    rows = []
    with tempfile.TemporaryDirectory(prefix="fleet-one-node-") as tmp:
        for rnd in range(2):
            for kind in pc.KINDS:
                for name, nodes in SYSTEMS if rnd == 0 else SYSTEMS[::-1]:
                    pc.FLEET_NODES[0] = nodes
                    m = pc.MEASURE[name](kind, 2000, work, Path(tmp))
                    row = {"round": rnd + 1, "kind": kind, "system": name if name == "floor" else f"fleet --nodes {nodes}",
                           "steps_per_s": m["steps_per_s"], "own_cpu_ms_per_step": m.get("own_cpu_ms_per_step"),
                           "cpu_ms_per_step": m["cpu_ms_per_step"], "other_load_cores": m["other_load_cores"]}
                    print(row, file=sys.stderr, flush=True)
                    rows.append(row)
    res = {"benchmark": "one_node", "command": "python benchmarks/one_node.py", "date": nb.today(),
           "machine": nb.machine(), "work": work, "runs": rows}
    print(f"wrote {nb.write_result('one_node', res).relative_to(nb.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
