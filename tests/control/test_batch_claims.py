"""Claims in batches on a shared run directory (fleet.control.claimlog), through real
`fleet run` processes: two fleets on one run directory run every step exactly once
with far fewer claim files than steps and no per-step claim; a fleet killed with
SIGKILL mid-run leaves the steps it claimed but did not finish to the other fleet,
which runs each of them once. Every claim is checked from the steps' own evidence
(tests/fleet_steps.py `once`: "start"/"end" lines, one output published per step)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from fleetharness import assert_nothing_left, fleet, two_fleets_gated, wait_for, write_suite
from fleetharness import records as event_records

from fleet.control import claimlog, fold
from fleet.wire import events as E
from fleet.wire import records


SEGMENT = re.compile(r"\.\d+\.jsonl$")  # a rotated journal (fleet.control.fold)


def of(run_dir: Path, kind: type, **match) -> list:
    return [e for e in event_records(run_dir)
            if isinstance(e, kind) and all(getattr(e, k) == v for k, v in match.items())]


def evidence(run_dir: Path) -> list[list[str]]:
    p = run_dir / "evidence.txt"
    return [line.split() for line in p.read_text().splitlines()] if p.exists() else []


def assert_each_ended_once(run_dir: Path, steps: list[str]) -> None:
    lines = evidence(run_dir)
    assert not [f for f in lines if f[0].startswith("overlap")], "attempts of one step ran at the same time"
    got = Counter(f[1] for f in lines if f[0] == "end")
    assert got == Counter(steps), {s: got[s] for s in set(steps) | set(got) if got[s] != 1}
    assert sorted(p.name for p in (run_dir / "out").iterdir()) == sorted(s.replace("/", "_") for s in steps)


def suite_of(tmp_path: Path, count: int, seconds: float, gate: Path | None = None) -> Path:
    gated = f', gate = "{gate}"' if gate else ""
    return write_suite(tmp_path / "s.toml", f"""
