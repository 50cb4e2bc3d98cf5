"""A submission's look at the run directory: each step's done marker, read as cheaply as
the run directory allows (a listing a directory, the journals where they know a marker).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from fleet.control import journalmarks, markwriter


def read_markers(run_dir: Path, ids) -> dict:
    """Each step's done marker (None: none; no entry: not even its directory). A step's directory is looked for by listing
    its parent once for all its siblings, and a marker is opened only where its step's
    directory exists: a new suite costs a few listings, not one failed open per step.
    A fleet alone in its run directory takes a step's marker from its journals where
    they know it (fleet.control.journalmarks): a rerun costs the listings too."""
    root = Path(run_dir) / "steps"
    exists = functools.partial(_exists, root, {})
    # A step whose directory does not exist has no entry: nothing of it is on disk.
    # This fleet's markers still queued count as written (fleet.control.markwriter).
    queued = markwriter.queued_in(run_dir)
    if not queued and not root.is_dir():  # a first run: no step has a directory, none is looked for
        return {}
    known = journalmarks.of(run_dir)  # alone: the markers as the journals recorded them, no open a step
    if known is None or not len(known):
        return {sid: markwriter.read_done(run_dir, sid) for sid in ids if sid in queued or exists(sid)}
    out, looked = {}, False
    for sid in ids:
        if sid in queued:
            out[sid] = markwriter.read_done(run_dir, sid)
        elif exists(sid):
            if not looked:  # (journals that came since: once, and only if a step's marker is asked for)
                known.news(run_dir)
                looked = True
            rec = known.get(sid)
            out[sid] = rec if rec is not None else markwriter.read_done(run_dir, sid)
    return out


def _exists(root: Path, listed: dict[str, set], sid: str) -> bool:
    """Whether step sid's directory is there, its parent listed once for all its siblings
    (`listed`: parent -> the names in it). A function of the module: as a closure that
    called itself, read_markers made a reference cycle each call, garbage only the cyclic
    collector frees, which the coordinator's heap freezes (fleet.control.heap) kept for
    good instead: every listing a submission made, ~100 bytes a step a submission, before
    2026-12-07."""
    parent, _, name = sid.rpartition("/")
    names = listed.get(parent)
    if names is None:
        if parent and not _exists(root, listed, parent):
            names = set()
        else:
            try:
                names = set(os.listdir(root / parent))
            except OSError:
                names = set()
        listed[parent] = names
    return name in names
