"""Steps that submitted steps and steps that ran in stages, for `fleet report`.

A child's id is `<parent id>/<given id>` (fleet.core.childsteps), and its `step`
record names its parent (parent_of, below, which the listing of families and the
floor, fleet.report.floor, both go by). A parent's
waits for its children, a step's stages and restarts are read from how its attempts
ended (wait, next with "next stage '<name>'", restart: fleet.node.protocol).
"""

from __future__ import annotations

from fleet.core import states as S
from fleet.report.model import Step


def on_entered(g, rec) -> None:
    """An `entered` record: the submission is all in (ingest's handler)."""
    g.entered.add((rec.fleet, rec.submission))


def parent_of(g, rec) -> str | None:
    """The step that submitted the step a `step` record declares, if a child: the one
    its record names (`parent`, from 2026-12-07). In older streams, for a step declared
    after its submission was all in (its `entered` record: a suite's steps are declared
    before it, children only later, counted in their parent's submission), the step
    its id names before a "/" (the longest such). Before 2026-12-07 the floor took the
    cut alone: a suite's `s/0` declared by a later `fleet run` in the same fleet as `s`
    was a child of `s`."""
    if rec.parent is not None:
        return rec.parent if isinstance(rec.parent, str) else None
    if (rec.fleet, rec.submission) in g.entered:
        # The longest prefix before a "/" that names a step declared before it, as the
        # coordinator takes a child's parent (fleet.core.childsteps.parent_in): an array
        # child `p/c/0` is p's (before 2026-12-07 the last cut, `p/c`, no step).
        return named_by(rec.step, g.steps)
    return None


def named_by(sid: str, steps) -> str | None:
    """The longest of sid's prefixes before a "/" that is in `steps`, or None."""
    cut = sid.rfind("/")
    while cut > 0:
        if sid[:cut] in steps:
            return sid[:cut]
        cut = sid.rfind("/", 0, cut)
    return None


def families(steps: dict[str, Step], by_cut: bool = False) -> list[dict]:
    """One entry per step that has children or ran in phases, parents before their
    children (depth-first, in declaration order): id, depth, children (direct), their
    outcomes, waits, stages, restarts. A child is what parent_of said when its record
    was read; `by_cut` (a stream with no `entered` record, written before 2026-12-04):
    the step its id names before a "/" (named_by). Before 2026-12-07 the id cut at its
    last "/" was used always, so a suite's `s/0` beside a suite's `s` was listed as its
    child, and an array child `p/c/0` was not listed."""
    kids: dict[str, list[str]] = {}
    of: dict[str, str] = {}
    for sid, s in steps.items():
        parent = named_by(sid, steps) if by_cut else s.parent
        if parent and parent in steps and parent != sid:
            kids.setdefault(parent, []).append(sid)
            of[sid] = parent
    out: list[dict] = []

    def visit(sid: str, depth: int) -> None:
        s = steps[sid]
        ends = [a.outcome for a in s.attempts]
        stages = [a.reason.split("'")[1] for a in s.attempts
                  if a.outcome == S.NEXT and a.reason.count("'") >= 2]
        mine = kids.get(sid, [])
        if mine or any(o in (S.WAIT, S.NEXT, S.RESTART) for o in ends):
            by: dict[str, int] = {}
            for k in mine:
                by[steps[k].outcome] = by.get(steps[k].outcome, 0) + 1
            out.append(dict(step=sid, depth=depth, outcome=s.outcome, children=len(mine), by_outcome=by,
                            waits=ends.count(S.WAIT), stages=stages, restarts=ends.count(S.RESTART)))
        for k in mine:
            walk(k, depth + 1)

    seen: set[str] = set()  # (a cycle of parents, which no stream should hold, is visited once)

    def walk(sid: str, depth: int) -> None:
        if sid in seen:
            return
        seen.add(sid)
        visit(sid, depth)

    for sid in steps:
        if sid not in of:
            walk(sid, 0)
    return out


def lines(fams: list[dict], limit: int = 20) -> list[str]:
    """The report's text for them: children indented under their parents."""
    if not fams:
        return []
    label = "children" if any(f["children"] for f in fams) else "stages"
    out = [f"  {label:<13} {heading(fams)}:"]
    for f in fams[:limit]:
        out.append(f"    {'  ' * f['depth']}{f['step']} [{f['outcome']}]: " + what(f))
    if len(fams) > limit:
        out.append(f"    ... and {len(fams) - limit} more (--json has them all)")
    return out


def heading(fams: list[dict]) -> str:
    """What the entries are: children (how many, of how many parents), or stages only."""
    parents = [f for f in fams if f["children"]]
    total = sum(f["children"] for f in parents)
    return (f"{total} submitted by {len(parents)} step(s); stages and waits" if parents
            else "steps that went on in stages")


def what(f: dict) -> str:
    """One entry's children by outcome, waits for them, stages and restarts, in words."""
    out = []
    if f["children"]:
        out.append(f"{f['children']} child{'ren' if f['children'] != 1 else ''} ("
                   + ", ".join(f"{v} {k}" for k, v in sorted(f["by_outcome"].items())) + ")")
    if f["waits"]:
        out.append(f"waited for children {f['waits']} time(s)")
    if f["stages"]:
        out.append("stages " + " -> ".join(f["stages"]))
    if f["restarts"]:
        out.append(f"restarted {f['restarts']} time(s)")
    return "; ".join(out)
