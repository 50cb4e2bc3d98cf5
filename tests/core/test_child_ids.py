"""A child's id given where a suite step's is expected (`fleet run --only`, `fleet
step`): the suite step that submits it, named from the id's prefix."""

from __future__ import annotations

from pathlib import Path

from fleet.core.childsteps import not_a_suite_step, parent_in
from fleet.core.suite import parse_suite

STEPS = [
    {"id": "p", "call": "mod:sweep"},
    {"id": "f/{i}", "array": "1-2", "command": "run-case", "protocol": "steps"},
    {"id": "plain", "command": "true"},
]


def steps():
    return parse_suite({"suite": {"name": "big"}, "steps": STEPS}, Path("big.toml")).steps


def test_a_childs_id_names_the_suite_step_that_submits_it_at_any_depth():
    assert parent_in(steps(), "p/k5").id == "p"
    assert parent_in(steps(), "p/k5/k1").id == "p"
    assert parent_in(steps(), "f/2/case0").id == "f/2"  # (an array step's id holds a "/")


def test_an_id_under_no_step_that_can_submit_steps_is_no_child():
    assert parent_in(steps(), "plain/k") is None  # a command without protocol = "steps"
    assert parent_in(steps(), "q/k") is None
    assert parent_in(steps(), "p") is None


def test_the_message_says_whose_child_it_is_and_how_to_run_it_again():
    said = not_a_suite_step("p/k5", "p", "big")
    assert "'p/k5' is not a step of suite 'big' but a child of its step 'p'" in said
    assert "fleet run --force --only p" in said
