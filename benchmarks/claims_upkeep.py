"""The claims upkeep on a shared run directory (fleet.control.claims, claimlog,
claimsnap), in one process on real files: its cost per period with many steps waiting
for another fleet, and the claims log's files after many claim turns.

    python benchmarks/claims_upkeep.py                      # 10k, 100k, 1M waiting steps
    python benchmarks/claims_upkeep.py --rev fd122c2        # the same with claims.py of a commit
    python benchmarks/claims_upkeep.py --waiting 100000 --turns 20000

(a) Waiting steps: fleet "other" (a registered, live fleet) claims W steps in batches;
this fleet waits for all of them (its `elsewhere`, as when its scheduler decided them and
found them held). Then, per period, "other" claims or says ended CHANGED of them and
this fleet runs its upkeep (Claims.tend): CPU per period and steps looked at per period.
--rev loads fleet/control/claims.py from that commit instead (git show), for "before".
(b) Files: two fleets alternate claim turns of 4 new steps each, TURNS in all, and each
follows the log every 50 of its turns (as every FOLLOW_S): the files in .fleet/claims at
the end and at most, with compaction as shipped and without (threshold never reached).
Prints JSON; the figures go to benchmarks/README.md by hand.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fleet.control import claimlog, claimsnap  # noqa: E402
from fleet.control.lease import Lease  # noqa: E402
from fleet.wire.events import EventLog  # noqa: E402


def claims_class(rev: str | None):
    if rev is None:
        from fleet.control.claims import Claims
        return Claims
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:fleet/control/claims.py"], check=True,
                         capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp(prefix="claims-rev-")) / "claims_rev.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("claims_rev", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.Claims


def fleet_log(run_dir: Path, who: str) -> claimlog.ClaimLog:
    lease = Lease(run_dir, who, 600.0)
    lease._register()
    return claimlog.ClaimLog(run_dir, who, lease, lambda fleet: None)


class _Sched:  # what Claims.tend asks of the scheduler: nothing runs here
    def running(self):
        return []


def waiting(n: int, changed: int, periods: int, rev: str | None) -> dict:
    Claims = claims_class(rev)
    with tempfile.TemporaryDirectory(prefix="fleet-upkeep-") as tmp:
        run_dir = Path(tmp)
        other = fleet_log(run_dir, "other")
        steps = [f"s/{i}" for i in range(n)]
        for i in range(0, n, claimlog.MAX_BATCH):
            other.claim(steps[i:i + claimlog.MAX_BATCH], lambda s: None)
        me = fleet_log(run_dir, "me")
        events = EventLog(run_dir / "events.jsonl")
        c = Claims(run_dir, "me", _Sched(), {}, events, stale_after=600.0, max_attempts=0)
        c.log = me
        now = time.time()
        for s in steps:
            c.elsewhere[s] = ("other", now, False)
        if hasattr(c, "_poll"):
            c._poll = set(steps)  # (as not_ours adds them)
        t0 = time.process_time()
        list(c.tend(now))  # the first look: every step is new
        first = time.process_time() - t0
        cpu, looked = [], []
        for p in range(periods):
            batch = steps[p * changed:(p + 1) * changed]
            while not other._write(batch):  # a batch naming them again, as one that changes them would
                other.follow()  # (the waiting fleet's own batch, since when it is busy, may have its number)
            e0 = getattr(c, "examined", 0)
            t0 = time.process_time()
            list(c.tend(time.time()))
            cpu.append(time.process_time() - t0)
            looked.append(getattr(c, "examined", 0) - e0 if hasattr(c, "examined") else n)
        snap = None
        if hasattr(me, "snapshots"):  # a compaction's snapshot of this log: its cost at this size
            t0 = time.process_time()
            claimsnap._snapshot(me)
            snap = round((time.process_time() - t0) * 1e3, 1)
        events.close()
        return {"snapshot_ms": snap, "waiting": n, "changed_per_period": changed, "rev": rev or "working tree",
                "first_tend_ms": round(first * 1e3, 2),
                "tend_cpu_ms_per_period": round(sum(cpu) / len(cpu) * 1e3, 3),
                "steps_looked_at_per_period": sum(looked) / len(looked)}


def files(turns: int, compact: bool) -> dict:
    if not compact:
        os.environ[claimsnap.FILES_ENV] = str(10 ** 12)
    else:
        os.environ.pop(claimsnap.FILES_ENV, None)
    with tempfile.TemporaryDirectory(prefix="fleet-files-") as tmp:
        run_dir = Path(tmp)
        logs = [fleet_log(run_dir, "a"), fleet_log(run_dir, "b")]
        most, t0 = 0, time.process_time()
        for t in range(turns):
            log = logs[t % 2]
            log.claim([f"s/{t}/{k}" for k in range(4)], lambda s: None)
            if (t // 2) % 50 == 0:
                claimsnap.upkeep(log)
                most = max(most, len(claimlog.batch_files(run_dir)))
        cpu = time.process_time() - t0
        return {"turns": turns, "compaction": compact, "files_at_end": len(claimlog.batch_files(run_dir)),
                "most_files_seen": most, "snapshots": sum(x.snapshots for x in logs),
                "cpu_s": round(cpu, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--waiting", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--changed", type=int, default=100, help="steps the log changes per period")
    ap.add_argument("--periods", type=int, default=10)
    ap.add_argument("--turns", type=int, default=20_000)
    ap.add_argument("--rev", default=None, help="claims.py of this commit (before)")
    args = ap.parse_args(argv)
    out = {"waiting": [waiting(n, args.changed, args.periods, args.rev) for n in args.waiting]}
    if args.rev is None and args.turns:
        out["files"] = [files(args.turns, False), files(args.turns, True)]
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
