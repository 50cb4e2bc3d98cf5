"""Which steps outside its own family a child may depend on: the suite's, and its
ancestors' children entered no later than its own branch; never another family's.

A child's deps name its siblings, else steps of the suite, else a child of one of its
ancestors (an uncle `p/b` of `p/a/x`, a great-uncle) entered with the branch that leads
to this child (`p/a`, submitted by `p` with `p/b`) or before it: that one is known
before the branch ran, so before this child's parent submits it, on every run. Any
other parent's child (a cousin `p2/c0` of `p1/c0`, `p/b/y` of `p/a/x`, an uncle `p/c`
submitted only after `p/a`) is refused, whether or not that parent has submitted it yet:
whether it had was a matter of timing (or of what a rerun skipped as done), so before
2026-12-06 the same suite was taken on one run and refused on the next (the dynamic
audit's F2). From then until 2026-12-07 an uncle was refused too, though one entered
with the child's branch never depended on timing (review 8's F2: a suite that passed
every run failed every run). The way to run after another family is a dep of the
parent (or of its ancestor) on the step that submitted it: a step's dependents start
once its whole family has ended. Pure: the coordinator passes what its scheduler knows
(fleet.control.children).
"""

from __future__ import annotations

from typing import Callable, Mapping

_AFTER = "a step's dependents start once its whole family has ended"


def not_a_childs_dep(dep: str, parent: str, specs: Mapping, owner_of: Callable[[str], str | None],
                     entered_at: Callable[[str], int | None]) -> str | None:
    """Why a child of `parent` cannot depend on `dep` (not one of its siblings), or None
    if it may: `dep` is a step the fleet knows that is no step's child, or a child of an
    ancestor of `parent` entered no later than the ancestor's child on the way down to
    `parent` (the scheduler refuses an ancestor itself: it ends only after this child).
    `specs` are the fleet's steps by id; `owner_of(id)` is the step that submitted one
    (None: a suite's); `entered_at(id)` when a child was first entered (grows with each
    submission, the same for children entered together). An unknown `dep` that names a
    child of a known step that can submit ("p2/c0", "p2" known) is refused as that
    parent's child, in the same words as a known one: they do not depend on whether "p2"
    had submitted it yet."""
    known = dep in specs
    owner = owner_of(dep) if known else _submitter_in(dep, specs)
    if known and owner in (None, parent):
        return None
    if owner is None or owner == parent:  # (unknown: "p/x", the parent's, is a sibling it did not submit)
        return f"{dep!r} is neither a sibling nor a step of the fleet"
    above = _branches(parent, owner_of)
    chain = [dep]
    x = owner
    while x is not None:  # dep and the steps that submitted it, up to the suite's
        chain.append(x)
        x = owner_of(x)
    branch = above.get(owner)
    if branch is None:
        return (f"{dep!r} names a child of {owner!r}, another family: a child's deps name its siblings, the suite's "
                f"steps and its ancestors' children entered no later than its own branch (whether {owner!r} has "
                f"submitted it when this one is submitted is a matter of timing, or of what a rerun skipped); "
                f"{_instead(chain, parent, above, entered_at)}")
    if dep == branch:
        return f"{dep!r} is this step's parent or an ancestor of it: it ends only after its children"
    if _no_later(dep, branch, entered_at):
        return None
    return (f"{dep!r} names a child of {owner!r} not entered with {branch!r} or before it: a child may depend on "
            f"its ancestors' children only when they were entered no later than its own branch (then they are "
            f"known before its parent runs, on every run); {_instead(chain, parent, above, entered_at)}")


def _branches(parent: str, owner_of: Callable[[str], str | None]) -> dict:
    """Each ancestor of a child of `parent` (the suite's: None) -> its child on the way
    down: `parent` itself, or the ancestor of `parent` that it submitted."""
    above, low = {}, parent
    while low is not None:
        up = owner_of(low)
        above[up] = low
        low = up
    return above


def _no_later(step: str, branch: str, entered_at: Callable[[str], int | None]) -> bool:
    """Whether `step`, a child of the parent of `branch`, was entered with it or before
    it (an unknown one: not yet)."""
    mine, its = entered_at(branch), entered_at(step)
    return mine is not None and its is not None and its <= mine


def _submitter_in(dep: str, specs: Mapping) -> str | None:
    """The longest prefix of `dep` before a "/" that is a step of the fleet that can submit
    steps (a call, or a command with protocol "steps"), if any."""
    cut = dep.rfind("/")
    while cut > 0:
        s = specs.get(dep[:cut])
        if s is not None:
            return dep[:cut] if s.call or s.protocol == "steps" else None
        cut = dep.rfind("/", 0, cut)
    return None


def _instead(chain: list, parent: str, above: dict, entered_at: Callable[[str], int | None]) -> str:
    """What to write instead: a dep on the step of the other family that shares a parent
    with one of this child's branch (the suite, or a common ancestor). `chain` is the dep
    and its submitters; `above` maps each ancestor to its child on the way down."""
    for low, up in zip(chain, chain[1:] + [None]):
        if up == parent:
            return f"depend on the sibling {low[len(parent) + 1:]!r} instead (its children end before it does)"
        if up not in above:
            continue
        mine = above[up]
        if up is None:  # (two of the suite's steps)
            return f"to run after it, make {mine!r} depend on {low!r} ({_AFTER})"
        if _no_later(low, mine, entered_at):
            return f"depend on {low!r} instead (its children end before it does)"
        return (f"to run after it, have {up!r} submit {low!r} with {mine!r} or before it, and depend on {low!r} "
                f"(its children end before it does)")
    return "to run after it, make this step's parent depend on the step that submitted it"
