"""Which steps outside its own family a child may depend on: the suite's, never
another parent's children.

A child's deps name its siblings, else steps of the suite. Another parent's child
(a cousin `p2/c0` of `p1/c0`, an uncle `p/b` of `p/a/x`) is refused, whether or not
that parent has submitted it yet: whether it had was a matter of timing, so before
2026-12-06 the same suite was taken on one run and refused on the next (the dynamic
audit's F2: two parents run side by side, or one after the other with --serial; and a
rerun that skipped the other parent as done never knew its children at all). The way to
run after another family is a dep of the parent (or of its ancestor) on the step that
submitted it: a step's dependents start once its whole family has ended. Pure: the
coordinator passes what its scheduler knows (fleet.control.children).
"""

from __future__ import annotations

from typing import Callable, Mapping


def not_a_childs_dep(dep: str, parent: str, specs: Mapping, owner_of: Callable[[str], str | None]) -> str | None:
    """Why a child of `parent` cannot depend on `dep` (not one of its siblings), or None
    if it may: `dep` is a step the fleet knows that is no step's child. `specs` are the
    fleet's steps by id; `owner_of(id)` is the step that submitted one (None: a suite's).
    An unknown `dep` that names a child of a known step that can submit ("p2/c0", "p2"
    known) is refused as another parent's child too, in the same words: they do not
    depend on whether "p2" had submitted it yet."""
    known = dep in specs
    owner = owner_of(dep) if known else _submitter_in(dep, specs)
    if known and owner in (None, parent):
        return None
    if owner is None or owner == parent:  # (unknown: "p/x", the parent's, is a sibling it did not submit)
        return f"{dep!r} is neither a sibling nor a step of the fleet"
    chain = [dep]
    x = owner
    while x is not None:  # dep and the steps that submitted it, up to the suite's
        chain.append(x)
        x = owner_of(x)
    return (f"{dep!r} names a child of {owner!r}, another step: a child's deps name its siblings and the suite's "
            f"steps only (whether {owner!r} has submitted it when this one is submitted is a matter of "
            f"timing); {_instead(chain, parent, owner_of)}")


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


def _instead(chain: list, parent: str, owner_of: Callable[[str], str | None]) -> str:
    """What to write instead: the dep between the two families' steps that share a
    parent (the suite, or a common ancestor). `chain` is the dep and its submitters."""
    mine = [parent]
    while mine[-1] is not None:
        mine.append(owner_of(mine[-1]))
    above = {up: low for low, up in zip(mine, mine[1:])}  # a step of mine's parent -> that step
    for low, up in zip(chain, chain[1:] + [None]):
        if up == parent:
            return f"depend on the sibling {low[len(parent) + 1:]!r} instead (its children end before it does)"
        if up in above:
            return (f"to run after it, make {above[up]!r} depend on {low!r} (a step's dependents start once its "
                    f"whole family has ended)")
    return "to run after it, make this step's parent depend on the step that submitted it"
