"""The allocation's end through the real CLI: a fleet that knows its end does not start
steps that would not end before the drain point, stops the running ones there
(interrupted: no attempt), starts nothing more, and `fleet run` exits 3; the next run
finishes the suite. The batch system's warning signal (SIGUSR1 to `fleet run`) drains
at once. `fleet status` and `fleet report` show the end."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from fleetharness import assert_nothing_left, events, finish, fleet, spawn, wait_for, write_suite
from fleetharness import records as event_records

from fleet.wire import events as E
from fleet.wire import records

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "5"]


def drain_suite(tmp_path: Path) -> tuple[Path, Path]:
    """quick fits; long's estimate does not fit; sleepy (no estimate) runs into the
    drain point until a flag file exists; after waits for sleepy. Sleepy starts after
    quick's 2 s: it has not had nearly all of a 10-s window when the drain stops it, so
    another job like this one could finish it (else exit 1: fleet.control.stuck.ran_out)."""
    flag = tmp_path / "flag"
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "walltime"
[[steps]]
id = "quick"
call = "fleet_steps:nap"
args = {{ seconds = 2 }}
estimate = 3
[[steps]]
id = "long"
command = "true"
estimate = 3600
[[steps]]
id = "sleepy"
command = "test -e {flag} || sleep 120"
deps = ["quick"]
[[steps]]
id = "after"
command = "true"
deps = ["sleepy"]
""")
    return suite, flag


def assert_drained_then_rerun(run_dir: Path, tmp_path: Path, suite: Path, flag: Path, reason: str) -> None:
    recs = event_records(run_dir)
    exits = {e.step: e for e in recs if isinstance(e, E.Exit)}
    assert exits["quick"].outcome == "succeeded"
    assert exits["sleepy"].outcome == "interrupted" and exits["sleepy"].reason.startswith("drained: "), exits
    assert reason in exits["sleepy"].reason, exits["sleepy"]
    assert "long" not in exits and "after" not in exits
    [drained] = [e for e in recs if isinstance(e, E.Drained)]
    assert drained.running == 1 and reason in drained.reason
    for s in ("sleepy", "long", "after"):
        assert records.attempts(run_dir, s) == []          # nothing counted as an attempt
        assert records.read_final(run_dir, s) is None      # nothing on disk stops a rerun
    assert not [e for e in recs if isinstance(e, (E.Retry, E.Blocked))]
    rep = json.loads(fleet("report", str(run_dir), "--json", cwd=tmp_path, timeout=60).stdout)
    assert rep["steps"]["sleepy"]["outcome"] == "interrupted"
    assert rep["allocation"]["drained"] and reason in rep["allocation"]["reason"], rep["allocation"]
    assert_nothing_left(run_dir, tag=str(flag))
    # The next run (no end this time) finishes the suite; one attempt each is enough.
    flag.touch()
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--max-attempts", "1", *HB,
              cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 already done" in r.stdout and "3 succeeded" in r.stdout, r.stdout
    for s in ("sleepy", "long", "after"):
        assert [a["outcome"] for a in records.attempts(run_dir, s)] == ["succeeded"], s
    assert_nothing_left(run_dir, tag=str(flag))


def test_a_fleet_with_a_walltime_skips_long_steps_interrupts_running_ones_at_the_drain_point_exits_3_and_the_rerun_finishes(
        tmp_path):
    run_dir = tmp_path / "run"
    suite, flag = drain_suite(tmp_path)
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "20s",
              "--drain-before", "10s", *HB, cwd=tmp_path, timeout=90)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "the allocation ended before the suite did: 3 steps interrupted or not started" in r.stderr, r.stderr
    assert "not_started long" in r.stdout and "interrupted sleepy" in r.stdout, r.stdout
    ev = events(run_dir)
    [end] = [e for e in ev if e["kind"] == "allocation_end"]
    assert end["source"] == "given" and end["end"] - end["drain_at"] == 10.0
    [w] = [e for e in ev if e["kind"] == "wait" and e["step"] == "long"]
    assert w["cause"] == "deadline" and w["reason"].startswith("expected to take 3600 s (estimate)"), w
    [ns] = [e for e in ev if e["kind"] == "not_started"]
    assert ns["steps"] == 2 and ns["held"] == 1
    [drained] = [e for e in ev if e["kind"] == "drained"]
    assert_report_shows_the_allocation(run_dir, tmp_path, end, drained)
    assert_drained_then_rerun(run_dir, tmp_path, suite, flag, "the drain point, 10 s before the end")


