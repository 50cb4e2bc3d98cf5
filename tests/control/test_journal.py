"""The run directory's lease and the fleet's journal, through real processes: a
coordinator killed with SIGKILL around the journal's flush, then a rerun; the records a
lease holder leaves (journal, markers, no claims, no attempt files); a second fleet
that makes the run directory shared."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from fleetharness import assert_nothing_left, fleet, sessions, wait_for, write_suite
from fleetharness import records as event_records

from fleet.control import journal
from fleet.wire import events as E
from fleet.wire import records


def of(run_dir: Path, kind: type, **match) -> list:
    return [e for e in event_records(run_dir)
            if isinstance(e, kind) and all(getattr(e, k) == v for k, v in match.items())]



def journal_lines(run_dir: Path) -> list[dict]:
    out = []
    for p in sorted((run_dir / records.JOURNALS).glob("*.jsonl")):
        for raw in p.read_text().splitlines():
            try:
                out.append(json.loads(raw))
            except ValueError:
                pass
    return out


def runs(run_dir: Path) -> list[str]:
    p = run_dir / "runs.txt"
    return p.read_text().split() if p.exists() else []


SUITE = """
[suite]
name = "journal-kill"
[[steps]]
id = "fast"
call = "fleet_steps:count_runs"
[[steps]]
id = "slow"
call = "fleet_steps:nap"
args = { seconds = 3 }
"""


@pytest.mark.parametrize("window", ["before the journal is written", "before the marker is written"])
def test_a_coordinator_killed_around_the_journal_flush_leaves_the_step_run_again_or_recorded_done_never_both(
        tmp_path, started, window):
    """SIGKILL of the coordinator after `fast` exited and was reported, while `slow`
    runs; the window held open by a test hook (fleet.control.journal): the journal not
    yet written (the outcome is in no file: `fast` runs again), or the journal written
    and fsync'd but the marker not (the rerun writes it from the journal: `fast` is
    skipped). Never both, never neither; `slow`, which did not finish, is not marked
    done and runs again."""
    suite = write_suite(tmp_path / "s.toml", SUITE)
    run_dir = tmp_path / "run"
    hook = ({journal.DELAY_ENV: "600"} if window.startswith("before the journal")
            else {journal.HOLD_ENV: "1"})
    runner = started("run", str(suite), "--run-dir", str(run_dir), "--nodes", "2", extra_env=hook)
    wait_for(lambda: of(run_dir, E.Exit, step="fast", outcome="succeeded") and of(run_dir, E.Started, step="slow"),
             60, "fast to succeed and slow to start")
    if window == "before the marker is written":
        wait_for(lambda: any(x.get("k") == "done" and x.get("step") == "fast" for x in journal_lines(run_dir)),
                 30, "fast's success in the journal")
    os.kill(of(run_dir, E.FleetStarting)[0].pid, signal.SIGKILL)
    assert_nothing_left(run_dir, timeout=5.0)
    runner.communicate(timeout=30)
    assert runs(run_dir) == ["fast"]
    # Nothing on disk says done yet: the marker is written only after the journal.
    assert records.read_done(run_dir, "fast") is None and records.read_done(run_dir, "slow") is None
    journaled = {x.get("step") for x in journal_lines(run_dir) if x.get("k") == "done"}
    assert journaled == (set() if window.startswith("before the journal") else {"fast"})

    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "2", cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    second = sessions(run_dir)[-1]
    ran_again = [e.step for e in second if isinstance(e, E.Start)]
    skipped = [e.step for e in second if isinstance(e, E.Skipped)]
    if window.startswith("before the journal"):
        assert (sorted(ran_again), skipped) == (["fast", "slow"], [])
        assert runs(run_dir) == ["fast", "fast"]
    else:
        assert (ran_again, skipped) == (["slow"], ["fast"])
        assert runs(run_dir) == ["fast"]
    assert not set(ran_again) & set(skipped)  # never both
    for s in ("fast", "slow"):  # never neither
        assert records.read_done(run_dir, s)["outcome"] == "succeeded"
    a = json.loads(fleet("audit", str(run_dir), "--json", cwd=tmp_path, timeout=60).stdout)
    assert a["ok"] and {s: v["status"] for s, v in a["steps"].items()} == {"fast": "succeeded", "slow": "succeeded"}
    assert {s: v["successes"] for s, v in a["steps"].items()} == {"fast": 1, "slow": 1}
    assert_nothing_left(run_dir)


def test_one_fleet_on_a_run_directory_holds_its_lease_and_leaves_a_journal_and_markers_but_no_claim_or_attempt_file(
        tmp_path):
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "lease"
[[steps]]
id = "s/{i}"
array = "1-6"
call = "fleet_steps:count_runs"
[[steps]]
id = "bad"
call = "fleet_steps:always_fails"
retries = 1
""")
    run_dir = tmp_path / "run"
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "2", cwd=tmp_path, timeout=90)
    assert r.returncode == 1, r.stdout + r.stderr
    fleet_files = {p.name for s in [f"s/{i}" for i in range(1, 7)] + ["bad"]
                   for p in records.fleet_dir(run_dir, s).iterdir()}
    assert fleet_files == {"done.json", "final.json"}  # no claim, no attempt.*.json, no temporary file
    assert not (run_dir / ".fleet" / "lease").exists()  # given back at the end
    lines = journal_lines(run_dir)
    assert [x["k"] for x in lines][0] == "fleet" and lines[-1]["k"] == "sealed"
    assert sorted(x["step"] for x in lines if x["k"] == "done") == [f"s/{i}" for i in range(1, 7)]
    # What readers see is what per-step files used to say.
    assert [t["outcome"] for t in records.attempts(run_dir, "bad")] == ["failed", "failed"]
    assert records.read_final(run_dir, "bad")["outcome"] == "failed"
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "2", cwd=tmp_path, timeout=90)
    assert r.returncode == 1
    assert sorted(runs(run_dir)) == sorted(f"s/{i}" for i in range(1, 7))  # each once
    a = json.loads(fleet("audit", str(run_dir), "--json", cwd=tmp_path, timeout=60).stdout)
    assert a["steps"]["bad"]["attempts"] == 4 and a["steps"]["bad"]["status"] == "failed"
    assert a["steps"]["s/1"]["status"] == "succeeded" and not a["duplicates"]
    assert_nothing_left(run_dir)


