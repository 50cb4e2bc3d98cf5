"""`fleet up` whose agents do not join in time names the nodes that did not, and where
their output went (before 2026-12-06 it gave counts only)."""

from __future__ import annotations

from fleetharness import assert_nothing_left, fleet


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
