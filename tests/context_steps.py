"""Step functions for tests/control/test_context_in_workers.py: a call step that forks
multiprocessing workers, which ask for the step's context and try to submit children."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import fleet

_ctx = None  # the step's context, as a forked worker inherits it (a global, or a closure)


def _ask(_: int) -> list[str]:
    said = []
    for what, act in (("context", fleet.context),
                      ("submit", lambda: _ctx.submit([{"id": "k", "command": "true"}]))):
        try:
            act()
            said.append(f"{what}: returned")
        except RuntimeError as e:
            said.append(f"{what}: RuntimeError: {e}")
        except Exception as e:  # (what a worker's submit hit before: FileNotFoundError)
            said.append(f"{what}: {type(e).__name__}: {e}")
    return said


def in_workers(ctx):
    """Two forked workers ask; the step itself asks after them; all is written down."""
    global _ctx
    _ctx = ctx
    with multiprocessing.get_context("fork").Pool(2) as pool:
        workers = pool.map(_ask, range(2), chunksize=1)
    Path(ctx.workdir, "seen.json").write_text(json.dumps(
        {"workers": workers, "step_context_is_ctx": fleet.context() is ctx}))
