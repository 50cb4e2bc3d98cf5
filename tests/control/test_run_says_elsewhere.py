"""`fleet run` says when its suite's steps wait for another fleet that shares the run
directory and runs them (it holds their claims). Before 2026-12-07 it printed nothing
until they ended there: a second `fleet run` of a suite already running looked hung.
Two real fleets on one run directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from fleetharness import assert_nothing_left, env, events, finish, spawn, wait_for, write_suite

SAID = "of this suite runs in another fleet sharing this run directory"


def test_a_second_run_of_a_running_suite_says_its_step_waits_for_the_other_fleet(tmp_path):
    flag = tmp_path / "go"
    suite = write_suite(tmp_path / "s.toml", f'[suite]\nname = "shared"\nrun_dir = "run"\n'
                        f'[[steps]]\nid = "held"\ncommand = "for i in $(seq 1200); do test -e {flag} && exit 0; sleep 0.1; done; exit 1"\n')
    run = tmp_path / "run"
    first = spawn("run", str(suite), "--nodes", "1", cwd=tmp_path)
    second = None
    out = tmp_path / "second.out"
    try:
        wait_for(lambda: any(e.get("kind") == "started" and e.get("step") == "held" for e in events(run)),
                 timeout=60, what="the first fleet's start of the step")
        with open(out, "w") as f:
            second = subprocess.Popen([sys.executable, "-m", "fleet", "run", str(suite), "--nodes", "1"],
                                      cwd=tmp_path, env=env(), stdout=f, stderr=subprocess.STDOUT, text=True,
                                      start_new_session=True)
        wait_for(lambda: SAID in out.read_text(), timeout=60, what="the second run's line on the held step")
        assert second.poll() is None, out.read_text()  # (it says so while it waits, not at its end)
        flag.touch()
        rc, o, e = finish(first, timeout=90)
        assert rc == 0, o + e
        assert second.wait(timeout=90) == 0, out.read_text()
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=30)
    text = out.read_text()
    assert text.count(SAID) == 1, text
    assert "1 step of this suite runs" in text and "skipped    held" in text, text
    assert_nothing_left(run)
