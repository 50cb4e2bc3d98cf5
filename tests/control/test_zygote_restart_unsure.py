"""A step queued on a node (its window) that the zygote started just before it was
killed, its start unreported: it may have run, so it runs again as its next attempt,
and the events say the first may have (fleet.core.unsure, fleet.node.rezygote.unreaped).
Before 2026-12-07 the agent took it for unstarted (its predecessor's end had not come
either) and handed it to the new zygote: it ran twice as attempt 1, the first run
recorded nowhere (the crashfuzz audit's F4). Real fleets; the zygote is held after the
start by a test hook (FLEET_TEST_PROMOTED_HOLD) and killed by this test."""

from __future__ import annotations

import collections
import json
import os
import signal
import sys

import pytest
from fleetharness import assert_nothing_left, finish, fleet, spawn, wait_for, write_suite
from test_zygote_restart import _down_after, of  # noqa: F401  (its fixture: a failed test leaves nothing up)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fleet's nodes need Linux")


def side_lines(path) -> list[tuple[str, str]]:
    """(step, FLEET_ATTEMPT) of each run of a step, as the steps wrote them."""
    if not path.exists():
        return []
    return [tuple(line.split()[:2]) for line in path.read_text().splitlines() if len(line.split()) >= 2]


def queued_start_then_zygote_killed(tmp_path, monkeypatch) -> tuple:
    """A run whose zygote is killed just after it started a queued step, unheard: (the
    run directory, that step, the runs the steps wrote as (step, attempt))."""
    hold, side = tmp_path / "hold", tmp_path / "side.txt"
    hold.write_text("")
    monkeypatch.setenv("FLEET_TEST_PROMOTED_HOLD", str(hold))
    n = 2 * len(os.sched_getaffinity(0)) + 2  # more than one node's cores: some are queued behind others
    # s0 ends 2 s before the others that start with it: the zygote reaps it alone, and the
    # one launch queued behind it is the only one that may have started (steps ending in
    # the same reaping batch free every launch queued behind them: each may have started).
    body = "".join(f'\n[[steps]]\nid = "s{i}"\ncores = 1\nretries = 1\n'
                   f'command = "echo $FLEET_STEP $FLEET_ATTEMPT $$ >> {side}; sleep {1 if i == 0 else 3}"\n'
                   for i in range(n))
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "s"\nrun_dir = "run"\n' + body)
    run_dir = tmp_path / "run"
    p = spawn("run", str(suite), "--nodes", "1", cwd=tmp_path)
    try:
        zygote = wait_for(lambda: of("node_joined", run_dir), 60, "the node to join")[0]["zygote_pid"]
        # A queued step ran (its line is written): the zygote started it and is held before reporting it.
        ran = wait_for(lambda: [s for s, _ in side_lines(side) if s in {e["step"] for e in of("queued", run_dir)}],
                       60, "a queued step to start")[0]
        assert not [e for e in of("started", run_dir) if e["step"] == ran], "its start was heard: the test proves nothing"
        os.kill(zygote, signal.SIGKILL)
        hold.unlink()  # (the new zygote is not held)
        rc, out, err = finish(p, 150)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(30)
    assert rc == 0, (out, err)
    assert [e["node"] for e in of("zygote_restarted", run_dir)] == ["node1"]
    return run_dir, ran, side_lines(side)


def test_a_queued_step_started_just_before_its_zygote_was_killed_runs_again_as_attempt_2_and_the_events_say_it_may_have_run(
        tmp_path, monkeypatch):
    run_dir, ran, runs = queued_start_then_zygote_killed(tmp_path, monkeypatch)
    assert [a for s, a in runs if s == ran] == ["1", "2"], runs  # before: ["1", "1"]
    twice = [k for k, c in collections.Counter(runs).items() if c > 1]
    assert not twice, f"ran twice as one attempt: {twice}"
    back = [e for e in of("unqueued", run_dir) if e["step"] == ran]
    assert [(e["attempt"], e["may_have_started"]) for e in back] == [(1, True)], back
    assert "may have started" in back[0]["reason"] and "before it started" not in back[0]["reason"], back
    assert [(e["attempt"], e["outcome"]) for e in of("exit", run_dir) if e["step"] == ran] == [(2, "succeeded")]
    log = (run_dir / "steps" / ran / "log").read_text()
    assert f"step {ran} attempt 1 " in log and f"step {ran} attempt 2 " in log, log
    assert_nothing_left(run_dir)


def test_the_report_and_the_audit_count_the_attempt_that_may_have_run_and_say_where_before_which_attempt_and_why(
        tmp_path, monkeypatch):
    # (before 2026-12-07 only events.jsonl said so: the report listed no problem of the
    # step and gave it "attempts": 1, the audit too, though its side effect happened twice)
    run_dir, ran, runs = queued_start_then_zygote_killed(tmp_path, monkeypatch)
    assert [a for s, a in runs if s == ran] == ["1", "2"], runs
    said = "attempt 1 may have run on node1 before attempt 2: its node's fork server (zygote) was killed"

    rep = fleet("report", str(run_dir), "--json", cwd=tmp_path, timeout=120)
    assert rep.returncode == 0, rep.stderr
    r = json.loads(rep.stdout)
    step = r["steps"][ran]
    assert (step["outcome"], step["attempts"], step["may_have_run"]) == ("succeeded", 2, [1]), step
    mine = [p for p in r["problems"] if p["step"] == ran]
    assert [(p["outcome"], p["attempt"], p["node"], p["next_attempt"], p["log"]) for p in mine] == [
        ("may have run", 1, "node1", 2, f"steps/{ran}/log")], mine
    assert "zygote" in mine[0]["reason"] and "runs again" not in mine[0]["reason"], mine
    assert not [s for s, v in r["steps"].items() if s != ran and "may_have_run" in v], r["steps"]

    text = fleet("report", str(run_dir), cwd=tmp_path, timeout=120)
    line = next((x for x in text.stdout.splitlines() if f" {ran} on node1" in x and "may have run" in x), None)
    assert line is not None and "(attempt 1, before attempt 2): its node's fork server" in line, text.stdout

    page = tmp_path / "report.html"
    assert fleet("report", str(run_dir), "--html", str(page), cwd=tmp_path, timeout=120).returncode == 0
    assert "may have run" in page.read_text() and "before attempt 2" in page.read_text()

    aud = fleet("audit", str(run_dir), "--json", cwd=tmp_path, timeout=120)
    assert aud.returncode == 0, (aud.stdout, aud.stderr)
    a = json.loads(aud.stdout)["steps"][ran]
    assert (a["status"], a["attempts"], a["may_have_run"], a["successes"]) == ("succeeded", 2, [1], 1), a
    assert a["reason"].startswith(said), a
    # The others said so only of an attempt recorded lost (the zygote's running steps: their
    # ends unheard, they may have run to them), never as the queued step's was.
    others = {s: v for s, v in json.loads(aud.stdout)["steps"].items() if s != ran}
    for s, v in others.items():
        lost = "was lost and may have run to its end" in v["reason"]
        assert bool(v["may_have_run"]) == lost and "may have run on" not in v["reason"], (s, v)
    atext = fleet("audit", str(run_dir), cwd=tmp_path, timeout=120).stdout
    assert any(x.split()[:2] == ["succeeded", ran] and said in x for x in atext.splitlines()), atext
