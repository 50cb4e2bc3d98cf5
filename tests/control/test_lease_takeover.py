"""Taking over a dead or stale lease (fleet.control.lease): exactly one taker wins even
though the adoption file is removed after each take-over, since a taker goes on only if
the lease is still the one it read. Real processes racing on one run directory."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path

from fleet.control.lease import Lease

STALE_S = 5.0


def _racer(run_dir: str, who: str, barrier, results) -> None:
    lease = Lease(Path(run_dir), who, STALE_S)
    look = lease._read()  # read before the others move: what a slow taker acts on
    deadline = time.monotonic() + 60
    while not lease._takeable(look) and time.monotonic() < deadline:  # (stale once watched unchanged a while)
        time.sleep(0.05)
        look = lease._read()
    barrier.wait()
    won = 0
    for _ in range(200):  # again and again with that old reading, after the winner removed its file
        won += lease._take_over(look)
    results.put((who, won))


def test_processes_taking_over_one_stale_lease_with_old_readings_have_exactly_one_winner_and_leave_no_file(
        tmp_path):
    root = tmp_path / ".fleet"
    root.mkdir()
    (root / "lease").write_text(json.dumps({"fleet": "gone-1-abc", "host": "elsewhere", "pid": 1,
                                            "generation": 3, "shared": False}))
    old = time.time() - 2 * STALE_S
    os.utime(root / "lease", (old, old))
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(8), ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(str(tmp_path), f"taker{k}", barrier, results)) for k in range(8)]
    for p in procs:
        p.start()
    try:
        won = dict(results.get(timeout=60) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert sorted(won.values()) == [0] * 7 + [1], won
    lease = json.loads((root / "lease").read_text())
    assert lease["fleet"] == next(w for w, n in won.items() if n) and lease["generation"] == 4
    assert not list(root.glob("lease.adopt.*"))
