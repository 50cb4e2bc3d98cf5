"""Choosing a node's memory-limit mechanism, on this machine's real cgroup files."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fleet.node import memlimit as M


def test_a_forced_watchdog_or_none_is_taken_as_said_and_an_unknown_value_falls_back_to_the_watchdog_saying_why():
    assert M.choose("watchdog").kind == M.WATCHDOG and M.choose("none").kind == M.NONE
    got = M.choose("cgroup3", tag=f"fleet-test.{os.getpid()}")
    assert got.kind == M.WATCHDOG and "FLEET_MEMLIMIT='cgroup3' is none of" in got.why
    assert got.describe().startswith("RSS watchdog (")


def test_a_step_s_cgroup_name_is_its_id_made_safe_plus_a_hash_and_its_attempt():
    assert M.cgroup_name("a/b c", 2) != M.cgroup_name("a_b_c", 2)
    assert M.cgroup_name("mesh/3", 1).startswith("mesh_3.") and M.cgroup_name("mesh/3", 1).endswith(".1")


def test_an_agent_s_cgroup_left_by_a_dead_agent_is_removed_when_the_next_agent_chooses_cgroup_v1():
    first = M.choose("cgroup1", tag=f"fleet-test.{os.getpid()}")
    M.release(first)
    if first.kind != M.CGROUP1:
        pytest.skip(f"no writable cgroup v1 memory controller here: {first.why}")
    # A pid that is gone, from the process table, not read from the child's output (once
    # in CI that read "m14191": a closed markers.Writer's thread woke into the pipe that
    # took its number; fixed, see test_markers).
    p = subprocess.Popen([sys.executable, "-c", "pass"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert p.wait(timeout=30) == 0
    dead = p.pid
    own = os.path.dirname(first.root)
    stale = os.path.join(own, f"fleet.{dead}")
    os.makedirs(os.path.join(stale, M.cgroup_name("step", 1)))
    try:
        got = M.choose("cgroup1")
        M.release(got)
        assert got.kind == M.CGROUP1 and not os.path.exists(stale)
        assert not os.path.exists(got.root)
    finally:
        M.release(M.Choice(M.CGROUP1, stale))
