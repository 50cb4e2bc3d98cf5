"""What the drain makes of the steps it finds, through the real CLI and real processes:
a step that timed out, or that `fleet cancel` stopped, before the drain keeps its
outcome (not interrupted); a step's grace after the drain point is no part of the time
it ran (fleet.control.stuck); the drain's SIGKILL comes before the allocation's end
however long a step's grace (fleet.core.deadline), with a warning. Each test checks the
process table afterwards."""

from __future__ import annotations

import re
from pathlib import Path

from fleetharness import assert_nothing_left, events, finish, fleet, spawn, wait_for, write_suite
from fleetharness import records as event_records

from fleet.wire import events as E
from fleet.wire import records

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "5"]
# A step that ignores SIGTERM: only its SIGKILL ends it. Tagged with the test's directory
# (its argv), so that the process table can be searched for it.
STUBBORN = ('["python3", "-c", "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); '
            'time.sleep(100)", "{tag}"]')


def exits(run_dir: Path, step: str) -> list[E.Exit]:
    return [e for e in event_records(run_dir) if isinstance(e, E.Exit) and e.step == step]


def allocation_end(run_dir: Path) -> E.AllocationEnd:
    [end] = [e for e in event_records(run_dir) if isinstance(e, E.AllocationEnd)]
    return end


def test_a_step_that_timed_out_before_the_drain_ends_timed_out_an_attempt_and_is_sigkilled_before_the_end(tmp_path):
    # Its timeout (4 s) came before the drain point (12 s in): it was stopped for that,
    # and its grace (30 s) runs past the drain point and the end (24 s in). It ends
    # timed_out, an attempt (retried by the next run: it has a retry left), not
    # interrupted; and the drain cuts its grace so that its SIGKILL comes before the end.
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", f"""
[[steps]]
id = "stub"
command = {STUBBORN.format(tag=tmp_path)}
timeout = 4
grace = 30
retries = 1
""")
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "24",
              "--drain-before", "12", *HB, cwd=tmp_path, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr  # the retry is left for the next run
    [ex] = exits(run_dir, "stub")
    assert ex.outcome == "timed_out" and ex.reason.startswith("timed out after 4 s; SIGKILL after "), ex
    assert [a["outcome"] for a in records.attempts(run_dir, "stub")] == ["timed_out"]
    assert re.search(r"not_started stub", r.stdout), r.stdout
    assert ex.t < allocation_end(run_dir).end, "its SIGKILL came after the allocation's end"
    assert_nothing_left(run_dir, tag=str(tmp_path))


def test_a_step_fleet_cancel_stopped_before_the_drain_ends_cancelled_not_interrupted(tmp_path, background):
    # Cancelled 2 s in, its grace (8 s) runs past the drain point (8 s in): it ends
    # cancelled, as asked (interrupted, it ran again in the next run).
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", f'[[steps]]\nid = "stub"\ncommand = {STUBBORN.format(tag=tmp_path)}\n'
                                             'grace = 8\n')
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "30", "--drain-before", "22", *HB,
          cwd=tmp_path, check=True, timeout=60)
    try:
        runner = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
        background.append(runner)
        wait_for(lambda: any(e["kind"] == "started" for e in events(run_dir)), 60, "stub started")
        r = fleet("cancel", "stub", "--run-dir", str(run_dir), cwd=tmp_path, timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
        code, out, err = finish(runner, timeout=90)
        assert any(e["kind"] == "drained" for e in events(run_dir)), "the drain came while it was being cancelled"
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
    assert code == 1, out + err
    [ex] = exits(run_dir, "stub")
    assert ex.outcome == "cancelled", ex
    assert "cancelled  stub" in out, out
    assert records.read_final(run_dir, "stub")["outcome"] == "cancelled"
    assert_nothing_left(run_dir, tag=str(tmp_path))


def test_a_step_that_started_late_is_not_judged_by_its_grace_after_the_drain_point(tmp_path):
    # `late` starts after first's 3 s, runs to the drain point (12 s before a 24-s end)
    # and then takes its 6 s grace: it ran well under 90 % of the window before the drain,
    # so another job like this one may finish it (exit 3), though its exit came after
    # more than the window (counted so, it "needed a longer allocation": exit 1).
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", f"""
[[steps]]
id = "first"
command = "sleep 3"
[[steps]]
id = "late"
deps = ["first"]
command = {STUBBORN.format(tag=tmp_path)}
grace = 6
""")
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "24",
              "--drain-before", "12", *HB, cwd=tmp_path, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    [ex] = exits(run_dir, "late")
    assert ex.outcome == "interrupted" and "needs a longer allocation" not in ex.reason, ex
    assert "no allocation as long as this one" not in r.stderr, r.stderr
    assert records.attempts(run_dir, "late") == []
    assert_nothing_left(run_dir, tag=str(tmp_path))


def test_the_drain_sigkills_a_step_with_a_long_grace_before_the_allocations_end_and_warns_of_it(tmp_path):
    # A grace of 25 s from a drain point 10 s before the end: uncut, its SIGKILL came 15 s
    # after the end, when the batch system has killed the job (and fleet run with it).
    run_dir = tmp_path / "run"
    # (It starts after `first`'s 3 s: it has not had nearly all of the 10-s window when the
    # drain stops it, so the rerun is another allocation's, exit 3, not "needs a longer one".)
    suite = write_suite(tmp_path / "s.toml", '[[steps]]\nid = "first"\ncommand = "sleep 3"\ngrace = 1\n'
                                             f'[[steps]]\nid = "stub"\ncommand = {STUBBORN.format(tag=tmp_path)}\n'
                                             'grace = 25\ndeps = ["first"]\n')
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "20",
              "--drain-before", "10", *HB, cwd=tmp_path, timeout=120)
    [ex] = exits(run_dir, "stub")
    assert ex.t < allocation_end(run_dir).end, "its SIGKILL came after the allocation's end"
    assert ex.outcome == "interrupted", ex
    said = "1 step (the longest: stub, 25 s) with a grace longer than the drain leaves"
    assert r.stderr.count(said) == 1, r.stderr
    assert said in (run_dir / "coordinator.log").read_text()
    assert r.returncode == 3, r.stdout + r.stderr
    assert_nothing_left(run_dir, tag=str(tmp_path))


def test_no_word_of_the_grace_when_every_step_has_a_grace_the_drain_leaves_it(tmp_path):
    suite = write_suite(tmp_path / "s.toml", '[[steps]]\nid = "a"\ncommand = "true"\ngrace = 2\n')
    r = fleet("run", str(suite), "--run-dir", str(tmp_path / "run"), "--nodes", "1", "--walltime", "60",
              "--drain-before", "10", *HB, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "fleet: warning:" not in r.stderr and "grace longer" not in r.stderr, r.stderr


def test_a_drain_cut_grace_is_said_as_the_grace_the_step_had(tmp_path):
    from fleet.node.stopping import given_grace

    class Step:
        term_at, kill_at = 100.0, 112.21

    assert given_grace(Step(), 30.0) == 12.2
    Step.term_at = None
    assert given_grace(Step(), 30.0) == 30.0
