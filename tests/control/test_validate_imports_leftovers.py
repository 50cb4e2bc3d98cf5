"""`fleet validate --imports` with preload modules whose import leaves a process running:
a child (tests/preload_forks_daemon.py) and a daemon in a session of its own
(tests/preload_leaves_daemon.py). Before 2026-12-07 validate waited for the importer's
pipes to close, which those processes held: a false "took longer than 120 s" after 120 s
for the child, and a hang for as long as the daemon lived. Real processes throughout."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from fleetharness import fleet, living, write_suite

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and subreapers: Linux")


def _daemons(where: Path) -> set[int]:
    return {int(p.read_text().split()[0]) for p in where.glob("*.pid")}


def test_validate_imports_answers_at_once_for_modules_that_leave_processes_and_ends_them_all(tmp_path):
    where = tmp_path / "daemons"
    where.mkdir()
    suite = write_suite(tmp_path / "s.toml", '[suite]\npreload = ["preload_forks_daemon", "preload_leaves_daemon"]\n'
                        '[[steps]]\nid = "a"\ncall = "json:dumps"\nargs = {obj = 1}\n')
    # (Well under the 120 s bound: before, this waited for the processes the imports left.)
    r = fleet("validate", "--imports", str(suite), cwd=tmp_path, timeout=60,
              environ={"FLEET_TEST_DAEMON_DIR": str(where)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "took longer" not in r.stderr
    deadline = time.monotonic() + 15
    while living(_daemons(where)):  # the daemon, if it got so far, was ended with the importer
        assert time.monotonic() < deadline, living(_daemons(where))
        time.sleep(0.05)


def test_a_daemon_an_import_left_is_ended_when_a_later_import_crashes_the_importer(tmp_path):
    # preload_leaves_daemon starts a daemon in a session of its own (and waits until it is
    # up); preload_crashes then kills the importing process with SIGSEGV. Before 2026-12-07
    # the importer, the subreaper that held the daemon below it, was gone, so the daemon
    # went to init and lived on: nothing was left to end it.
    where = tmp_path / "daemons"
    where.mkdir()
    suite = write_suite(tmp_path / "s.toml", '[suite]\npreload = ["preload_leaves_daemon", "preload_crashes"]\n'
                        '[[steps]]\nid = "a"\ncommand = "true"\n')
    r = fleet("validate", "--imports", str(suite), cwd=tmp_path, timeout=60,
              environ={"FLEET_TEST_DAEMON_DIR": str(where)})
    assert r.returncode != 0
    assert "preload_crashes" in r.stderr and "SIGSEGV" in r.stderr, r.stderr
    daemons = _daemons(where)
    assert daemons, "the daemon never started: the test proves nothing"
    deadline = time.monotonic() + 15
    while living(daemons):
        assert time.monotonic() < deadline, living(daemons)
        time.sleep(0.05)
    assert not list(tmp_path.glob("core*")), "a core file was left in the suite's directory"
