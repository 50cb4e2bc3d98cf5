"""Run directories written by earlier versions of fleet, rerun by this one (docs/operations.md,
"Upgrading"). Real fleets of this version on real run directories that earlier versions
wrote; nothing in them is edited.

The fixtures in data/ were made on 2026-12-05 by the versions they are named after
(`git archive <commit> fleet agents`, then `python -m fleet run SUITE --nodes N` from
that tree), then packed with their agents' logs left out:

- done-run-3b05dc5.tar.gz: the first coordinator (2026-11-30) ran UPGRADE_SUITE to its
  end; `bad` failed (the file it tests for was missing). Done markers only: no journal.
- crashed-run-<commit>.tar.gz: a207d4b (2026-11-30 23:45, the first journal) and 6a44586
  (2026-12-03) ran CRASH_SUITE on 2 pretend nodes and their coordinator was killed
  (SIGKILL) once 6 steps had exited: the lease still held by the dead fleet, the journal
  unsealed, and one success's done marker still owed by the journal (5 markers written).
"""

from __future__ import annotations

import tarfile
import time
from collections import Counter
from pathlib import Path

import pytest

from fleetharness import fleet, living, records, sessions, write_suite

from fleet.wire import events as E

DATA = Path(__file__).parent / "data"

UPGRADE_SUITE = """
[suite]
name = "xv"
run_dir = "run"

[[steps]]
id = "mesh"
command = "echo mesh > mesh.txt"

[[steps]]
id = "fwd/{i}"
array = "1-4"
command = "echo fwd {i} > out.txt"
deps = ["mesh"]

[[steps]]
id = "bad"
command = "test -e ../../ok"
deps = ["mesh"]

[[steps]]
id = "analysis"
command = "echo done > a.txt"
deps = ["fwd/1", "fwd/2", "fwd/3", "fwd/4"]
"""

CRASH_SUITE = """
[suite]
name = "slow"
run_dir = "run"

[[steps]]
id = "s/{i}"
array = "1-20"
command = "sleep 0.3; echo {i} > out.txt"
"""


