"""A long-lived fleet sent the same suite again and again, as a notebook or a driver
script does: it keeps the steps and rows of its latest finished submissions only, says
so of an earlier one it is asked to wait for, and a Submission of a fleet since stopped
is never taken for the next fleet's submission of the same number. Real fleets, real
processes, real sockets."""

from __future__ import annotations

import pytest

from fleetharness import events, fleet, wait_for
from test_api_long_lived import run, up_in  # noqa: F401 (the fixture: a local fleet of one node up)

import fleet as F
from fleet.control.client import FleetError
from fleet.control.submission import KEEP_FINISHED

STEPS = 20
SUITE = [{"id": f"same/{i}", "command": "true"} for i in range(STEPS)]


def test_a_suite_submitted_again_and_again_keeps_the_steps_of_the_latest_finished_submissions_only(run):
    with F.connect(run) as f:
        made, kept = [], []
        for _ in range(KEEP_FINISHED + 6):
            sub = f.submit(SUITE, name="same")
            assert set(f.wait(sub, timeout=120).values()) <= {"succeeded", "skipped"}
            made.append(sub)
            kept.append(f.status()["submissions_kept"])
        # (every submission kept its steps, rows and definitions for good: ~1 KB a step each)
        assert max(k["submissions"] for k in kept) == KEEP_FINISHED + 1, kept
        assert kept[-1] == {"submissions": KEEP_FINISHED + 1, "steps": (KEEP_FINISHED + 1) * STEPS,
                            "rows": (KEEP_FINISHED + 1) * STEPS}, kept
        with pytest.raises(FleetError, match=r"submission 1 ended and is no longer kept: its outcomes are in "
                                             r".*events\.jsonl \(fleet report "):
            f.wait(made[0], timeout=60)
        recent = f.wait(made[-KEEP_FINISHED], timeout=60)  # (a recent one: waited for again, as before)
        assert recent == {s["id"]: "skipped" for s in SUITE}
        st = f.status()
        listed = {s["id"]: s for s in st["submissions"]}
        assert listed[1]["steps"] == listed[1]["finished"] == STEPS  # (status still lists a released one whole)
        assert st["submissions_total"] == len(made)


def test_waiting_on_a_submission_of_a_fleet_since_stopped_names_both_fleets_and_not_the_new_ones_outcomes(run):
    with F.connect(run) as f:
        old = f.submit([{"id": "mine", "command": "true"}], name="mine")
        assert f.wait(old, timeout=60) == {"mine": "succeeded"}
    fleet("down", "--run-dir", str(run), cwd=run.parent, check=True, timeout=60)
    up_in(run, run.parent)
    first, second = [e["fleet"] for e in events(run) if e["kind"] == "fleet_starting"]
    with F.connect(run) as g:  # (docs/python-api.md: connect again after CoordinatorGone)
        other = g.submit([{"id": f"someone_else_{i}", "command": "true"} for i in range(3)], name="other")
        assert other.id == old.id  # (numbers start again in each fleet)
        theirs = {f"someone_else_{i}": "succeeded" for i in range(3)}
        # (it returned {'someone_else_0': 'succeeded', ...}: another fleet's submission 1)
        for ask in (lambda: g.wait(old, timeout=60), lambda: g.progress(old)):
            with pytest.raises(FleetError, match=rf"submission 1 is fleet {first}'s, and this client is "
                                                 rf"connected to fleet {second} in "):
                ask()
        assert (old.fleet, other.fleet, g.fleet_id) == (first, second, second)
        assert g.wait(other, timeout=60) == theirs
        assert g.wait(old.id, timeout=60) == theirs  # (a bare number is the connected fleet's)


def test_a_wait_that_has_every_row_of_a_finished_submission_ends_though_others_are_submitted_meanwhile(run):
    # The submission was counted told when its last rows were sent; a submission registered
    # before the client's last ask (the one that ends the wait) let it go: "no longer kept".
    with F.connect(run) as f, F.connect(run) as g:
        first = f.submit([{"id": f"a/{i}", "command": "true"} for i in range(5)], name="a")
        wait_for(lambda: f.progress(first).done, 60, "the first submission to end, unwaited")
        for i in range(KEEP_FINISHED):  # it is no longer among the latest finished
            g.wait(g.submit([{"id": f"b{i}", "command": "true"}], name=f"b{i}"), timeout=60)
        more = []

        def on_progress(u):
            if len(u.outcomes) == 5 and not more:  # every row in: another submission, before the last ask
                more.append(g.submit([{"id": "c", "command": "true"}], name="c"))

        assert f.wait(first, timeout=60, on_progress=on_progress) == {f"a/{i}": "succeeded" for i in range(5)}
        assert more and g.wait(more[0], timeout=60) == {"c": "succeeded"}
