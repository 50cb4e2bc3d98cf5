"""A step the fleet stopped is never taken for done, whatever its exit status: a shell
that traps SIGTERM (or whose command the signal killed) goes on and may exit 0. Stopped
by `fleet down`, or by a job's end (SIGTERM from the batch system to every process, the
fleet's first as Slurm's pid order has it), such a step is interrupted: no done marker,
no attempt used, and the next run runs it (fleet.node.stopping.WITH_NODE,
fleet.node.jobend). Before 2026-12-06 it was recorded succeeded and skipped by every
later run (seen with scancel on the real Slurm)."""

from __future__ import annotations

from pathlib import Path

from fleetharness import (assert_nothing_left, events, finish, fleet, sigterm_like_the_batch_system, wait_for,
                          write_suite)
from fleetharness import records as event_records

from fleet.wire import events as E
from fleet.wire import records

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "5"]


def suite_of(tmp_path: Path) -> tuple[Path, Path]:
    """One step that runs until `flag` exists, and exits 0 when SIGTERM stops it."""
    flag = tmp_path / "flag"
    text = (f'[[steps]]\nid = "stubborn"\ncommand = "trap \'echo caught\' TERM; '
            f'test -e {flag} || {{ sleep 120 & wait $!; }}; echo done"\n')
    return write_suite(tmp_path / "s.toml", text), flag


def up_and_running(tmp_path: Path, started):
    run_dir = tmp_path / "run"
    suite, flag = suite_of(tmp_path)
    up = fleet("up", "--run-dir", str(run_dir), "--nodes", "1", *HB, cwd=tmp_path, timeout=60)
    assert up.returncode == 0, up.stdout + up.stderr
    runner = started("run", str(suite), "--run-dir", str(run_dir))
    wait_for(lambda: ("started", "stubborn") in {(e["kind"], e.get("step")) for e in events(run_dir)}, 60,
             "the step running")
    # (its shell set its trap and started its sleep: else the signal finds no trap yet)
    [shell] = [e["pid"] for e in events(run_dir) if e["kind"] == "started"]
    wait_for(lambda: _sleeps_of(shell), 30, "the step's sleep")
    return run_dir, suite, flag, runner


def _sleeps_of(shell: int) -> list[int]:
    """The shell's children that are its `sleep 120`, exec'd. (Not any command line that
    names "sleep 120": the shell's own does from its exec on, before its trap is set or
    its sleep forked, and other tests' steps run the same sleep.)"""
    import psutil
    out = []
    try:
        children = psutil.Process(shell).children()
    except psutil.Error:
        return out
    for c in children:
        try:
            if c.cmdline() == ["sleep", "120"]:
                out.append(c.pid)
        except psutil.Error:
            pass
    return out


def assert_interrupted_and_rerun(tmp_path: Path, run_dir: Path, suite: Path, flag: Path) -> None:
    recs = event_records(run_dir)
    exits = [e for e in recs if isinstance(e, E.Exit) and e.step == "stubborn"]
    assert [e.outcome for e in exits] == ["interrupted"], exits  # once, and not succeeded
    assert records.read_done(run_dir, "stubborn") is None
    assert records.attempts(run_dir, "stubborn") == []
    assert (run_dir / "steps" / "stubborn" / "log").read_text().splitlines()[-2:] == ["caught", "done"]
    assert_nothing_left(run_dir, tag=str(flag))
    flag.touch()
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", *HB, cwd=tmp_path, timeout=90)
    assert r.returncode == 0 and "1 succeeded" in r.stdout, r.stdout + r.stderr  # run again, not skipped


def test_a_step_that_exits_0_when_fleet_down_stops_it_is_interrupted_not_done(tmp_path, started):
    run_dir, suite, flag, runner = up_and_running(tmp_path, started)
    down = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert down.returncode == 0, down.stdout + down.stderr
    finish(runner, timeout=60)
    assert_interrupted_and_rerun(tmp_path, run_dir, suite, flag)


def test_a_step_that_exits_0_when_the_job_ends_is_interrupted_not_done(tmp_path, started):
    run_dir, suite, flag, runner = up_and_running(tmp_path, started)
    # The fleet's processes first (lower pids), then the step's, as Slurm signals them.
    sigterm_like_the_batch_system(run_dir, 0.05, fleet_first=True)
    code, out, err = finish(runner, timeout=60)
    assert code == 3, out + err
    wait_for(lambda: not (run_dir / "fleet.json").exists(), 30, "the coordinator to stop")
    assert_interrupted_and_rerun(tmp_path, run_dir, suite, flag)


def test_a_step_whose_command_the_warning_signal_killed_and_that_exits_0_is_interrupted_not_done(tmp_path, started):
    # Slurm's --signal=USR1@N without B: signals every process of the job's steps, the
    # deepest first: the step's command (the shell's sleep) dies of it, the shell goes on
    # and exits 0; its zygote, then its agent, get the signal next. Before 2026-12-06 that
    # exit was recorded succeeded (its dependents started) though the fleet drained.
    import os
    import signal

    run_dir, suite, flag, runner = up_and_running(tmp_path, started)
    try:
        ev = events(run_dir)
        [shell] = [e["pid"] for e in ev if e["kind"] == "started"]
        [(agent, zygote)] = [(e["pid"], e["zygote_pid"]) for e in ev if e["kind"] == "node_joined"]
        [sleep] = _sleeps_of(shell)
        log = run_dir / "steps" / "stubborn" / "log"
        # (Slurm signals the sleep a fraction of a millisecond before the zygote; here the
        # zygote first, so that a loaded machine cannot run the shell's exit in between.)
        os.kill(zygote, signal.SIGUSR1)
        try:
            os.kill(sleep, signal.SIGUSR1)
        except ProcessLookupError:
            pass  # the drain the zygote's word began stopped the step first (a quick machine)
        # The agent's own signal late (a loaded node): its zygote's word comes first.
        wait_for(lambda: log.read_text().splitlines()[-1] == "done", 30, "the shell to go on")
        os.kill(agent, signal.SIGUSR1)
        code, out, err = finish(runner, timeout=60)
        assert code == 3, out + err
        recs = event_records(run_dir)
        [exit_] = [e for e in recs if isinstance(e, E.Exit) and e.step == "stubborn"]
        assert exit_.outcome == "interrupted" and exit_.returncode == 0, exit_  # (or the drain stopped it first)
        assert ("the batch system's warning signal (SIGUSR1) reached it" in exit_.reason
                or "stopped by the drain" in exit_.reason), exit_
        [drained] = [e for e in recs if isinstance(e, E.Drained)]
        assert drained.reason.startswith("the batch system's warning signal (SIGUSR1) reached the agent"), drained
        assert records.read_done(run_dir, "stubborn") is None and records.attempts(run_dir, "stubborn") == []
    finally:
        down = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert down.returncode == 0, down.stdout + down.stderr
    assert_nothing_left(run_dir, tag=str(flag))