def unpack(name: str, into: Path) -> Path:
    with tarfile.open(DATA / name) as t:
        # (Our own fixtures; the filter where this Python has it, PEP 706.)
        t.extractall(into, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return into / "run"


def assert_none_left(session: list, timeout: float = 15.0) -> None:
    """No process this session's fleet started is alive (the old session's pids are
    another machine's, and may name anything here)."""
    pids = {e.pid for e in session if isinstance(e, (E.FleetStarting, E.Started))}
    pids |= {p for e in session if isinstance(e, E.NodeJoined) for p in (e.pid, e.zygote_pid)}
    pids.discard(0)
    assert pids, "the session recorded no pids: the test would prove nothing"
    deadline = time.monotonic() + timeout
    while (left := living(pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, "processes outlived the fleet:\n" + "\n".join(left)


def test_a_run_directory_the_first_coordinator_finished_is_rerun_skipping_what_succeeded(tmp_path):
    run_dir = unpack("done-run-3b05dc5.tar.gz", tmp_path)
    suite = write_suite(tmp_path / "suite.toml", UPGRADE_SUITE)
    (old,) = sessions(run_dir)
    assert Counter(e.outcome for e in old if isinstance(e, E.Exit)) == {"succeeded": 6, "failed": 1}
    (run_dir / "ok").touch()  # what `bad` looks for: it succeeds this time
    r = fleet("run", str(suite), "--nodes", "1", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    new = sessions(run_dir)[-1]
    done = ["analysis", "fwd/1", "fwd/2", "fwd/3", "fwd/4", "mesh"]
    assert sorted(e.step for e in new if isinstance(e, E.Skipped)) == done
    assert [(e.step, e.outcome) for e in new if isinstance(e, E.Exit)] == [("bad", "succeeded")]
    a = fleet("audit", str(run_dir), cwd=tmp_path, timeout=60)
    assert a.returncode == 0 and a.stdout.strip().splitlines()[-1] == "7 succeeded", a.stdout + a.stderr
    assert_none_left(new)


@pytest.mark.parametrize("version", ["a207d4b", "6a44586"])
def test_a_run_directory_whose_older_fleet_was_killed_is_taken_over_and_finished_each_step_once(tmp_path, version):
    run_dir = unpack(f"crashed-run-{version}.tar.gz", tmp_path)
    suite = write_suite(tmp_path / "suite.toml", CRASH_SUITE)
    (old,) = sessions(run_dir)
    ended = sorted(e.step for e in old if isinstance(e, E.Exit) and e.outcome == "succeeded")
    assert len(ended) == 6 and not any(isinstance(e, E.FleetDown) for e in old)
    assert len(list(run_dir.glob("steps/s/*/.fleet/done.json"))) == 5  # one owed by the journal only
    # --stale-after 1: the dead fleet's lease names its own host and pid, which on another
    # machine are not known dead; its refresh time is long past either way.
    r = fleet("run", str(suite), "--nodes", "2", "--stale-after", "1", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    new = sessions(run_dir)[-1]
    everything = [f"s/{i}" for i in range(1, 21)]
    assert sorted(e.step for e in new if isinstance(e, E.Skipped)) == ended
    ran = [e.step for e in new if isinstance(e, E.Exit) and e.outcome == "succeeded"]
    assert sorted(ran) == sorted(set(everything) - set(ended)) and len(ran) == len(set(ran))
    # Over both fleets: every step succeeded once, and every marker is on disk.
    both = Counter(e.step for e in records(run_dir) if isinstance(e, E.Exit) and e.outcome == "succeeded")
    assert both == Counter(everything)
    assert len(list(run_dir.glob("steps/s/*/.fleet/done.json"))) == 20
    a = fleet("audit", str(run_dir), cwd=tmp_path, timeout=60)
    assert a.returncode == 0 and a.stdout.strip().splitlines()[-1] == "20 succeeded", a.stdout + a.stderr
    assert_none_left(new)


def _tuned(text: str) -> str:
    """The suite with every step's estimate changed (a scheduling field: not what it does)."""
    return text.replace('run_dir = "run"\n', 'run_dir = "run"\n\n[defaults]\nestimate = 7.5\n', 1)


@pytest.mark.parametrize("fixture", ["done-run-3b05dc5", "crashed-run-6a44586"])
def test_a_step_an_older_version_finished_is_still_skipped_once_a_scheduling_field_changes(tmp_path, fixture):
    # (skipped through the old hash, its marker kept it: the first estimate tuned after the
    # upgrade ran again every step an older version had finished)
    run_dir = unpack(f"{fixture}.tar.gz", tmp_path)
    text = UPGRADE_SUITE if fixture.startswith("done") else CRASH_SUITE
    (run_dir / "ok").touch()  # (3b05dc5's `bad` succeeds this time)
    suite = write_suite(tmp_path / "suite.toml", text)
    r = fleet("run", str(suite), "--nodes", "2", "--stale-after", "1", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    skipped = sorted(e.step for e in sessions(run_dir)[-1] if isinstance(e, E.Skipped))
    assert len(skipped) >= 5, r.stdout
    tuned = write_suite(tmp_path / "tuned.toml", _tuned(text))
    r = fleet("run", str(tuned), "--nodes", "2", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    new = sessions(run_dir)[-1]
    assert [e.step for e in new if isinstance(e, E.Exit)] == [], r.stdout
    everything = sorted(e.step for e in new if isinstance(e, E.StepDeclared))
    assert sorted(e.step for e in new if isinstance(e, E.Skipped)) == everything, r.stdout
    a = fleet("audit", str(run_dir), cwd=tmp_path, timeout=60)
    assert a.returncode == 0 and a.stdout.strip().splitlines()[-1] == f"{len(everything)} succeeded", a.stdout
    assert_none_left(new)
