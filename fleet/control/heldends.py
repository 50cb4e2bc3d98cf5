"""How a step another live fleet held ended there, as a fleet waiting for it reads it
(fleet.control.claims): whether the record the holder said it ended with is on disk
yet, whether a final record is of this fleet's definition, and whether the holder's
record makes the step this fleet's to run (another definition, other runs of its deps,
or an allocation that could not run it)."""

from __future__ import annotations

from pathlib import Path

from fleet.wire import records, spechash


def written(log, me: str, step: str, holder: str, rec: dict | None, run_dir: Path) -> bool:
    """Is the record another fleet said the step ended with (the claims log's `ended_as`)
    on disk, its marker (`rec`) or its final record, or did it say none? The holder says
    a step ended before that record is written: until it is, what is on disk is an
    earlier end (an older marker, this fleet's own, or the holder's earlier failure),
    not this one's. Before 2026-12-07 it was taken for this one: a forced step was
    skipped for this fleet's own old marker, and a step its holder had succeeded failed
    here on the holder's earlier final record."""
    said = log.ended_as.get(step) if holder != me and step in log.ended else None
    if said is None:
        return True
    if said.startswith("final@"):
        return records.final_tag(records.read_final(run_dir, step)) == said
    return rec is not None and records.marker_id(rec) == said


def same(final: dict, spec) -> bool:
    """Is another fleet's final record of this definition (one written before 2026-12-02
    names none: taken as this one)?"""
    h = final.get("spec")
    return h is None or h == records.spec_hash(spec) or h == spechash.legacy_hash(spec)


def other_run(log, spec, holder: str, rec: dict | None, final: dict | None) -> str | None:
    """Why a step a live fleet held and said ended there is this fleet's to run now, or
    None: its holder's record of it (its marker or final record, the holder's own) is of
    another definition, or its success is against other runs of its deps (not done_here:
    the caller looked), or its final record says only that the holder's allocation could
    not run it (it lost its nodes: fleet.control.claims verdict). Two fleets of different
    definitions of a step each ran it in turn then; before 2026-12-07 each waited for
    the other's for ever."""
    if spec.id not in log.ended:
        return None
    if rec is not None and rec.get("outcome") == "succeeded" and rec.get("fleet") == holder:
        if records.succeeded_as(rec, spec):
            return f"fleet {holder} ran it against other runs of its dependencies: run here again"
        return f"fleet {holder} ran another definition of it: run here with this one"
    if final is not None and final.get("fleet") == holder and not same(final, spec):
        return f"fleet {holder} ran another definition of it ({final.get('outcome')}): run here with this one"
    if final is not None and final.get("fleet") == holder and records.of_allocation(final):
        return f"fleet {holder} could not run it ({final.get('reason', '')}): run here"
    return None
