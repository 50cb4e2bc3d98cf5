"""A launch the coordinator cannot make or encode, for a reason fleet did not foresee (a
bug), fails its step: it no longer stays "running" with no process behind it while the
run waits for ever (fleet.control.launching.bug). Two such causes were found and are
refused up front now (a path that is not UTF-8, a TOML date in a step's args); this
injects one into a real coordinator process, whose agents, zygotes and clients are the
real ones."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from fleetharness import assert_nothing_left, env, events, fleet, wait_for

FAULTY = """
import sys
from fleet.control import launching
real = launching.launch
def launch(profile, spec, d, *args, **kw):
    if d.step == "boom":
        raise TypeError("injected: this launch cannot be encoded")
    return real(profile, spec, d, *args, **kw)
launching.launch = launch
from fleet.control.coordinator_cli import main
sys.exit(main(sys.argv[1:]))
"""

SUITE = """\
[[steps]]
id = "boom"
command = "true"

[[steps]]
id = "after"
command = "true"
deps = ["boom"]

[[steps]]
id = "ok"
command = "echo ok > out.txt"
"""


def test_a_launch_that_fails_for_an_unforeseen_reason_fails_its_step_and_the_run_ends(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    (tmp_path / "s.toml").write_text(SUITE)
    argv = [sys.executable, "-P", "-c", FAULTY, "--run-dir", str(run_dir), "--nodes", "1", "--machine", "local",
            "--join-timeout", "60"]
    with open(run_dir / "coordinator.log", "ab") as log:
        coordinator = subprocess.Popen(argv, cwd=tmp_path, env=env(), stdout=subprocess.DEVNULL, stderr=log,
                                       start_new_session=True)
    try:
        wait_for(lambda: (run_dir / "fleet.json").exists() or coordinator.poll() is not None, 60, "the fleet to be up")
        assert coordinator.poll() is None, (run_dir / "coordinator.log").read_text()
        r = fleet("run", "s.toml", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert r.returncode == 1, (r.stdout, r.stderr)
        exits = {e["step"]: e for e in events(run_dir) if e["kind"] == "exit"}
        assert exits["boom"]["outcome"] == "failed", exits["boom"]
        assert exits["boom"]["reason"] == "fleet could not launch it: TypeError: injected: this launch cannot be encoded"
        assert exits["ok"]["outcome"] == "succeeded" and "after" not in exits
        assert [e["step"] for e in events(run_dir) if e["kind"] == "blocked"] == ["after"]
        log = (run_dir / "coordinator.log").read_text()
        assert log.count("launching failed") == 1 and "TypeError: injected" in log, log[-2000:]
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        try:
            coordinator.wait(timeout=30)
        finally:
            if coordinator.poll() is None:
                os.killpg(coordinator.pid, signal.SIGKILL)
                coordinator.wait(timeout=30)
    assert coordinator.returncode == 0
    assert_nothing_left(run_dir)
