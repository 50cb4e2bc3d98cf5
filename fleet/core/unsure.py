"""A step handed to a node ahead whose start cannot be ruled out (the crashfuzz audit's F4).

A queued step (fleet.core.window) starts on its node the moment the step it waits for
is reaped there, and the node says so afterwards. When the node is lost, or its zygote
dies, before that word comes, nobody knows whether it started: its process may have run,
and written its outputs, as attempt n. Before 2026-12-07 it was said "lost before it
started" and ran again as the same attempt n: a step with side effects could not tell
its two runs apart, and the first was recorded nowhere.

The rule: such a step is ready again with the next attempt number. Attempt n is spent
(its `unqueued` record says the step may have started, `may_have_started`), but counts
against no retry (Job.unsure): the step most likely never ran, and one with no retries
left is not failed for its node's death. It has no attempt record either, so it counts
toward no `--max-attempts`. What can be ruled out is ruled out where the facts are: a
node's agent hands a new zygote the launches queued behind a step the dead zygote never
reaped (fleet.node.rezygote), with their attempts; the coordinator, which hears nothing
more from a lost node, can rule out none of its queued steps.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Unqueued:
    """A queued step left its node's window: it is ready again. `may_have_started`:
    its node or zygote died before its start could be heard, so `attempt` is spent and
    its next run is attempt + 1 (not counted against its retries); else it surely did
    not start (dropped, taken back, or the drain), and the attempt was not used."""

    step: str
    attempt: int
    reason: str
    may_have_started: bool = False


def spend(job, reason: str) -> Unqueued:
    """The Unqueued of `job`, which may have started: its attempt is spent (the next
    run has the next number), counted against no retry."""
    said = Unqueued(job.spec.id, job.attempt, f"{reason}; it may have started there: it runs again as attempt "
                    f"{job.attempt + 1}", True)
    job.attempt += 1
    job.unsure += 1
    return said
