"""The problems of an array table: one the index does not change is said once for the
table, ones that differ by index a few at a time, every distinct one still said at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.core.arraytables import SHOWN, Folder
from fleet.core.graph import build_graph
from fleet.core.problems import Problem, SuiteError
from fleet.core.suite import parse_suite, read_suite

FILE = Path("/x/s.toml")


def problems_of(*steps: dict) -> list[Problem]:
    with pytest.raises(SuiteError) as e:
        parse_suite({"steps": list(steps)}, FILE)
    return e.value.problems


def later_problems(*steps: dict) -> list[Problem]:
    """Every problem, the graph's folded in as fleet validate has them."""
    r = read_suite({"steps": list(steps)}, FILE)
    _, later = build_graph(r.suite.steps, known_done=r.unparsed)
    return r.merged(later)


def said(problems: list[Problem]) -> list[tuple[str | None, str | None, str]]:
    return [(p.step, p.field, p.message) for p in problems]


def test_a_mistake_in_an_array_table_is_said_once_for_the_table_naming_its_id_pattern():
    assert said(problems_of({"id": "h/{i}", "array": "0-99999", "command": "true", "cores": 0})) == [
        ("h/{i}", "cores", "expected an integer at least 1, got 0 (in all 100000 steps of the array)")]


def test_args_on_a_command_array_is_said_once():
    (p,) = problems_of({"id": "h/{i}", "array": "0-999", "command": "true", "args": {"x": 1}})
    assert (p.file, p.step, p.field) == (str(FILE), "h/{i}", "args")
    assert p.message.endswith("(in all 1000 steps of the array)")


def test_an_array_output_without_i_is_said_once_and_not_again_by_the_graph():
    problems = later_problems({"id": "f/{i}", "array": "1-5000", "command": "true", "outputs": ["out.nc", "f{i}.nc"]},
                              {"id": "use", "command": "true", "deps": ["f/7"], "inputs": ["out.nc"]})
    assert said(problems) == [("f/{i}", "outputs", "'out.nc' has no {i}: all 5000 steps of the array would produce "
                                                   "it, and at most one step may produce a path")]


def test_problems_that_differ_by_index_are_said_for_the_first_steps_then_counted():
    problems = problems_of({"id": "m/{i}", "array": "0-9999", "command": "true", "cores": "{i}"},
                           {"id": "after", "command": "true", "priority": 9})
    assert said(problems[:SHOWN]) == [(f"m/{i}", "cores", f"expected an integer, got '{i}'") for i in range(SHOWN)]
    assert said(problems[SHOWN:]) == [
        ("m/{i}", "cores", f"and {10000 - SHOWN} more problems with this field in other steps of the array"),
        ("after", "priority", "expected an integer from 1 to 5, got 9")]


def test_every_distinct_problem_of_an_array_is_said_each_field_on_its_own():
    problems = problems_of({"id": "a/{i}", "array": "0-99", "command": "true", "memory": "{i}MB", "retries": -1,
                            "outputs": ["ok/{i}", "../up{i}"], "protocol": "nope"})
    assert [(p.step, p.field) for p in problems] == [
        ("a/0", "memory"), ("a/{i}", "retries"), ("a/0", "outputs"), ("a/{i}", "protocol"),
        ("a/1", "outputs"), ("a/2", "outputs"), ("a/{i}", "outputs")]
    assert problems[-1].message.startswith("and 97 more problems")  # (a/0's is the first of the 100)


def test_a_bad_id_pattern_is_said_once_as_written():
    (p,) = problems_of({"id": "k/{i} x", "array": "0-9", "command": "true"})
    assert (p.step, p.field) == ("k/{i} x", "id")
    assert p.message == ("a step id uses only ASCII letters, digits and . _ - /, got 'k/{i} x' "
                         "(in all 10 steps of the array)")


def test_graph_problems_of_an_array_fold_too_and_keep_their_place_in_setup_order():
    problems = later_problems({"id": "first", "command": "true", "deps": ["gone"]},
                              {"id": "g/{i}", "array": "0-49", "command": "true", "deps": ["nope"], "priority": 7},
                              {"id": "last", "command": "true", "deps": ["gone"]})
    assert said(problems) == [
        ("first", "deps", "'gone' names no step"),
        ("g/{i}", "priority", "expected an integer from 1 to 5, got 7 (in all 50 steps of the array)"),
        ("last", "deps", "'gone' names no step")]
    problems = later_problems({"id": "first", "command": "true", "deps": ["gone"]},
                              {"id": "g/{i}", "array": "0-49", "command": "true", "deps": ["nope"]},
                              {"id": "last", "command": "true", "deps": ["gone"]})
    assert said(problems) == [
        ("first", "deps", "'gone' names no step"),
        ("g/{i}", "deps", "'nope' names no step (in all 50 steps of the array)"),
        ("last", "deps", "'gone' names no step")]


def test_a_problem_some_steps_of_an_array_share_is_said_once_with_how_many_and_the_first():
    folder = Folder("c/{i}", 10)
    for i in (3, 5, 8):
        folder.add(Problem("s.toml", f"c/{i}", "deps", "'x' names no step"))
    folder.add(Problem("s.toml", "c/9", "deps", "'y' names no step"))
    assert said(folder.problems()) == [
        ("c/{i}", "deps", "'x' names no step (in 3 of the 10 steps of the array, the first 'c/3')"),
        ("c/9", "deps", "'y' names no step")]


def test_an_array_of_one_step_is_named_by_its_step():
    (p,) = problems_of({"id": "one/{i}", "array": "4", "command": "true", "cores": 0})
    assert (p.step, p.message) == ("one/4", "expected an integer at least 1, got 0")


def test_a_valid_array_keeps_all_its_steps_and_what_reads_of_a_bad_one_is_unparsed():
    r = read_suite({"steps": [{"id": "v/{i}", "array": "0-999", "command": "true"},
                              {"id": "b/{i}", "array": "0-9", "command": "true", "cores": 0}]}, FILE)
    assert len(r.suite.steps) == 1000 and len(r.problems) == 1
    assert "b/3" in r.unparsed and "v/3" not in r.unparsed
