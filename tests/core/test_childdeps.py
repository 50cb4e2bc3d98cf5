"""Which steps outside its family a child may depend on (fleet.core.childdeps): the
suite's, never another parent's children, whether or not that parent submitted them yet."""

from __future__ import annotations

from pathlib import Path

from fleet.core.childdeps import not_a_childs_dep
from fleet.core.suite import parse_suite

# p1, p2 and p (call steps) and plain (a command) are the suite's; the rest children.
OWNERS = {"p1": None, "p2": None, "p": None, "plain": None, "p2/c0": "p2", "p/a": "p", "p/b": "p", "p/a/x": "p/a",
          "p1/c0": "p1", "p1/c0/g": "p1/c0"}


def specs():
    tables = [{"id": sid, "call": "mod:f"} if sid != "plain" else {"id": sid, "command": "true"} for sid in OWNERS]
    return {s.id: s for s in parse_suite({"suite": {"name": "s"}, "steps": tables}, Path("s.toml")).steps}


def why(dep: str, parent: str):
    return not_a_childs_dep(dep, parent, specs(), OWNERS.get)


def test_a_childs_dep_on_a_step_of_the_suite_or_on_its_own_parents_child_is_taken():
    assert why("p2", "p1") is None and why("plain", "p/a") is None
    assert why("p1/c0", "p1") is None  # a sibling written with its whole id


def test_a_dep_on_another_parents_child_is_refused_whether_or_not_that_parent_submitted_it_yet():
    known = why("p2/c0", "p1")
    assert known.startswith("'p2/c0' names a child of 'p2', another step: a child's deps name its siblings and the "
                            "suite's steps only"), known
    assert known.endswith("to run after it, make 'p1' depend on 'p2' (a step's dependents start once its whole "
                          "family has ended)"), known
    unknown = why("p2/c9", "p1")  # p2 has not submitted it (yet): refused with the same rule, not "unknown"
    assert unknown == known.replace("'p2/c0'", "'p2/c9'"), unknown


def test_an_uncle_or_a_nephew_is_another_parents_child_and_the_error_says_which_dep_to_write():
    assert why("p/b", "p/a").endswith("make 'p/a' depend on 'p/b' (a step's dependents start once its whole "
                                      "family has ended)")
    assert why("p1/c0/g", "p1").endswith("depend on the sibling 'c0' instead (its children end before it does)")
    assert why("p2/c0", "p/a/x").endswith("make 'p' depend on 'p2' (a step's dependents start once its whole "
                                          "family has ended)")


def test_a_dep_that_names_no_step_and_no_child_of_one_is_unknown():
    for dep, parent in (("nosuch", "p1"), ("plain/k", "p1"), ("p1/zz", "p1"), ("q/c0", "p1")):
        assert why(dep, parent) == f"{dep!r} is neither a sibling nor a step of the fleet", (dep, parent)