def test_a_second_fleet_on_a_leased_run_directory_is_let_in_once_the_holder_claimed_what_it_runs_and_each_step_runs_once(
        tmp_path, started):
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "share"
run_dir = "run"
[[steps]]
id = "s/{i}"
array = "0-15"
call = "fleet_steps:once"
args = { seconds = 1.0 }
""")
    # 8 s of steps on the first fleet's two cores: the second comes up while they run,
    # even on a loaded machine (with 0.4 s steps the first had sometimes ended first).
    run_dir = tmp_path / "run"
    first = started("run", str(suite), "--nodes", "2")
    wait_for(lambda: len(of(run_dir, E.Started)) >= 2, 60, "the first fleet to start steps")
    lease = json.loads((run_dir / ".fleet" / "lease").read_text())
    assert lease["shared"] is False  # alone: no claims
    assert not any((records.fleet_dir(run_dir, e.step) / "claim").exists() for e in of(run_dir, E.Started))
    second = started("run", str(suite), "--nodes", "2")
    outs = [p.communicate(timeout=120) for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outs
    holder = lease["fleet"]
    shared = [x for x in journal_lines(run_dir) if x.get("k") == "shared"]
    assert len(shared) == 1  # the holder let the second fleet in, once
    starts = of(run_dir, E.FleetStarting)
    assert len(starts) == 2 and starts[0].fleet == holder
    # The second fleet started nothing before the holder said the run directory is shared.
    by_second = [e for e in of(run_dir, E.Started) if e.fleet == starts[1].fleet]
    assert all(e.t >= shared[0]["t"] for e in by_second)
    ends = [line.split()[1] for line in (run_dir / "evidence.txt").read_text().splitlines()
            if line.startswith("end ")]
    assert sorted(ends) == sorted(f"s/{i}" for i in range(16))  # each step ran to its end once
    assert not [line for line in (run_dir / "evidence.txt").read_text().splitlines() if line.startswith("overlap")]
    a = json.loads(fleet("audit", str(run_dir), "--json", cwd=tmp_path, timeout=60).stdout)
    assert a["ok"] and set(v["status"] for v in a["steps"].values()) == {"succeeded"}
    assert not (run_dir / ".fleet" / "lease").exists()
    assert_nothing_left(run_dir)
