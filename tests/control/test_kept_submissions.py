"""Which finished submissions keep their steps and rows (fleet.control.submission.to_release):
a long-lived fleet that is sent the same suite again and again keeps the latest few, not
every one ever made. The policy alone here; a real fleet in test_api_resubmit.py."""

from __future__ import annotations

from fleet.control.submission import KEEP_FINISHED, KEEP_STEPS, UNTOLD_S, Submission, to_release
from fleet.core import states as S


def made(n: int, steps: int = 3, finished: bool = True, told: bool = True) -> list[Submission]:
    out = []
    for i in range(1, n + 1):
        sub = Submission(i, f"s{i}.toml", [f"x{j}" for j in range(steps)], 0 if finished else steps)
        sub.told = told
        out.append(sub)
    return out


def test_the_latest_finished_submissions_are_kept_and_the_earlier_ones_let_go():
    subs = made(KEEP_FINISHED + 3)
    assert to_release(subs, 100.0) == [3, 2, 1]


def test_a_submission_with_a_step_still_to_end_is_kept_however_old():
    subs = made(KEEP_FINISHED + 3)
    subs[0].remaining = 1  # (a step of it runs yet: the scheduler and the records count it there)
    assert to_release(subs, 100.0) == [3, 2]


def test_beyond_the_latest_one_no_more_steps_than_the_limit_are_kept_however_few_the_submissions():
    big = made(3, steps=KEEP_STEPS)  # (a suite of that size run again and again)
    assert to_release(big, 100.0) == [2, 1]  # the latest alone, whatever its size
    mixed = made(4, steps=10)
    mixed[1].steps = [f"y{j}" for j in range(KEEP_STEPS)]
    assert to_release(mixed, 100.0) == [2]  # (the smaller earlier one still fits)


def test_a_finished_submission_no_client_was_told_of_is_kept_a_while_after_it_was_first_found_finished():
    subs = made(KEEP_FINISHED + 1, told=False)
    assert to_release(subs, 1000.0) == []  # (found finished now)
    assert to_release(subs, 1000.0 + UNTOLD_S - 1) == []
    assert to_release(subs, 1000.0 + UNTOLD_S) == [1]


def test_a_released_submission_keeps_its_step_count_and_its_counts_by_state_and_nothing_per_step():
    sub = Submission(1, "s.toml", ["a", "b", "c"], 3)
    sub.counts[S.WAITING] -= 3
    sub.counts[S.SUCCEEDED] += 2
    sub.counts[S.FAILED] += 1
    sub.finished = [["a", S.SUCCEEDED, 1, ""], ["b", S.SUCCEEDED, 1, ""], ["c", S.FAILED, 1, "exit 1"]]
    sub.remaining = 0
    sub.release()
    assert sub.released and sub.step_count() == 3
    assert (sub.steps, sub.finished) == ([], [])
    assert sub.counts_now() == {S.SUCCEEDED: 2, S.FAILED: 1}
    sub.counts[S.FAILED] -= 1  # (the scheduler may still move one of its steps: counted as before)
    sub.counts[S.WAITING] += 1
    assert sub.counts_now() == {S.SUCCEEDED: 2, S.WAITING: 1}
