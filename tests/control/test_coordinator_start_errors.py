"""A coordinator that cannot start for an OS error past the run directory's check (its
journal on a read-only mount, no descriptor left for its agents' pipes) says so in one
line of coordinator.log, naming the path and the errno, gives back the lease it took,
and exits 4 (a file system that cannot be written: `fleet run` exits 4 too, saying it is
read-only) or 2 (anything else: `fleet run` says the coordinator exited before the fleet
was up, exit 1). Before 2026-12-07 a traceback, exit 1, and .fleet/lease left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetharness import assert_nothing_left, completed, env, fleet, write_suite


def _one_step(tmp_path: Path) -> Path:
    return write_suite(tmp_path / "s.toml", '[[steps]]\nid = "a"\ncommand = "true"\n')


def test_a_journal_on_a_read_only_mount_is_one_log_line_exit_4_and_no_lease_left(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    suite, run_dir = _one_step(tmp_path), tmp_path / "run"
    r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    journals = run_dir / ".fleet" / "journal"
    r = subprocess.run(["mount", "--bind", str(journals), str(journals)], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {r.stderr.strip()}")
    try:
        r = subprocess.run(["mount", "-o", "remount,bind,ro", str(journals)], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 0, r.stderr
        r = fleet("run", str(suite), "--run-dir", str(run_dir), "--force", cwd=tmp_path, timeout=90)
    finally:
        subprocess.run(["umount", "-l", str(journals)], capture_output=True, timeout=30)
    assert r.returncode == 4, r.stdout + r.stderr
    assert "read-only file system; make it writable" in r.stderr and "is full" not in r.stderr, r.stderr
    log = (run_dir / "coordinator.log").read_text()
    assert "Traceback" not in log and "Traceback" not in r.stderr, log
    assert f"cannot start: {journals}/" in log and "Read-only file system (errno 30, EROFS)" in log, log
    assert not (run_dir / ".fleet" / "lease").exists()
    assert_nothing_left(run_dir)


def test_a_coordinator_out_of_descriptors_as_it_launches_its_agents_says_so_and_leaves_no_lease(tmp_path):
    suite, run_dir = _one_step(tmp_path), tmp_path / "run"
    argv = ["sh", "-c", f'ulimit -n 24 && exec "{sys.executable}" -m fleet run "{suite}" --run-dir "{run_dir}"']
    r = completed(argv, timeout=90, cwd=tmp_path, env=env(), text=True)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "the coordinator exited with status 2 before the fleet was up" in r.stderr, r.stderr
    log = (run_dir / "coordinator.log").read_text()
    assert "Traceback" not in log and "Traceback" not in r.stderr, log
    assert "Too many open files (errno 24, EMFILE); raise the open-file limit" in log, log
    assert not (run_dir / ".fleet" / "lease").exists()
