"""A coordinator that cannot read a submitted suite file for a reason of its own (no
descriptor left: its open-file limit lowered under it, as an admin's `prlimit` or a
leak would) answers with the fleet's error, not the suite's: nothing of the suite was
judged, and it is no SubmitError (fleet run exits 1, not 2's "problems found"). A real
fleet up, its real coordinator's limit lowered with prlimit(2), a real client."""

from __future__ import annotations

import os
import resource

import pytest

from fleetharness import assert_nothing_left, fleet, write_suite

import fleet as F
from fleet.control.api import SubmitFault


def _lowest_free_fd(pid: int) -> int:
    used = {int(n) for n in os.listdir(f"/proc/{pid}/fd")}
    return next(i for i in range(len(used) + 1) if i not in used)


def test_a_suite_the_coordinator_cannot_open_for_want_of_descriptors_is_the_fleets_error_not_an_invalid_suite(
        tmp_path):
    suite = write_suite(tmp_path / "s9.toml", '[[steps]]\nid = "a"\ncommand = "true"\n')
    run_dir = tmp_path / "run"
    fleet("up", "--local", "--nodes", "1", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=60)
    try:
        f = F.connect(run_dir)
        try:
            f.status()  # (connected: the coordinator needs no new descriptor for this client's requests)
            pid = f.conn.pid
            soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (_lowest_free_fd(pid), hard))  # (no new fd opens)
            try:
                with pytest.raises(SubmitFault) as e:
                    f.submit(str(suite))
            finally:
                resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
            said = str(e.value)
            assert said.startswith(f"the fleet could not read {suite}: "), said
            assert "Too many open files" in said and "the suite was not judged" in said, said
            assert not isinstance(e.value, F.SubmitError)
            assert f.submit(str(suite)).steps == 1  # (the same suite, read now: it was never invalid)
        finally:
            f.close()
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)
