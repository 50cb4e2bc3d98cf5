"""A submission held while the zygotes import its suite's preload is said: by `fleet
status` and by the `fleet run` that waits (before 2026-12-06: "steps: none submitted"
and silence). A real fleet, `fleet up` then `fleet run`, through the command line."""

from __future__ import annotations

from fleetharness import assert_nothing_left, finish, fleet, spawn, wait_for, write_suite

WAITING = "waiting for node1 to import preload_slow (the suite's preload) before its steps are submitted"


def test_a_submission_held_for_its_preload_is_said_by_fleet_status_and_by_the_waiting_fleet_run(
        tmp_path, monkeypatch):
    # Imported twice (a probe, then the zygote): held about 20 s, long enough to be seen.
    monkeypatch.setenv("FLEET_TEST_IMPORT_SLEEP", "10")
    run = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "slow"\npreload = ["preload_slow"]\n'
                        '[[steps]]\nid = "a"\ncommand = "true"\n')
    fleet("up", "--run-dir", str(run), cwd=tmp_path, check=True, timeout=60)
    try:
        p = spawn("run", str(suite), "--run-dir", str(run), cwd=tmp_path)
        try:
            held = wait_for(lambda: [line for line in fleet("status", "--run-dir", str(run), cwd=tmp_path,
                                                            timeout=30).stdout.splitlines()
                                     if line.startswith(f"  suite {suite}: held ")],
                            timeout=20, what="fleet status to say the suite is held")
            assert held[0].endswith(WAITING), held
        finally:
            rc, out, err = finish(p, timeout=120)
        assert rc == 0, out + err
        assert f"fleet: {WAITING}\n" in err, err
        status = fleet("status", "--run-dir", str(run), cwd=tmp_path, timeout=30).stdout
        assert f"suite {suite}: held" not in status and WAITING not in status, status
    finally:
        fleet("down", "--run-dir", str(run), cwd=tmp_path, timeout=60)
    assert_nothing_left(run)