def assert_report_shows_the_allocation(run_dir: Path, tmp_path: Path, end: dict, drained: dict) -> None:
    """`fleet report`'s text: when the allocation ends and its drain point, and the drain,
    each at its time from the first submission (the report's t0)."""
    t0 = json.loads(fleet("report", str(run_dir), "--json", cwd=tmp_path, timeout=60).stdout)["t0"]
    r = fleet("report", str(run_dir), cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    n = r"(\d+(?:\.\d+)?) (ms|s|h)"
    m = re.search(rf"^  allocation    ends at {n} \(given\), drain point at {n} \(from the first submission\)$",
                  r.stdout, re.M)
    assert m, r.stdout
    assert in_seconds(m[1], m[2]) == pytest.approx(end["end"] - t0, abs=0.006), (m[0], end, t0)
    assert in_seconds(m[3], m[4]) == pytest.approx(end["drain_at"] - t0, abs=0.006), (m[0], end, t0)
    m = re.search(rf"^  drained       at {n}: (.*); 1 step interrupted, 2 steps not started "
                  r"\(1 would not have ended before the drain point\): the next run goes on$", r.stdout, re.M)
    assert m, r.stdout
    assert in_seconds(m[1], m[2]) == pytest.approx(drained["t"] - t0, abs=0.006), (m[0], drained, t0)
    assert m[3] == drained["reason"] and "the drain point, 10 s before the end" in m[3], m[0]


def in_seconds(number: str, unit: str) -> float:
    """A duration as fleet.report.text writes it (ms, s or h), in seconds."""
    return float(number) * {"ms": 0.001, "s": 1.0, "h": 3600.0}[unit]


def test_the_batch_systems_warning_signal_to_fleet_run_drains_at_once(tmp_path, background):
    run_dir = tmp_path / "run"
    suite, flag = drain_suite(tmp_path)
    # An end far off: only the warning drains; long's hour does not fit in it either. A
    # long heartbeat period: the signal ends the loop's wait, it does not wait for a beat.
    period = 30.0
    runner = spawn("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "40m",
                   "--heartbeat", str(period), "--heartbeat-timeout", "120", cwd=tmp_path)
    background.append(runner)
    # quick ended too: the signal drains at once (within a loop turn), quick's nap would be cut.
    wait_for(lambda: {("started", "sleepy"), ("exit", "quick")} <= {(e["kind"], e.get("step")) for e in events(run_dir)},
             60, "sleepy running, quick done")
    sent = time.time()
    os.kill(runner.pid, signal.SIGUSR1)  # as `#SBATCH --signal=B:USR1@300` and the job script's trap do
    code, out, err = finish(runner)
    assert code == 3, out + err
    [drained] = [e for e in events(run_dir) if e["kind"] == "drained"]
    assert drained["t"] - sent < period / 10, drained
    assert_drained_then_rerun(run_dir, tmp_path, suite, flag, "warning signal (SIGUSR1)")


def warned_run(tmp_path: Path, run_dir: Path, suite: Path, background) -> None:
    """`fleet run` of the suite on the fleet up in run_dir, in the background, as the job
    script starts it; once sleepy runs and quick is done, the warning (SIGUSR1) passed on
    to it: it exits 3."""
    runner = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
    background.append(runner)
    wait_for(lambda: {("started", "sleepy"), ("exit", "quick")} <= {(e["kind"], e.get("step")) for e in events(run_dir)},
             60, "sleepy running, quick done")
    os.kill(runner.pid, signal.SIGUSR1)
    code, out, err = finish(runner)
    assert code == 3, out + err


def test_the_warning_signal_to_fleet_run_reaches_a_fleet_brought_up_by_fleet_up_on_this_host(tmp_path, background):
    # The job script's shape: `fleet up`, then `fleet run` in the background, the trap
    # passing the batch shell's SIGUSR1 to it; the coordinator is another process here.
    run_dir = tmp_path / "run"
    suite, flag = drain_suite(tmp_path)
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "40m", *HB, cwd=tmp_path, check=True,
          timeout=60)
    try:
        warned_run(tmp_path, run_dir, suite, background)
        st = json.loads(fleet("status", "--run-dir", str(run_dir), "--json", cwd=tmp_path, timeout=30).stdout)
        assert st["allocation"]["drained"] and "warning signal (SIGUSR1)" in st["allocation"]["reason"], st
    finally:
        assert fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60).returncode == 0
    assert_drained_then_rerun(run_dir, tmp_path, suite, flag, "warning signal (SIGUSR1)")


