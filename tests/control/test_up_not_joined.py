"""`fleet up` whose agents do not join in time names the nodes that did not, and where
their output went (before 2026-12-06 it gave counts only)."""

from __future__ import annotations

import re

from fleetharness import assert_nothing_left, fleet, python


def test_a_fleet_whose_agents_do_not_join_in_time_names_the_nodes_that_did_not(tmp_path, monkeypatch):
    # Each zygote imports its preload before its agent may join: a slow import holds both back.
    monkeypatch.setenv("FLEET_TEST_IMPORT_SLEEP", "60")
    run_dir = tmp_path / "run"
    r = fleet("up", "--run-dir", str(run_dir), "--nodes", "2", "--preload", "preload_slow", "--timeout", "2.5",
              cwd=tmp_path, timeout=90)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    # The timeout as given (before 2026-12-06: "3 s"), and what may hold them back.
    assert "only 0 of 2 agents joined within 2.5 s; not joined: node1, node2" in out, out
    assert (f"(their output: {run_dir / 'agents'}/<node>.log) (their zygotes may still be importing the preloads "
            "preload_slow: raise fleet up --timeout)") in out, out
    assert_nothing_left(run_dir)


def test_fleet_run_gives_its_embedded_fleet_the_timeout_it_is_given_and_names_the_option(tmp_path, monkeypatch):
    # Before 2026-12-06 an embedded fleet waited a fixed 120 s for its zygotes' preloads.
    monkeypatch.setenv("FLEET_TEST_IMPORT_SLEEP", "60")
    suite = tmp_path / "s.toml"
    suite.write_text('[suite]\nname = "slow"\npreload = ["preload_slow"]\n[[steps]]\nid = "a"\ncommand = "true"\n')
    run_dir = tmp_path / "run"
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--timeout", "2.5", cwd=tmp_path, timeout=90)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "only 0 of 1 agents joined within 2.5 s" in out, out
    assert "(their zygotes may still be importing the preloads preload_slow: an embedded fleet waits 2.5 s: " \
           "raise fleet run --timeout)" in out, out
    assert_nothing_left(run_dir)


def test_agents_told_an_address_they_cannot_reach_are_said_to_have_been_told_it_with_the_option_to_choose_another(
        tmp_path):
    # The coordinator as a job's listens on every interface and advertises 192.0.2.1
    # (TEST-NET-1: nobody's), where its agents on this host cannot reach it.
    run_dir = tmp_path / "run"
    r = python("-m", "fleet.control.coordinator", "--run-dir", str(run_dir), "--nodes", "2", "--bind", "0.0.0.0",
               "--advertise", "192.0.2.1", "--join-timeout", "3", cwd=tmp_path, timeout=90)
    out = r.stdout + r.stderr
    assert r.returncode == 3, out
    line = next(x for x in out.splitlines() if "only 0 of 2 agents joined within 3 s" in x)
    assert re.search(r"; the agents were told to reach the coordinator at tcp://192\.0\.2\.1:\d+: if they started "
                     r"but cannot reach it, give fleet up --advertise ADDR \(or FLEET_ADVERTISE\) an address of "
                     r"this host the nodes can reach$", line), line
    assert_nothing_left(run_dir)
