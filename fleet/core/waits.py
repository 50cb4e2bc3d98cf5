"""Why a ready step does not start now: a structured reason, rendered to text only at
the edges (the event stream's `reason`, `fleet simulate`, `fleet status`).

The scheduler and the resource pool produce a :class:`WaitReason`; the event record
carries its fields (cause, what the step needs, what was free), so `fleet report`
classifies a wait from the structure and never parses the prose back.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleet.core.resources import Demand
from fleet.core.units import format_memory

# What a step waits for. DEPENDENCY, QUEUED and STOPPING are the report's own (a step with unmet
# dependencies, a ready step with no wait of its own); the scheduler writes the rest.
CORES = "cores"            # fewer cores free in the whole allocation than it needs
GPUS = "gpus"              # fewer GPUs free than it needs
WHOLE_NODE = "whole_node"  # enough in all, but no one node has all of it free together
MEMORY = "memory"          # a node has its cores and GPUs free but not its memory (its figure, or its share)
SPAN = "span"              # may span nodes, but the pieces do not fit across them now
ALONE = "alone"            # serial / concurrent = false: waits for the running steps to end
ELSEWHERE = "elsewhere"    # another fleet holds its claim
DEADLINE = "deadline"      # would not end before the allocation's drain point (fleet.core.deadline)
RESERVED = "reserved"      # what it could use is reserved for another step (detail: that step's id)
DEPENDENCY = "dependency"
QUEUED = "queued"
STOPPING = "stopping"      # its fleet was going down (report-side: a wait after that is not for resources)
OTHER = "other"

CAUSES = (CORES, GPUS, WHOLE_NODE, MEMORY, SPAN, ALONE, ELSEWHERE, DEADLINE, RESERVED, DEPENDENCY, QUEUED, STOPPING,
          OTHER)


@dataclass(frozen=True)
class WaitReason:
    """Why a step waits: the cause, what the step needs, and what was free.

    `memory` is None for a step that takes its proportional share of a node.
    `free_cores`/`free_gpus` are the whole allocation's free counts at the decision.
    `detail` is free text for causes with no resource figures (who holds a claim,
    how many steps run before a serial one)."""

    cause: str
    cores: int = 0
    gpus: int = 0
    memory: int | None = None
    free_cores: int | None = None
    free_gpus: int | None = None
    detail: str = ""

    def text(self) -> str:
        """The reason in words, as `fleet status`, the events and the report show it."""
        if self.cause == CORES:
            return f"needs {_n(self.cores, 'core')}, {self.free_cores} free"
        if self.cause == GPUS:
            return f"needs {_n(self.gpus, 'GPU')}, {self.free_gpus} free"
        if self.cause == SPAN:
            return f"needs {_n(self.cores, 'core')} with {_n(self.gpus, 'GPU')} and its memory across nodes"
        if self.cause in (WHOLE_NODE, MEMORY):
            parts = [_n(self.cores, "core")]
            if self.gpus:
                parts.append(_n(self.gpus, "GPU"))
            if self.memory is not None:
                parts.append(f"{format_memory(self.memory)} of memory")
            elif self.cause == MEMORY:  # the cores are free on a node, their share of its memory is not
                return ("no node has " + ", ".join(parts) + " free together with the cores' share of its memory "
                        "(the step declares no memory, so it takes that share; it may not span nodes)")
            return "no node has " + ", ".join(parts) + " free together (the step may not span nodes)"
        if self.cause == ALONE:
            return f"runs alone: {self.detail}" if self.detail else "runs alone"
        if self.cause == RESERVED:
            return f"held back by a reservation for {self.detail or 'another step'} (needs {_n(self.cores, 'core')})"
        if self.cause == ELSEWHERE:  # the claim's own words, as 0.1 wrote them
            return self.detail or "held by another fleet"
        return self.detail or self.cause


def _n(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def short_of(pool, d) -> WaitReason:
    """Why a ready step of demand `d` does not fit the pool now (moved here unchanged
    from the scheduler, to make room there)."""
    if d.cores > pool.free_cores:
        cause = CORES
    elif d.gpus > pool.free_gpus:
        cause = GPUS
    elif d.span:
        cause = SPAN
    elif pool.fits(Demand(d.cores, d.gpus, 0, d.span, d.unit, d.blocks)):  # (its memory left out: not replace(), 5x dearer)
        # Some node has its cores and GPUs free, none has its memory beside them: the
        # step's own figure, or, declaring none, its cores' share of the node (which steps
        # that declare more than theirs can take). That is what it waits for, not a whole
        # node (before 2026-12-06 a step declaring memory was said to wait for a whole node,
        # even on a one-node fleet). One lookup, as its placing made.
        cause = MEMORY
    else:
        cause = WHOLE_NODE
    return WaitReason(cause, d.cores, d.gpus, d.memory, pool.free_cores, pool.free_gpus)
