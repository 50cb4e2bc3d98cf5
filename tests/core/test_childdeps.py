"""Which steps outside its family a child may depend on (fleet.core.childdeps): the
suite's, and its ancestors' children entered no later than its own branch; never another
family's children, whether or not that parent submitted them yet."""

from __future__ import annotations

from pathlib import Path

from fleet.core.childdeps import not_a_childs_dep
from fleet.core.suite import parse_suite

# p1, p2 and p (call steps) and plain (a command) are the suite's; the rest children.
OWNERS = {"p1": None, "p2": None, "p": None, "plain": None, "p2/c0": "p2", "p/a": "p", "p/b": "p", "p/a/x": "p/a",
          "p1/c0": "p1", "p1/c0/g": "p1/c0", "p/b/y": "p/b", "p/c": "p", "p/c/z": "p/c",
          "p/e": "p"}
# When each child was first entered: p/e in a submission of p, p/a and p/b in its next, p/c later.
ENTERED = {"p2/c0": 1, "p1/c0": 2, "p/a": 3, "p/b": 3, "p/a/x": 4, "p1/c0/g": 5, "p/b/y": 6, "p/c": 7, "p/c/z": 8,
           "p/e": 2}


def specs():
    tables = [{"id": sid, "call": "mod:f"} if sid != "plain" else {"id": sid, "command": "true"} for sid in OWNERS]
    return {s.id: s for s in parse_suite({"suite": {"name": "s"}, "steps": tables}, Path("s.toml")).steps}


def why(dep: str, parent: str):
    return not_a_childs_dep(dep, parent, specs(), OWNERS.get, ENTERED.get)


def test_a_childs_dep_on_a_step_of_the_suite_or_on_its_own_parents_child_is_taken():
    assert why("p2", "p1") is None and why("plain", "p/a") is None
    assert why("p1/c0", "p1") is None  # a sibling written with its whole id


def test_a_dep_on_another_parents_child_is_refused_whether_or_not_that_parent_submitted_it_yet():
    known = why("p2/c0", "p1")
    assert known.startswith("'p2/c0' names a child of 'p2', another family: a child's deps name its siblings, the "
                            "suite's steps and its ancestors' children entered no later than its own branch"), known
    assert known.endswith("to run after it, make 'p1' depend on 'p2' (a step's dependents start once its whole "
                          "family has ended)"), known
    unknown = why("p2/c9", "p1")  # p2 has not submitted it (yet): refused with the same rule, not "unknown"
    assert unknown == known.replace("'p2/c0'", "'p2/c9'"), unknown


def test_an_uncle_or_great_uncle_entered_with_the_childs_branch_or_before_it_is_taken():
    # (review 8's F2: p submits a and b together, a's child depends on b: known before a ran)
    assert why("p/b", "p/a") is None  # the uncle of p/a's child, entered with p/a
    assert why("p/b", "p/a/x") is None  # its great-uncle, entered with p/a, the branch to it
    assert why("p/e", "p/a") is None and why("p/e", "p/a/x") is None  # entered before p/a


def test_an_uncle_entered_after_the_childs_branch_is_refused_as_one_not_submitted_yet_in_the_same_words():
    later = why("p/c", "p/a")
    assert later == ("'p/c' names a child of 'p' not entered with 'p/a' or before it: a child may depend on its "
                     "ancestors' children only when they were entered no later than its own branch (then they are "
                     "known before its parent runs, on every run); to run after it, have 'p' submit 'p/c' with "
                     "'p/a' or before it, and depend on 'p/c' (its children end before it does)"), later
    assert why("p/d", "p/a") == later.replace("'p/c'", "'p/d'")  # not submitted (yet)
    assert why("p/c", "p/a/x") == later


def test_a_cousin_is_refused_and_the_error_names_the_uncle_to_depend_on_where_it_may():
    cousin = why("p/b/y", "p/a")
    assert cousin.startswith("'p/b/y' names a child of 'p/b', another family"), cousin
    assert cousin.endswith("; depend on 'p/b' instead (its children end before it does)"), cousin
    assert why("p/c/z", "p/a").endswith("have 'p' submit 'p/c' with 'p/a' or before it, and depend on 'p/c' (its "
                                        "children end before it does)")


def test_a_nephew_or_another_family_says_which_dep_to_write():
    assert why("p1/c0/g", "p1").endswith("depend on the sibling 'c0' instead (its children end before it does)")
    assert why("p2/c0", "p/a/x").endswith("make 'p' depend on 'p2' (a step's dependents start once its whole "
                                          "family has ended)")


def test_a_childs_parent_or_ancestor_is_never_taken_as_an_uncle():
    assert why("p/a", "p/a/x") == "'p/a' is this step's parent or an ancestor of it: it ends only after its children"
    assert why("p/a/x", "p/a/x").startswith("'p/a/x' is this step's parent")


def test_a_dep_that_names_no_step_and_no_child_of_one_is_unknown():
    for dep, parent in (("nosuch", "p1"), ("plain/k", "p1"), ("p1/zz", "p1"), ("q/c0", "p1")):
        assert why(dep, parent) == f"{dep!r} is neither a sibling nor a step of the fleet", (dep, parent)
