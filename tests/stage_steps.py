"""Step functions for the tests of what a step may ask for as it goes on
(tests/node/test_stage_requests.py): stages too long or empty, restarts for ever, and
the context's kinds. Each notes what it saw in ``seen.jsonl`` of the run directory."""

from __future__ import annotations

import json
import os

import fleet


def _note(ctx, **what) -> None:
    with open(os.path.join(ctx.run_dir, "seen.jsonl"), "a") as f:
        f.write(json.dumps({"step": ctx.id, "phase": ctx.phase, "stage_len": len(ctx.stage),
                            "restarts": ctx.restarts, **what}) + "\n")


def next_stage(ctx, size: int) -> None:
    """Asks once for a stage of ``size`` bytes ("y" each), then ends."""
    _note(ctx)
    if ctx.phase == 0:
        raise fleet.Next("y" * size)
