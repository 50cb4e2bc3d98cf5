"""A launch the coordinator cannot make or encode, for a reason fleet did not foresee (a
bug), fails its step: it no longer stays "running" with no process behind it while the
run waits for ever (fleet.control.launching.bug). Two such causes were found and are
refused up front now (a path that is not UTF-8, a TOML date in a step's args); this
injects one into a real coordinator process, whose agents, zygotes and clients are the
real ones."""

from __future__ import annotations

from fleetharness import three_steps, assert_nothing_left, coordinator_with, events, fleet

FAULTY = """
from fleet.control import launching
real = launching.launch
def launch(profile, spec, d, *args, **kw):
    if d.step == "boom":
        raise TypeError("injected: this launch cannot be encoded")
    return real(profile, spec, d, *args, **kw)
launching.launch = launch
"""

SUITE = three_steps("boom", "true")


def test_a_launch_that_fails_for_an_unforeseen_reason_fails_its_step_and_the_run_ends(tmp_path):
    run_dir = tmp_path / "run"
    (tmp_path / "s.toml").write_text(SUITE)
    with coordinator_with(FAULTY, tmp_path, run_dir) as coordinator:
        r = fleet("run", "s.toml", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert r.returncode == 1, (r.stdout, r.stderr)
        exits = {e["step"]: e for e in events(run_dir) if e["kind"] == "exit"}
        assert exits["boom"]["outcome"] == "failed", exits["boom"]
        assert exits["boom"]["reason"] == "fleet could not launch it: TypeError: injected: this launch cannot be encoded"
        assert exits["ok"]["outcome"] == "succeeded" and "after" not in exits
        assert [e["step"] for e in events(run_dir) if e["kind"] == "blocked"] == ["after"]
        log = (run_dir / "coordinator.log").read_text()
        assert log.count("launching failed") == 1 and "TypeError: injected" in log, log[-2000:]
    assert coordinator.returncode == 0
    assert_nothing_left(run_dir)


CLAIM_FAILS = """
from fleet.control import recording
real = recording.Recorder.claim
def claim(self, d, spec):
    if d.step == "boom":
        raise NotADirectoryError(20, "Not a directory", "steps/boom/.fleet")
    return real(self, d, spec)
recording.Recorder.claim = claim
"""


def test_a_start_whose_records_cannot_be_made_fails_its_step_with_the_error_and_the_run_ends(tmp_path):
    # As a child named "log" did (its directory was its parent's log file): the claim's
    # mkdir raised, the error was only counted, and the step stayed "running" for good.
    run_dir = tmp_path / "run"
    (tmp_path / "s.toml").write_text(SUITE)
    with coordinator_with(CLAIM_FAILS, tmp_path, run_dir) as coordinator:
        r = fleet("run", "s.toml", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert r.returncode == 1, (r.stdout, r.stderr)
        exits = {e["step"]: e for e in events(run_dir) if e["kind"] == "exit"}
        assert exits["boom"]["outcome"] == "failed", exits["boom"]
        assert exits["boom"]["reason"] == ("fleet could not start it: NotADirectoryError: [Errno 20] Not a directory: "
                                           "'steps/boom/.fleet'")
        assert "failed     boom: fleet could not start it: NotADirectoryError" in r.stdout, r.stdout
        assert exits["ok"]["outcome"] == "succeeded" and "after" not in exits
        log = (run_dir / "coordinator.log").read_text()
        assert log.count("launching failed") == 1 and "NotADirectoryError" in log, log[-2000:]
    assert coordinator.returncode == 0
    assert_nothing_left(run_dir)
