"""Which recorded attempts count toward --max-attempts (fleet.core.attempts): those of
the definition that runs now, that ended without success, since the step's last
success or the user's last explicit rerun (a reset)."""

from __future__ import annotations

from fleet.core import attempts as A


def rec(outcome: str, t: float, spec: str | None = "A") -> dict:
    return {"outcome": outcome, "ended_at": t, "spec": spec}


def test_only_the_attempts_of_the_definition_asked_for_count():
    t = A.tally([rec("failed", 1), rec("lost", 2), rec("failed", 3, "B")])
    assert (t.count("A"), t.count("B"), t.count("C")) == (2, 1, 0)


def test_attempts_under_either_hash_of_one_definition_count_together():
    # (records before 2026-12-06 name the hash that counted the scheduling fields too:
    # after the upgrade they counted for nothing, and a stopped step ran again)
    t = A.tally([rec("failed", 1, "old"), rec("failed", 2, "new"), rec("failed", 3, "other")])
    assert (t.count("new", "old"), t.count("new"), t.count("old")) == (2, 1, 1)
    t = A.tally([{**rec("failed", 1, "old"), "by": A.BY_FLEET_STEP}, rec("failed", 2, "new")])
    assert (t.by_fleet_step("new", "old"), t.by_fleet_step("new")) == (1, 0)


def test_a_success_starts_the_count_again_whatever_the_order_of_the_records():
    recs = [rec("failed", 5), rec("succeeded", 3), rec("failed", 1), rec("failed", 4, "B")]
    t = A.tally(recs)
    assert (t.count("A"), t.count("B"), t.cut) == (1, 1, 3)


def test_a_reset_starts_the_count_again_and_a_later_success_too():
    recs = [rec("failed", 1), rec("failed", 2), rec("failed", 4)]
    assert A.tally(recs, reset=3).count("A") == 1
    assert A.tally([*recs, rec("succeeded", 5)], reset=3).count("A") == 0


def test_attempts_that_went_on_and_records_naming_no_definition_count_for_none():
    t = A.tally([rec("wait", 1), rec("next", 2), rec("restart", 3), rec("lost", 4, None), rec("failed", 5)])
    assert t.count("A") == 1 and len(t.ended) == 1


def test_an_attempt_added_later_counts_and_a_merge_or_a_later_cut_drops_what_came_before_it():
    t = A.tally([rec("failed", 1)]).failed(2, "A").failed(3, None)
    assert t.count("A") == 2
    cut = t.after(1.5)
    assert cut.count("A") == 1 and t.after(0.5) == A.Tally(0.5, t.ended)
    assert cut.after(1.0) is cut  # (an earlier cut: nothing changes)
    other = A.tally([rec("succeeded", 1.5), rec("failed", 4)])
    m = t.merged(other)
    assert m.cut == 1.5 and m.count("A") == 2  # 2 of t's, 4 of other's


def test_an_old_record_without_its_end_counts_until_anything_cuts():
    t = A.tally([{"outcome": "failed", "spec": "A"}])
    assert t.count("A") == 1 and t.after(0.5).count("A") == 0


def test_the_stopped_reason_says_what_counted_and_how_to_go_on():
    why = A.stopped(5, 5)
    assert why.startswith("5 attempts of this definition recorded without success (limit 5)")
    assert "change the step" in why and "--force" in why and "--max-attempts (0: no limit)" in why


def test_the_stopped_reason_counts_one_attempt_in_the_singular_and_says_which_fleet_step_recorded():
    recs = [rec("failed", 1), {**rec("failed", 2), "by": A.BY_FLEET_STEP}]
    t = A.tally(recs)
    assert (t.count("A"), t.by_fleet_step("A"), t.failed(3, "A").by_fleet_step("A")) == (2, 1, 1)
    assert A.stopped(1, 1, 1).startswith(
        "1 attempt of this definition recorded without success (by fleet step --record; limit 1): change the step")
    assert A.stopped(2, 2, 1).startswith(
        "2 attempts of this definition recorded without success (1 by fleet step --record; limit 2)")
    assert A.stopped(1, 1).startswith("1 attempt of this definition recorded without success (limit 1)")
