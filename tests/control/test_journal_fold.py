"""Journals folded (fleet.control.fold), through real `fleet run` processes: many reruns
leave a bounded number of journal files while `fleet audit` still counts every attempt;
a coordinator killed with SIGKILL at each stage of the fold at start, or while it
rotates its own journal mid-run (into sealed segments, folded by the next lone fleet),
loses nothing and runs nothing twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from fleetharness import assert_nothing_left, env, fleet, write_suite

from fleet.control import fold
from fleet.wire import records

SUITE = """
[suite]
name = "fold"
[[steps]]
id = "s/{i}"
array = "1-6"
call = "fleet_steps:count_runs"
[[steps]]
id = "bad"
call = "fleet_steps:always_fails"
retries = 1
"""


@pytest.fixture(autouse=True)
def fold_at_every_start(monkeypatch):
    """These tests fold at every start that finds a sealed journal (FLEET_TEST_FOLD_FILES=1),
    but the one about when a start folds."""
    monkeypatch.setenv(fold.FOLD_FILES_ENV, "1")


def journal_files(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / records.JOURNALS).glob("*.jsonl"))


def runs(run_dir: Path) -> list[str]:
    p = run_dir / "runs.txt"
    return p.read_text().split() if p.exists() else []


def run(tmp_path: Path, suite: Path, extra_env: dict | None = None, run_dir: str = "run") -> subprocess.CompletedProcess:
    p = subprocess.Popen([sys.executable, "-m", "fleet", "run", str(suite), "--run-dir", str(tmp_path / run_dir),
                          "--nodes", "2", "--max-attempts", "0"], cwd=tmp_path, env={**env(), **(extra_env or {})},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate(timeout=30)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def audited(tmp_path: Path, run_dir: str = "run") -> dict:
    return json.loads(fleet("audit", str(tmp_path / run_dir), "--json", cwd=tmp_path, timeout=60).stdout)["steps"]


def test_many_reruns_leave_a_bounded_number_of_journal_files_and_every_attempt_is_still_counted(tmp_path):
    suite = write_suite(tmp_path / "s.toml", SUITE)
    run_dir = tmp_path / "run"
    for i in range(1, 6):
        r = run(tmp_path, suite)
        assert r.returncode == 1, r.stdout + r.stderr  # `bad` fails, twice per run
        assert len(journal_files(run_dir)) <= 2, journal_files(run_dir)  # the fold and the last run's
    assert fold.FOLDED in journal_files(run_dir)
    assert sorted(runs(run_dir)) == [f"s/{i}" for i in range(1, 7)]  # each once, skipped on every rerun
    a = audited(tmp_path)
    assert a["bad"]["attempts"] == 10 and a["bad"]["status"] == "failed"
    assert all(a[f"s/{i}"]["status"] == "succeeded" and a[f"s/{i}"]["successes"] == 1 for i in range(1, 7))
    assert_nothing_left(run_dir)


def test_a_start_folds_only_once_enough_sealed_journals_wait_and_every_attempt_is_counted_either_way(
        tmp_path, monkeypatch):
    """Folding at N sealed journals (fold.FOLD_FILES, here 3): the first N reruns leave
    their journals as they are (each start reads them; nothing is rewritten), the start
    that finds N folds them, and every attempt is counted throughout."""
    n = 3
    monkeypatch.setenv(fold.FOLD_FILES_ENV, str(n))
    suite = write_suite(tmp_path / "s.toml", SUITE)
    run_dir = tmp_path / "run"
    for i in range(1, n + 2):
        assert run(tmp_path, suite).returncode == 1  # `bad` fails, twice per run
        files = journal_files(run_dir)
        if i <= n:
            assert fold.FOLDED not in files and len(files) == i, files
            assert audited(tmp_path)["bad"]["attempts"] == 2 * i
    assert fold.FOLDED in files and len(files) == 2, files  # the fold, and the last run's
    a = audited(tmp_path)
    assert a["bad"]["attempts"] == 2 * (n + 1) and a["bad"]["status"] == "failed"
    assert all(a[f"s/{i}"]["successes"] == 1 for i in range(1, 7))
    assert sorted(runs(run_dir)) == [f"s/{i}" for i in range(1, 7)]
    assert_nothing_left(run_dir)


def test_the_fold_at_start_reads_the_journals_once_and_writes_what_a_second_read_would(tmp_path, monkeypatch):
    suite = write_suite(tmp_path / "s.toml", SUITE)
    for name in ("once", "twice"):  # sealed segments and the last journal, none folded yet
        assert run(tmp_path, suite, {fold.ROTATE_ENV: "1500"}, run_dir=name).returncode == 1
    folded = {}
    for name in ("once", "twice"):
        run_dir = tmp_path / name
        js = records.read_journals(run_dir)  # as the recorder reads them at start
        assert len(fold.foldable(js, set())) == len(js.each) >= 2, journal_files(run_dir)
        if name == "once":
            def no_second_read(*a, **kw):
                raise AssertionError("the journals were read again")
            monkeypatch.setattr(records, "read_journals", no_second_read)
            fold.at_start(run_dir, js, set(), [])
            monkeypatch.undo()
        else:
            assert fold.fold(run_dir / records.JOURNALS, fold.foldable(js, set()))  # reads them again
        assert journal_files(run_dir) == [fold.FOLDED]
        lines = (run_dir / records.JOURNALS / fold.FOLDED).read_text().splitlines()
        folded[name] = [x for x in lines if '"k":"sealed"' not in x and '"k":"fleet"' not in x]
    kinds = lambda lines: sorted(json.loads(x)["k"] for x in lines)  # noqa: E731  (two runs: ids and times differ)
    assert folded["once"] and kinds(folded["once"]) == kinds(folded["twice"])
    a = records.read_journals(tmp_path / "once")
    b = records.read_journals(tmp_path / "twice")
    assert sorted(a.attempts) == sorted(b.attempts) and sorted(a.outcome) == sorted(b.outcome)
    assert {s: len(t) for s, t in a.attempts.items()} == {s: len(t) for s, t in b.attempts.items()}


@pytest.mark.parametrize("stage", ["written", "renamed", "removed"])
def test_a_coordinator_killed_at_each_stage_of_the_fold_loses_no_attempt_and_runs_nothing_twice(tmp_path, stage):
    suite = write_suite(tmp_path / "s.toml", SUITE)
    run_dir = tmp_path / "run"
    for _ in range(2):
        assert run(tmp_path, suite).returncode == 1
    assert len(journal_files(run_dir)) == 2
    killed = run(tmp_path, suite, {fold.FAULT_ENV: stage})  # folds at start, killed on the way
    assert killed.returncode != 0 and runs(run_dir).count("s/1") == 1
    r = run(tmp_path, suite)
    assert r.returncode == 1, r.stdout + r.stderr
    assert sorted(runs(run_dir)) == [f"s/{i}" for i in range(1, 7)]
    a = audited(tmp_path)
    assert a["bad"]["attempts"] == 6  # two per completed run, none lost, none counted twice
    assert all(a[f"s/{i}"]["successes"] == 1 for i in range(1, 7))
    assert len(journal_files(run_dir)) <= 2, journal_files(run_dir)
    assert_nothing_left(run_dir)


def test_a_long_run_rotates_its_journal_into_sealed_segments_folded_by_the_next_run_and_a_kill_mid_rotation_loses_nothing(
        tmp_path):
    suite = write_suite(tmp_path / "s.toml", SUITE.replace('array = "1-6"', 'array = "1-40"'))
    small = {fold.ROTATE_ENV: "1500"}  # a few steps' lines
    r = run(tmp_path, suite, small, run_dir="quiet")
    assert r.returncode == 1, r.stdout + r.stderr
    # Rotated as it ran, and nothing folded meanwhile (fleet.control.fold.rotate): sealed
    # segments, each owing nothing, and the journal begun again; no fold yet.
    files = journal_files(tmp_path / "quiet")
    segments = [n for n in files if n != fold.FOLDED and n.count(".") == 2]
    assert fold.FOLDED not in files and len(segments) >= 2, files
    for name in segments:
        lines = [json.loads(x) for x in (tmp_path / "quiet" / records.JOURNALS / name).read_text().splitlines()]
        assert lines[-1]["k"] == "sealed" and lines[-1]["by"] == "itself", name
    a = audited(tmp_path, "quiet")
    assert all(a[f"s/{i}"]["successes"] == 1 and a[f"s/{i}"]["attempts"] == 1 for i in range(1, 41))
    assert a["bad"]["attempts"] == 2
    # The next run, alone, folds them all at its start, and runs nothing again.
    r = run(tmp_path, suite, run_dir="quiet")
    assert r.returncode == 1, r.stdout + r.stderr
    assert journal_files(tmp_path / "quiet")[0] == fold.FOLDED and len(journal_files(tmp_path / "quiet")) == 2
    assert sorted(runs(tmp_path / "quiet")) == sorted(f"s/{i}" for i in range(1, 41))
    a = audited(tmp_path, "quiet")
    assert all(a[f"s/{i}"]["successes"] == 1 and a[f"s/{i}"]["attempts"] == 1 for i in range(1, 41))
    assert a["bad"]["attempts"] == 4

    run_dir = tmp_path / "run"  # killed at its first rotation: the segment moved aside, no journal begun
    killed = run(tmp_path, suite, {**small, fold.FAULT_ENV: "rotate:moved"})
    assert killed.returncode != 0 and (run_dir / ".fleet" / "lease").exists(), killed.stderr  # never given back
    assert len(journal_files(run_dir)) == 1, journal_files(run_dir)  # the segment alone
    for _ in range(2):
        r = run(tmp_path, suite)
        assert r.returncode == 1, r.stdout + r.stderr
        assert len(journal_files(run_dir)) <= 2, journal_files(run_dir)
    counted = {s: runs(run_dir).count(s) for s in (f"s/{i}" for i in range(1, 41))}
    assert set(counted.values()) <= {1, 2}, counted
    a = audited(tmp_path)
    # The killed fleet's attempts with no end are recorded lost by the run that replayed its
    # journal (--max-attempts counts them), one at most per step, whether or not it began.
    lost = Counter(s for s, tries in records.read_journals(run_dir).attempts.items()
                   for rec in tries.values() if rec["outcome"] == "lost")
    assert set(lost.values()) <= {1}, lost
    for s, n in counted.items():  # recorded done once; ran again only if the kill took its outcome
        assert a[s]["successes"] == 1 and not a[s]["duplicates"] and a[s]["attempts"] - lost[s] in (1, n), \
            (s, n, a[s], lost[s])
    assert_nothing_left(run_dir)


def test_a_rotated_segment_is_sealed_only_after_every_marker_it_owes_is_on_disk(tmp_path):
    """Markers take 300 ms each to write (the test hook, on the nodes' agents) while the
    journal rotates every few steps: the segments are moved aside at once and sealed
    later (fleet.control.fold.rotate). From the recorded times: each segment's seal is
    later than the last change of every done marker its lines owe."""
    suite = write_suite(tmp_path / "s.toml", SUITE.replace('array = "1-6"', 'array = "1-24"'))
    r = run(tmp_path, suite, {fold.ROTATE_ENV: "1500", "FLEET_TEST_MARKER_SLEEP_MS": "300"})
    assert r.returncode == 1, r.stdout + r.stderr
    run_dir = tmp_path / "run"
    segments = [n for n in journal_files(run_dir) if n != fold.FOLDED and n.count(".") == 2]
    assert len(segments) >= 2, journal_files(run_dir)
    owed = 0
    for name in segments:
        lines = [json.loads(x) for x in (run_dir / records.JOURNALS / name).read_text().splitlines()]
        assert lines[-1]["k"] == "sealed" and lines[-1]["by"] == "itself", name
        for line in lines:
            if line["k"] == "done":
                owed += 1
                marker = records.fleet_dir(run_dir, line["step"]) / records.DONE
                assert marker.stat().st_mtime <= lines[-1]["t"], (name, line["step"])
    assert owed >= 12  # most of the successes were owed by segments
    assert_nothing_left(run_dir)
