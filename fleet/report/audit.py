"""`fleet audit RUN_DIR`: what the shared filesystem says about every step, whatever
fleets ran it — and whether anything is missing or ran successfully more than once."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from fleet.wire import records
from fleet.wire.events import StepDeclared, read_records


@dataclass(frozen=True)
class StepAudit:
    step: str
    status: str              # succeeded | failed | terminated | lost | stopped | blocked | unrunnable | running | missing
    reason: str = ""
    holder: str = ""         # for running: the fleet holding the claim
    fresh: bool | None = None  # for running: refreshed within stale_after
    successes: int = 0
    attempts: int = 0


@dataclass(frozen=True)
class Audit:
    steps: dict[str, StepAudit] = field(hash=False)

    @property
    def missing(self) -> list[str]:
        return [s for s, a in self.steps.items() if a.status == "missing"]

    @property
    def duplicates(self) -> list[str]:
        return [s for s, a in self.steps.items() if a.successes > 1]

    @property
    def ok(self) -> bool:
        return not self.missing and not self.duplicates

    def to_json(self) -> dict:
        counts: dict[str, int] = {}
        for a in self.steps.values():
            counts[a.status] = counts.get(a.status, 0) + 1
        return {"ok": self.ok, "counts": counts, "missing": self.missing, "duplicates": self.duplicates,
                "steps": {s: asdict(a) for s, a in self.steps.items()}}


def known_steps(run_dir: Path, suite_steps=()) -> dict[str, object]:
    """Step ids from the event stream (every fleet that used the run dir) and a suite."""
    ids: dict[str, object] = {}
    path = run_dir / "events.jsonl"
    if path.exists():
        for rec in read_records(path):
            if type(rec) is StepDeclared and rec.step:
                ids.setdefault(rec.step, None)
    for s in suite_steps:
        ids[s.id] = s
    return ids


def audit(run_dir: Path, suite_steps=(), stale_after: float = 600.0) -> Audit:
    run_dir = Path(run_dir)
    out: dict[str, StepAudit] = {}
    for sid, spec in known_steps(run_dir, suite_steps).items():
        tries = records.attempts(run_dir, sid)
        wins = sum(1 for t in tries if t.get("outcome") == "succeeded")
        done = records.is_done(run_dir, spec) if spec is not None else records.has_done(run_dir, sid)
        base = dict(step=sid, successes=wins, attempts=len(tries))
        if done:
            out[sid] = StepAudit(status="succeeded", **base)
            continue
        claim = records.read_claim(run_dir, sid)
        if claim is not None:
            rec, age = claim
            fresh = age < stale_after and not records.holder_dead(rec)
            out[sid] = StepAudit(status="running", holder=str(rec.get("fleet")), fresh=fresh,
                                 reason=f"claimed {age:.0f} s ago by {rec.get('fleet')} on {rec.get('host')}"
                                        + ("" if fresh else " (stale)"), **base)
            continue
        final = records.read_final(run_dir, sid)
        if final is not None:
            out[sid] = StepAudit(status=str(final.get("outcome")), reason=str(final.get("reason", "")), **base)
            continue
        out[sid] = StepAudit(status="missing", reason="no outcome and no claim", **base)
    return Audit(out)