def test_fleet_status_shows_when_the_allocation_ends_and_its_drain_point(tmp_path):
    run_dir = tmp_path / "run"
    before = time.time()
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "1h", "--drain-before", "10m", *HB,
          cwd=tmp_path, check=True, timeout=60)
    try:
        st = wait_for(lambda: json.loads(fleet("status", "--run-dir", str(run_dir), "--json", cwd=tmp_path,
                                               timeout=30).stdout).get("allocation"), 30, "the end in status")
        assert before + 3600 <= st["end"] <= time.time() + 3600 and st["end"] - st["drain_at"] == 600
        assert st["source"] == "given" and not st["drained"]
        text = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, timeout=30).stdout
        assert "allocation ends " in text and "(in 59m" in text and "drain point" in text, text
    finally:
        assert fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60).returncode == 0


def test_the_default_drain_margin_is_five_minutes_but_at_most_half_the_time_left_so_a_short_job_still_runs():
    from fleet.control.coordinator_cli import _end, parser
    now = time.time()
    end, before, source = _end(parser().parse_args(["--run-dir", "x", "--end", str(now + 180)]))
    assert source == "given" and 89 <= before <= 90
    assert _end(parser().parse_args(["--run-dir", "x", "--end", str(now + 7200)]))[1] == 300.0
    assert _end(parser().parse_args(["--run-dir", "x", "--end", str(now + 180), "--drain-before", "170"]))[1] == 170


def test_a_drain_margin_given_longer_than_the_time_left_drains_at_half_the_time_left_and_says_so(caplog):
    """A 2-minute job given --drain-before 5m (a resubmitting job script's) would start
    nothing and exit 3 at once, resubmitting jobs that do nothing."""
    from fleet.control.coordinator_cli import _end, parser
    now = time.time()
    with caplog.at_level("WARNING", logger="fleet.control.coordinator"):
        before = _end(parser().parse_args(["--run-dir", "x", "--end", str(now + 120), "--drain-before", "300"]))[1]
    assert 59 <= before <= 60
    assert "--drain-before 300 s is more than the" in caplog.text and "half the time left" in caplog.text


def test_slurms_warning_in_a_job_shorter_than_its_drain_margin_is_taken_at_the_drain_point():
    # (Slurm sends --signal=B:USR1@300 at the start of a 2-min job: the fleet drained 3 s
    # in, and slurm-resubmit.sbatch submitted job after job that did next to nothing)
    from fleet.control.coordinator_cli import _end, margin_cut, parser
    from fleet.control.drain import early_warning

    def warned(job_s: float, at: float, *drain_before: str) -> bool:
        """A warning `at` s into a job of `job_s` s, the drain margin as `fleet up` takes it."""
        began = time.time()
        args = parser().parse_args(["--run-dir", "x", "--end", str(began + job_s),
                                    *(("--drain-before", *drain_before) if drain_before else ())])
        end, before, _ = _end(args)
        return early_warning(began + at, end - before, margin_cut(args, end, before))

    assert warned(117, 3, "300")         # the script's 5 min in a 2-min job: drain point 58 s before the end
    assert warned(117, 24, "300")        # (Slurm's "up to 60 s" resolution: the audit's second job, 24 s in)
    assert warned(500, 30)               # the default 5 min, cut to half the time left
    assert not warned(117, 60, "300")    # at or past the drain point: it drains anyway
    assert not warned(357, 3, "300")     # a 6-min job: its drain point 57 s in; the warning the one asked for
    assert not warned(600, 10, "300")    # a 10-min job: news (a limit lowered, an operator's signal): drain now
    assert not warned(2400, 5)           # the default 5 min in a 40-min job
    assert not warned(20, 5, "10")       # a margin given, not cut
    assert not early_warning(time.time(), None, False)  # no end known: drain now


def test_a_warning_to_fleet_run_in_a_short_job_drains_the_fleet_at_its_drain_point_not_at_once(tmp_path, background):
    run_dir = tmp_path / "run"
    suite, flag = drain_suite(tmp_path)
    # (--drain-before 60s in a 30-s job: cut to half the time left, 15 s, as in a 2-min
    # Slurm job given the job script's 5 min)
    runner = spawn("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "30s",
                   "--drain-before", "60s", *HB, cwd=tmp_path)
    background.append(runner)
    wait_for(lambda: {("started", "sleepy"), ("exit", "quick")} <= {(e["kind"], e.get("step")) for e in events(run_dir)},
             60, "sleepy running, quick done")
    os.kill(runner.pid, signal.SIGUSR1)  # as Slurm does at the start of a job shorter than its @N
    code, out, err = finish(runner)
    assert code == 3, out + err
    ev = events(run_dir)
    [end] = [e for e in ev if e["kind"] == "allocation_end"]
    [drained] = [e for e in ev if e["kind"] == "drained"]
    assert drained["t"] >= end["drain_at"] and drained["reason"].startswith("the drain point, "), drained
    assert "warning signal (SIGUSR1) came " in (run_dir / "coordinator.log").read_text()
    assert_drained_then_rerun(run_dir, tmp_path, suite, flag, "the drain point, ")