[suite]
name = "batches"
run_dir = "run"
[[steps]]
id = "s/{{i}}"
array = "0-{count - 1}"
call = "fleet_steps:once"
args = {{ seconds = {seconds}{gated} }}
""")


def two_fleets_run(tmp_path, started, n: int, seconds: float):
    """A suite of n steps of `seconds` each run by two fleets on one run directory, the
    second started once the first has started steps; both succeed, each step ends once.
    The steps wait at a gate until the second fleet has started one: on a loaded machine
    the first fleet could otherwise end them all before the second came up."""
    steps = [f"s/{i}" for i in range(n)]
    gate = tmp_path / "go"
    suite, run_dir = suite_of(tmp_path, n, seconds, gate), tmp_path / "run"
    first, second = two_fleets_gated(run_dir, gate, lambda: started("run", str(suite), "--nodes", "2"),
                                     lambda: started("run", str(suite), "--nodes", "2"), first_starts=2)
    outs = [p.communicate(timeout=120) for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outs
    assert_each_ended_once(run_dir, steps)
    return run_dir, steps


def test_two_fleets_sharing_a_run_directory_claim_in_batches_and_run_each_step_once(tmp_path, started):
    run_dir, steps = two_fleets_run(tmp_path, started, 150, 0.1)
    fleets = [e.fleet for e in of(run_dir, E.FleetStarting)]
    by_fleet = Counter(e.fleet for e in of(run_dir, E.Started))
    assert len(fleets) == 2 and by_fleet[fleets[1]] > 0  # the second fleet ran its share
    # Claimed in batches: far fewer claim files than steps started once the run
    # directory was shared, and not one per-step claim file.
    files = claimlog.batch_files(run_dir)
    since = json.loads(files[0].read_text())["at"]
    shared_starts = sum(1 for e in of(run_dir, E.Started) if e.t >= since)
    claiming = [p for p in files if json.loads(p.read_text()).get("steps")]  # (not those saying ends: per period)
    assert 0 < len(claiming) <= shared_starts // 3, (len(claiming), len(files), shared_starts)
    assert not [s for s in steps if (records.fleet_dir(run_dir, s) / records.CLAIM).exists()]
    a = json.loads(fleet("audit", str(run_dir), "--json", cwd=tmp_path, timeout=60).stdout)
    assert a["ok"] and set(v["status"] for v in a["steps"].values()) == {"succeeded"}
    assert_nothing_left(run_dir)


@pytest.mark.parametrize("rotate,hard", [("", False), ("1024", False), ("", True)],
                         ids=["whole-journals", "rotated-journals", "coordinator-killed-too"])
def test_a_fleet_killed_mid_run_leaves_the_steps_it_claimed_to_the_other_fleet_which_runs_each_once(
        tmp_path, started, rotate, hard, monkeypatch):
    """(rotated-journals: both fleets rotate their journals every 1 KiB while shared, so
    the victim dies with sealed segments and a journal started again. Its `fleet run`
    is killed; its embedded coordinator, in a session of its own, then stops its steps
    and ends as it would at Ctrl-C: they were interrupted, not lost. coordinator-killed-too:
    SIGKILL for the coordinator as well, which records nothing more: the other fleet finds
    its journal unsealed and records the attempts it began and never ended as lost.)"""
    steps = [f"s/{i}" for i in range(24)]
    suite, run_dir = suite_of(tmp_path, 24, 1.5), tmp_path / "run"
    env = {"FLEET_TEST_JOURNAL_ROTATE_BYTES": rotate} if rotate else {}
    first = started("run", str(suite), "--nodes", "2", extra_env=env)
    wait_for(lambda: len(of(run_dir, E.Started)) >= 2, 60, "the first fleet to start steps")
    victim = of(run_dir, E.FleetStarting)[0].fleet
    # --max-attempts 2: the steps the victim leaves (one lost attempt each, when hard) run here again.
    second = started("run", str(suite), "--nodes", "2", "--max-attempts", "2", extra_env=env)
    wait_for(lambda: len(of(run_dir, E.FleetStarting)) == 2
             and any(e.fleet != victim for e in of(run_dir, E.Started)), 60, "the second fleet to start steps")

    def quiet() -> bool:
        # Kill while none of the first fleet's steps is about to end or just ended: an
        # outcome received in the very turn of the kill is in no file and runs again
        # (fleet.control.journal), which is not what this test is about.
        now = time.time()
        mine = [e.t for e in of(run_dir, E.Started) if e.fleet == victim]
        ends = [e.t for e in of(run_dir, E.Exit)]
        rotated = not rotate or any(SEGMENT.search(p.name) for p in journals.glob(f"{victim}.*"))
        return rotated and bool(mine) and 0.4 <= now - max(mine) <= 0.9 and (not ends or now - max(ends) >= 0.4)

    journals = run_dir / ".fleet" / "journal"
    wait_for(quiet, 60, "a quiet moment in the first fleet (rotated-journals: once it rotated)")
    os.killpg(first.pid, signal.SIGKILL)
    if hard:
        os.kill(next(e.pid for e in of(run_dir, E.FleetStarting) if e.fleet == victim), signal.SIGKILL)
    first.communicate(timeout=30)
    if rotate:  # it rotated while shared: sealed segments, and its journal started again
        assert [p for p in journals.iterdir() if p.name.startswith(f"{victim}.") and SEGMENT.search(p.name)]
    ended = {f[1] for f in evidence(run_dir) if f[0] == "end"}
    started_there = {e.step for e in of(run_dir, E.Started) if e.fleet == victim}
    held = {s for s, rec in claimlog.holders(run_dir).items() if rec["fleet"] == victim}
    unfinished = started_there - ended  # claimed and started there, killed on the way
    assert unfinished and unfinished <= held, (unfinished, held)
    out = second.communicate(timeout=120)
    assert second.returncode == 0, out
    assert_each_ended_once(run_dir, steps)  # each of them ran once more, in the other fleet
    other = {e.step for e in of(run_dir, E.Started) if e.fleet != victim}
    assert unfinished <= other
    # Killed hard, the victim's unended attempts were recorded lost by the other fleet,
    # which replayed its journal (--max-attempts counts them), once each, and no other.
    lost = [(s, rec) for s, tries in records.read_journals(run_dir).attempts.items() for rec in tries.values()
            if rec["outcome"] == "lost"]
    if hard:
        assert unfinished <= {s for s, _ in lost} <= held - ended, (lost, unfinished, held)
        assert len(lost) == len({s for s, _ in lost}) and all(r["fleet"] == victim and r["spec"] for _, r in lost)
    else:
        assert not lost, lost
    # Claimed in batches: fewer batches that claim than steps. (Batches that only say what
    # ended, or since when a fleet is busy, come once per period: their number grows with
    # the run's length, which load stretches; not counted.)
    claiming = [p for p in claimlog.batch_files(run_dir) if json.loads(p.read_text()).get("steps")]
    assert 0 < len(claiming) < len(steps), len(claiming)
    if rotate:  # a lone fleet afterwards folds every segment and runs nothing again
        monkeypatch.setenv(fold.FOLD_FILES_ENV, "1")  # (at its start, however few segments wait)
        rerun = fleet("run", str(suite), "--nodes", "1", cwd=tmp_path, timeout=120)
        assert rerun.returncode == 0, rerun.stderr
        assert not [p for p in journals.iterdir() if SEGMENT.search(p.name)]
        assert_each_ended_once(run_dir, steps)
    assert_nothing_left(run_dir)


def _racer(run_dir: str, who: str, steps: list[str], barrier, done, results) -> None:
    from fleet.control.lease import Lease
    claimlog.MAX_BATCH = 7  # several files per claim, to race on each
    lease = Lease(Path(run_dir), who, 60.0)
    lease._register()  # live to the others while it races
    log = claimlog.ClaimLog(Path(run_dir), who, lease, lambda fleet: None)
    barrier.wait()
    for i in range(0, len(steps), 10):
        log.claim(steps[i:i + 10], lambda s: None)
    results.put((who, sorted(log.mine)))
    done.wait()  # stay live until every racer has claimed


def test_processes_racing_to_claim_overlapping_batches_each_get_a_disjoint_share_and_together_all(tmp_path):
    """Eight real processes claim the same 60 steps in different orders, ten at a time,
    at most seven to a file: each step ends up held by exactly one of them, and every
    racer's reading of the log agrees."""
    import multiprocessing
    import random
    ctx = multiprocessing.get_context("fork")
    steps = [f"s/{i}" for i in range(60)]
    barrier, done, results = ctx.Barrier(8), ctx.Barrier(9), ctx.Queue()
    procs = []
    for k in range(8):
        mine = steps[:]
        random.Random(k).shuffle(mine)
        procs.append(ctx.Process(target=_racer, args=(str(tmp_path), f"racer{k}", mine, barrier, done, results)))
    for p in procs:
        p.start()
    try:
        won = dict(results.get(timeout=60) for _ in procs)
        done.wait(timeout=60)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    held = Counter(s for v in won.values() for s in v)
    assert set(held) == set(steps) and set(held.values()) == {1}, held
    last = {s: rec["fleet"] for s, rec in claimlog.holders(tmp_path).items()}
    assert last == {s: who for who, v in won.items() for s in v}


