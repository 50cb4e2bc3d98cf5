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


def next_blank(ctx, stage: str = "") -> None:
    """Asks for ``stage`` (blank) in every phase (the old code ran it again at its first stage)."""
    _note(ctx)
    if ctx.phase > 5:
        return  # (never reached since 2026-12-06: keeps the old code's loop finite)
    raise fleet.Next(stage)


def restart_always(ctx) -> None:
    """Restarts whatever it finds (but past 25 restarts, never reached since 2026-12-06:
    keeps the old code's loop finite)."""
    _note(ctx)
    if ctx.restarts > 25:
        return
    with open("work.txt", "w") as f:
        f.write("some work\n")
    raise fleet.Restart()


def kinds(ctx) -> None:
    """The Python kinds of the context's sequences, for `fleet step` and `fleet run` alike."""
    _note(ctx, cores=type(ctx.cores).__name__, gpus=type(ctx.gpus).__name__,
          placement=type(ctx.placement).__name__,
          slot=[type(x).__name__ for x in ctx.placement[0]] if ctx.placement else [],
          inputs=type(ctx.inputs).__name__, outputs=type(ctx.outputs).__name__,
          hashable=_hashable(ctx))


def _hashable(ctx) -> bool:
    try:
        hash((ctx.cores, ctx.gpus, ctx.placement, ctx.inputs, ctx.outputs))
    except TypeError:
        return False
    return True
