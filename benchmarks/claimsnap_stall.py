"""The loop's longest turn while a claims snapshot (fleet.control.claimsnap) is written,
with 100,000 and 1,000,000 steps held in the claims log of a shared run directory.

    python benchmarks/claimsnap_stall.py                   # writes benchmarks/results/claimsnap_stall.json
    python benchmarks/claimsnap_stall.py --held 100000 --out /tmp/c.json

One process plays the coordinator's loop around a real claims log in a temporary run
directory (a real lease and registration, real files, fsync): the log is filled with
HELD claimed steps (4,096 per batch file), half of them said ended; then the loop
turns: each turn a little work (~50 us of encoding), the claims upkeep every 250 ms
(fleet.control.claims.tend's period while shared), and a claim batch of 8 new steps
every CLAIM_EVERY turns (0: none), and waits 1 ms in a sleep (the poll: the
interpreter's lock is free meanwhile). The first turn's upkeep starts the snapshot.
Measured until the snapshot is in place and its files removed: the longest turn, the
turn that started it, the longest claim (a claim waits for a snapshot still being
written), and the snapshot's wall time. The switch interval is 0.2 ms, as in a
coordinator (fleet.control.worker).

"Before" figures: this file run from a checkout of the earlier commit (the snapshot
written on the loop: there is no snap_async).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from fleet.control import claimlog, claimsnap  # noqa: E402
from fleet.control.lease import Lease  # noqa: E402


def filled(run_dir: Path, held: int) -> claimlog.ClaimLog:
    os.environ[claimsnap.FILES_ENV] = "64"  # due once the fill wrote this many files
    lease = Lease(run_dir, "bench", 60.0)
    lease._register()
    log = claimlog.ClaimLog(run_dir, "bench", lease, lambda fleet: None)
    if hasattr(log, "snap_async"):
        log.snap_async = True  # as fleet.control.recording sets it
    log._try_at = 1 << 60  # no compaction during the fill (the fill's own upkeep is not measured)
    steps = [f"scale/{i}" for i in range(held)]
    for i in range(0, held, claimlog.MAX_BATCH):
        log.claim(steps[i:i + claimlog.MAX_BATCH], lambda s: None)
    while log.next - log.snap_at < 64:  # enough files for a compaction to be due
        log.claim([f"pad/{log.next}"], lambda s: None)
    log.said.update(dict.fromkeys(steps[: held // 2]) if isinstance(log.said, dict) else steps[: held // 2])
    claimsnap.say_position(log)
    # The log's tables are old in a coordinator that ran that long (not walked by the
    # collections of young objects): so here too.
    gc.collect()
    return log


def turns(log: claimlog.ClaimLog, claim_every: int, limit_s: float = 120.0) -> dict:
    sys.setswitchinterval(0.0002)
    small = {"step": "x", "attempt": 1, "node": "node1", "cores": [1, 2, 3]}
    before = log.snapshots
    longest = first = longest_claim = 0.0
    n, k, t_start = 0, 0, time.perf_counter()
    next_upkeep = t_start
    while time.perf_counter() - t_start < limit_s:
        t0 = time.perf_counter()
        for _ in range(20):
            json.dumps(small)
        if t0 >= next_upkeep:
            next_upkeep = t0 + 0.25
            claimsnap.upkeep(log)
        if claim_every and n % claim_every == claim_every - 1:
            c0 = time.perf_counter()
            log.claim([f"new/{k + j}" for j in range(8)], lambda s: None)
            k += 8
            longest_claim = max(longest_claim, time.perf_counter() - c0)
        took = time.perf_counter() - t0
        first = took if n == 0 else first
        longest = max(longest, took)
        n += 1
        if log.snapshots > before and getattr(log, "pending", None) is None:
            break
        time.sleep(0.001)
    wall = time.perf_counter() - t_start
    return dict(snapshot_in_place=log.snapshots > before, snapshot_wall_ms=round(1000 * wall, 1),
                longest_turn_ms=round(1000 * longest, 1), first_turn_ms=round(1000 * first, 1),
                longest_claim_ms=round(1000 * longest_claim, 1), turns=n,
                files_left=len(claimlog.batch_files(log.root.parent.parent)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--held", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--claim-every", type=int, nargs="+", default=[0, 10, 1])
    ap.add_argument("--out", type=Path, default=HERE / "results" / "claimsnap_stall.json")
    a = ap.parse_args(argv)
    res = {}
    for held in a.held:
        for every in a.claim_every:
            with tempfile.TemporaryDirectory(prefix="fleet-claimsnap-") as tmp:
                log = filled(Path(tmp), held)
                r = res[f"{held} held, claim every {every or 'never'}"] = turns(log, every)
                print(held, every, json.dumps(r), flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
