"""A step's end that cannot be recorded (its final record's write raises: a full or
failing disk under a shared run directory, or a bug) still ends it for the run: `fleet
run` gets its outcome and exits, where it used to wait for ever (the run heard of the
end only after the record was written). Injected into a real coordinator process; the
agents, zygotes and client are the real ones."""

from __future__ import annotations

from fleetharness import three_steps, LOOP_ERROR, coordinator_with, events, fleet, fleet_pids, living, wait_for

FAULTY = """
from fleet.control import recording
def final(self, step, outcome, record):
    raise OSError(28, "injected: No space left on device")
recording.Recorder.final = final
"""

SUITE = three_steps("bad", "exit 3")


def test_a_final_record_that_cannot_be_written_does_not_leave_the_run_waiting(tmp_path):
    run_dir = tmp_path / "run"
    (tmp_path / "s.toml").write_text(SUITE)
    with coordinator_with(FAULTY, tmp_path, run_dir):
        r = fleet("run", "s.toml", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert "1 blocked, 1 failed, 1 succeeded" in r.stdout, r.stdout
        kinds = {(e["kind"], e.get("step")) for e in events(run_dir)}
        assert ("blocked", "after") in kinds and ("exit", "bad") in kinds, kinds
        log = (run_dir / "coordinator.log").read_text()
        # Logged once (the loop's guard: fleet.control.transport.error), and the loop went on.
        assert log.count(LOOP_ERROR) == 1 and "injected: No space left on device" in log, log[-2000:]
    # (assert_nothing_left's process check: the loop error it also looks for is this test's own)
    wait_for(lambda: not living(fleet_pids(run_dir)), 15, "every process of the fleet to end")