def test_a_fleet_waiting_for_steps_a_live_fleet_holds_learns_they_ended_from_the_claims_log(tmp_path, started):
    """The holder says in the claims log which of its steps ended; the fleet that waits
    for them settles each as done there while the holder still runs (it reads a step's
    marker once the log says it ended, not every period while it runs)."""
    run_dir, _ = two_fleets_run(tmp_path, started, 60, 0.4)
    fleets = [e.fleet for e in of(run_dir, E.FleetStarting)]
    batches = [json.loads(p.read_text()) for p in claimlog.batch_files(run_dir)]
    ended = {f: {s for b in batches if b["fleet"] == f for s in b.get("ended", ())} for f in fleets}
    held = {f: {s for b in batches if b["fleet"] == f for s in b["steps"]} for f in fleets}
    assert ended[fleets[0]] and ended[fleets[0]] <= held[fleets[0]]
    # What the second fleet found held by the first and then settled as done there: each
    # was said ended in the log, and settled before the first fleet's last record.
    waited = {e.step for e in of(run_dir, E.Elsewhere) if e.fleet == fleets[1] and e.holder == fleets[0]}
    settled = {e.step: e.t for e in of(run_dir, E.Skipped) if e.fleet == fleets[1] and e.by == fleets[0]}
    assert waited and set(settled) <= waited and set(settled) <= ended[fleets[0]], (waited, settled)
    last_of_first = max(e.t for e in event_records(run_dir) if e.fleet == fleets[0])
    assert settled and min(settled.values()) < last_of_first
    assert_nothing_left(run_dir)
