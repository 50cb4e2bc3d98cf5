"""A child's input that another family's child produced before this family ran: read
as it is, without a dependency.

A child may not depend on another family's child (fleet.core.childdeps): whether that
one was known yet would be a matter of timing. Its input made by one is another thing
when that producer has succeeded, or when the child's parent (or an ancestor of it)
waits for the producer's family through its deps: a step's dependents start once its
whole family has ended, so the file was made before this family began (the two-stage
pattern: `q`'s children write files, `p` with deps = ["q"] submits children reading
them). Such an input makes no dependency, as one its parent or an ancestor produces
makes none. For a few hours of 2026-12-07 the parent's attempt failed instead,
`'x.txt' is an output of 'q/c': 'q/c' names a child of 'q', another family: ...; make
'p' depend on 'q'`, though p did.

Pure: the coordinator passes what its scheduler knows (fleet.control.children).
"""

from __future__ import annotations

from typing import Callable, Iterable

from fleet.core import states as S


class Upstream:
    """The steps the parent or an ancestor of it waits for through their deps (explicit
    and by inputs, as the scheduler has them), walked once, when first asked: only for
    an input another family's child produces. `state_of(id)`: None for a step the
    scheduler does not have; `deps_of(id)`: its deps; `owner_of(id)`: the step that
    submitted it (None: a suite's)."""

    def __init__(self, above: Iterable[str], state_of: Callable, deps_of: Callable, owner_of: Callable):
        self.above, self.state_of, self.deps_of, self.owner_of = above, state_of, deps_of, owner_of
        self.seen: set | None = None

    def reaches(self, sid: str) -> bool:
        """Whether `sid` or a step that submitted it is among them: its family ended
        before this one began."""
        if self.seen is None:
            state_of, deps_of = self.state_of, self.deps_of
            seen: set = set()
            todo = [d for a in self.above if state_of(a) is not None for d in deps_of(a)]
            while todo:  # (each step once: O(what they wait for), once per collected submission)
                x = todo.pop()
                if x not in seen and state_of(x) is not None:
                    seen.add(x)
                    todo += deps_of(x)
            self.seen = seen
        x = sid
        while x is not None:
            if x in self.seen:
                return True
            x = self.owner_of(x)
        return False


def not_made(inp: str, producer: str, state: str | None, absent) -> str | None:
    """Why a child cannot read `inp`, an output of another family's `producer` that has
    succeeded or whose family its own waited for, or None: it may, without a dependency.
    A producer that ended without success must have left the file on disk (`absent`:
    the inputs not on disk)."""
    if state in S.GOOD or state not in S.FINAL or inp not in absent:
        return None
    return f"{inp!r} is an output of {producer!r}, which ended {state} without making it, and it does not exist"
