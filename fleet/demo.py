"""The steps of the README's demo suite (examples/demo.toml): a small regression
suite in the shape of an ocean-model test case — a mesh, an initial state, several
forward runs that share them, and an analysis that compares the runs."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path


def mesh(ctx) -> None:
    """Write a tiny 1-D mesh."""
    n = int(ctx.args.get("cells", 200))
    Path(ctx.outputs[0]).write_text(json.dumps({"x": [i / n for i in range(n)]}))
    print(f"mesh: {n} cells on cores {list(ctx.cores)}")


def initial_state(ctx) -> None:
    x = json.loads(Path(ctx.inputs[0]).read_text())["x"]
    Path(ctx.outputs[0]).write_text(json.dumps({"h": [1 + 0.1 * math.sin(2 * math.pi * v) for v in x]}))


def forward(ctx) -> None:
    """Advance a diffusion equation; `dt` and `steps` come from the suite's args."""
    h = json.loads(Path(ctx.inputs[0]).read_text())["h"]
    dt, steps = float(ctx.args["dt"]), int(ctx.args["steps"])
    n = len(h)
    for _ in range(steps):
        h = [h[i] + dt * (h[i - 1] - 2 * h[i] + h[(i + 1) % n]) for i in range(n)]
    time.sleep(float(ctx.args.get("pause", 0)))  # stands in for a longer model run
    Path(ctx.outputs[0]).write_text(json.dumps({"h": h}))
    print(f"forward dt={dt}: mass {sum(h):.6f}")


def analysis(ctx) -> None:
    """Compare the runs: mass is conserved and the decay is monotone in time."""
    masses = {Path(p).stem: sum(json.loads(Path(p).read_text())["h"]) for p in ctx.inputs}
    spread = max(masses.values()) - min(masses.values())
    Path(ctx.outputs[0]).write_text(json.dumps({"masses": masses, "spread": spread}, indent=1, sort_keys=True))
    print(f"analysis: {len(masses)} runs, mass spread {spread:.3e}")
    if spread > 1e-6:
        raise RuntimeError(f"mass is not conserved across runs (spread {spread})")
