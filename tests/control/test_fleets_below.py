"""`fleet status` and `fleet down` in the directory of a suite that `fleet run` is running
on its own embedded fleet (in the suite's run_dir, runs/<name>): they say where it is and
how to reach it, and `fleet down` that stopped nothing there exits 1, not 0.

Before 2026-12-06 status said only "no fleet is up in <dir>" and down "No fleet was up in
<dir>", exit 0, while the run went on (a laptop user's `fleet run suite.toml &`, then
`fleet status`, `fleet down`, as the README says)."""

from __future__ import annotations

import os
import signal

from fleetharness import assert_nothing_left, fleet, finish, spawn, wait_for

SUITE = """[suite]
name = "lap"
[[steps]]
id = "slow"
command = "test -e {flag} || sleep 120"
"""


def test_status_and_down_in_a_suites_directory_name_the_embedded_fleet_of_its_run_in_runs(tmp_path):
    flag = tmp_path / "go"
    (tmp_path / "suite.toml").write_text(SUITE.format(flag=flag))
    run_dir = tmp_path / "runs" / "lap"
    p = spawn("run", "suite.toml", cwd=tmp_path)
    try:
        wait_for(lambda: any(run_dir.glob("fleet-*.json")), timeout=90, what="the embedded fleet's connection file")
        r = fleet("status", cwd=tmp_path, timeout=60)
        assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
        assert (f"no fleet is up in {tmp_path}; a `fleet run`'s embedded fleet is up in runs/lap: "
                f"fleet status --run-dir runs/lap") in r.stderr, r.stderr
        r = fleet("status", "--run-dir", "runs/lap", cwd=tmp_path, timeout=60)  # (what it says to do works)
        assert r.returncode == 0 and "slow" in r.stdout, (r.returncode, r.stdout, r.stderr)
        r = fleet("down", cwd=tmp_path, timeout=60)
        assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
        assert (f"no fleet was up in {tmp_path}; a `fleet run`'s embedded fleet is up in runs/lap: "
                f"fleet down --run-dir runs/lap") in r.stderr, r.stderr
        assert p.poll() is None  # named, not stopped
        r = fleet("down", "--run-dir", "runs/lap", cwd=tmp_path, timeout=60)
        assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
        code, out, err = finish(p, timeout=90)
        assert code != 0, (code, out, err)  # (its fleet was stopped under it)
    finally:
        flag.touch()
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=30)
    assert_nothing_left(run_dir)
    # Nothing up here or below: as before, said and exit 0 (a job's clean-up may say it twice).
    r = fleet("down", cwd=tmp_path, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == f"no fleet was up in {tmp_path}", (r.returncode, r.stdout, r.stderr)
    r = fleet("status", cwd=tmp_path, timeout=60)
    assert r.returncode == 1 and r.stderr.strip() == f"Error: no fleet is up in {tmp_path}", r.stderr
