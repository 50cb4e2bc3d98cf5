"""A step's end that cannot be recorded (its final record's write raises: a full or
failing disk under a shared run directory, or a bug) still ends it for the run: `fleet
run` gets its outcome and exits, where it used to wait for ever (the run heard of the
end only after the record was written). Injected into a real coordinator process; the
agents, zygotes and client are the real ones."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from fleetharness import LOOP_ERROR, env, events, fleet, fleet_pids, living, wait_for

FAULTY = """
import sys
from fleet.control import recording
def final(self, step, outcome, record):
    raise OSError(28, "injected: No space left on device")
recording.Recorder.final = final
from fleet.control.coordinator_cli import main
sys.exit(main(sys.argv[1:]))
"""

SUITE = """\
[[steps]]
id = "bad"
command = "exit 3"

[[steps]]
id = "after"
command = "true"
deps = ["bad"]

[[steps]]
id = "ok"
command = "true"
"""


def test_a_final_record_that_cannot_be_written_does_not_leave_the_run_waiting(tmp_path):
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
        assert "1 blocked, 1 failed, 1 succeeded" in r.stdout, r.stdout
        kinds = {(e["kind"], e.get("step")) for e in events(run_dir)}
        assert ("blocked", "after") in kinds and ("exit", "bad") in kinds, kinds
        log = (run_dir / "coordinator.log").read_text()
        # Logged once (the loop's guard: fleet.control.transport.error), and the loop went on.
        assert log.count(LOOP_ERROR) == 1 and "injected: No space left on device" in log, log[-2000:]
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        try:
            coordinator.wait(timeout=30)
        finally:
            if coordinator.poll() is None:
                os.killpg(coordinator.pid, signal.SIGKILL)
                coordinator.wait(timeout=30)
    # (assert_nothing_left's process check: the loop error it also looks for is this test's own)
    wait_for(lambda: not living(fleet_pids(run_dir)), 15, "every process of the fleet to end")