def test_the_drain_starts_at_its_point_not_at_the_next_heartbeat_however_long_the_period(tmp_path):
    # 10,000 nodes beat every 20 s (fleet.control.liveness.scaled); a 30 s period here.
    # The drain point comes about 10 s after the fleet is up, long before the second beat.
    period = 30.0
    run_dir = tmp_path / "run"
    suite, flag = drain_suite(tmp_path)
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "20s",
              "--drain-before", "10s", "--heartbeat", str(period), "--heartbeat-timeout", "120",
              cwd=tmp_path, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    ev = events(run_dir)
    [end] = [e for e in ev if e["kind"] == "allocation_end"]
    [drained] = [e for e in ev if e["kind"] == "drained"]
    [sleepy] = [e for e in ev if e["kind"] == "exit" and e["step"] == "sleepy"]
    # Within a loop turn or so of the point (a loaded machine's turn), not up to a period late.
    assert 0 <= drained["t"] - end["drain_at"] < period / 10, (drained, end)
    assert sleepy["outcome"] == "interrupted" and sleepy["t"] - end["drain_at"] < period / 10, sleepy
    assert_drained_then_rerun(run_dir, tmp_path, suite, flag, "the drain point, 10 s before the end")


def test_when_only_steps_held_back_by_the_end_are_left_fleet_run_exits_3_at_once_not_at_the_drain_point(tmp_path):
    """Nothing can start before the drain point any more: the fleet says so when the last
    step that could run ends, instead of idling to the drain point (a job script's
    resubmission comes that much sooner); the held step and its dependent are not
    started, and nothing counts as an attempt. `long` would fit an allocation like this
    one (the next job: it takes a little longer than the ~120 s this job gives steps before
    its drain point, within fleet.control.stuck's slack), so the exit is 3, not 1."""
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "heldonly"
[[steps]]
id = "quick"
command = "true"
estimate = 1
[[steps]]
id = "long"
command = "true"
estimate = 121
[[steps]]
id = "after"
command = "true"
deps = ["long"]
""")
    run_dir = tmp_path / "run"
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "240s", *HB,
              cwd=tmp_path, timeout=200)
    assert r.returncode == 3, r.stdout + r.stderr
    recs = event_records(run_dir)
    [end] = [e for e in recs if isinstance(e, E.AllocationEnd)]
    [closed] = [e for e in recs if isinstance(e, E.NotStarted)]
    quick = next(e for e in recs if isinstance(e, E.Exit) and e.step == "quick")
    assert quick.outcome == "succeeded"
    assert quick.t <= closed.t < end.drain_at, (quick.t, closed.t, end.drain_at)  # recorded times, not a clock
    assert closed.steps == 2 and closed.held == 1
    assert not [e for e in recs if isinstance(e, E.Drained)]  # the fleet did not drain: nothing was stopped
    assert "long" in r.stdout and "not started" in r.stdout, r.stdout
    for s in ("long", "after"):
        assert records.attempts(run_dir, s) == [] and records.read_final(run_dir, s) is None
    assert_nothing_left(run_dir)


def test_a_drained_fleet_killed_before_it_sealed_its_journal_costs_its_interrupted_steps_no_attempt(
        tmp_path, background):
    # The time limit's SIGKILL after the drain (the coordinator did not get to `fleet
    # down`): its journal is unsealed and its lease left, so the next fleet finds a fleet
    # that died; the steps the drain interrupted were not running then (its journal says
    # so), and are not counted lost: the rerun, with --max-attempts 1, runs them.
    run_dir = tmp_path / "run"
    suite, flag = drain_suite(tmp_path)
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "40m", *HB, cwd=tmp_path, check=True,
          timeout=60)
    coordinator = json.loads((run_dir / "fleet.json").read_text())["pid"]
    try:
        warned_run(tmp_path, run_dir, suite, background)
    finally:
        os.kill(coordinator, signal.SIGKILL)
    journal = next((run_dir / ".fleet" / "journal").glob("*.jsonl")).read_text()
    assert '"sealed"' not in journal and '"k":"interrupted","step":"sleepy"' in journal, journal
    assert_drained_then_rerun(run_dir, tmp_path, suite, flag, "warning signal (SIGUSR1)")


def test_a_suite_left_with_steps_too_long_for_any_allocation_like_this_one_exits_1_not_3(tmp_path):
    # Exit 3 tells a job script to submit itself again; a step that cannot fit a job this
    # long (and what needs it) would then never start, job after job (fleet.control.stuck).
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", """
[[steps]]
id = "quick"
command = "true"
estimate = 1
[[steps]]
id = "huge"
command = "true"
estimate = 600
[[steps]]
id = "after"
command = "true"
deps = ["huge"]
""")
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "20s",
              "--drain-before", "10s", *HB, cwd=tmp_path, timeout=90)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "no allocation as long as this one can finish it: the 2 steps left each needs a longer allocation" \
        in r.stderr, r.stderr
    assert re.search(r"not_started huge: needs a longer allocation: it takes about 10 min, and an allocation like "
                     r"this one gives steps \d+ s before its drain point", r.stdout), r.stdout
    assert "not_started after: needs a longer allocation: it needs huge, which does" in r.stdout, r.stdout
    for s in ("huge", "after"):  # nothing recorded that would keep a longer job from running them
        assert records.attempts(run_dir, s) == [] and records.read_final(run_dir, s) is None, s
    assert_nothing_left(run_dir)


def test_a_step_with_no_estimate_interrupted_after_nearly_all_of_the_allocation_needs_a_longer_one(tmp_path):
    # It had all this job could give and did not finish (no progress saved): the next job
    # of the same length would not finish it either, nor what needs it, so fleet run
    # exits 1, not 3 (its dependent was judged free once: a resubmitting job ran on).
    flag = tmp_path / "flag"
    suite = write_suite(tmp_path / "s.toml", f'[[steps]]\nid = "endless"\ncommand = "test -e {flag} || sleep 120"\n'
                        '[[steps]]\nid = "after"\ncommand = "true"\ndeps = ["endless"]\n')
    run_dir = tmp_path / "run"
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "40s",
              "--drain-before", "10s", *HB, cwd=tmp_path, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"interrupted endless: needs a longer allocation: it ran \d+ s of the \d+ s an allocation like "
                     r"this one gives steps, and had not ended; drained: ", r.stdout), r.stdout
    assert "not_started after: needs a longer allocation: it needs endless, which does" in r.stdout, r.stdout
    assert "no allocation as long as this one can finish it: the 2 steps left" in r.stderr, r.stderr
    assert records.attempts(run_dir, "endless") == [] and records.read_final(run_dir, "endless") is None
    assert_nothing_left(run_dir, tag=str(flag))


def test_an_interrupted_step_is_judged_to_need_a_longer_allocation_only_after_nearly_all_of_one_without_progress():
    from fleet.control.stuck import TOO_LONG, ran_out
    assert ran_out(27.0, 30.0, saved=False).startswith(f"{TOO_LONG}: it ran 27 s of the 30 s")
    assert ran_out(26.9, 30.0, saved=False) is None   # it started late: the next job may start it sooner
    assert ran_out(29.0, 30.0, saved=True) is None    # it saved progress: the next job goes on from there
    assert ran_out(29.0, None, saved=False) is None   # no end known


def test_a_parent_that_succeeded_before_the_drain_interrupted_its_children_runs_again_with_them_next_time(tmp_path):
    # (its marker said succeeded: the next run skipped it and its children never ran)
    # The drain point comes 8 s in: p and its 0.5 s child c0 end before it even on a
    # loaded machine (at 4 s, c0 was sometimes still running when it came).
    from children_steps import ran
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "family"
[[steps]]
id = "p"
call = "children_steps:leaves_slow_children"
args = { n = 2, step_s = 60.0 }
""")
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "18s",
              "--drain-before", "10s", *HB, cwd=tmp_path, timeout=90)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "interrupted p: " in r.stdout and "it runs again next time" in r.stdout, r.stdout
    exits = {e.step: e.outcome for e in event_records(run_dir) if isinstance(e, E.Exit)}
    assert exits == {"p": "succeeded", "p/c0": "succeeded", "p/c1": "interrupted"}, exits
    assert records.read_final(run_dir, "p") is None and not records.attempts(run_dir, "p")
    assert_nothing_left(run_dir)
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "18s",
              "--drain-before", "10s", *HB, cwd=tmp_path, timeout=90)
    assert r.returncode == 3, r.stdout + r.stderr
    assert [x["what"] for x in ran(run_dir) if x["step"] == "p"] == ["left", "left"]
    assert [x["step"] for x in ran(run_dir) if x["what"] == "child"].count("p/c0") == 1
    assert_nothing_left(run_dir)
