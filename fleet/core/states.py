"""The life of a step, in one table.

Theory of operation: a submitted step WAITS until every dependency has SUCCEEDED,
then is READY; the scheduler STARTS it (RUNNING) when it fits. Its exit makes it
SUCCEEDED, FAILED (non-zero status or an exception) or TERMINATED (killed by a
signal); a step whose node was lost is LOST. A failed, terminated or lost step with
retries left goes back to READY with the next attempt number. A step that ends
without success blocks its descendants (BLOCKED) and nothing else. A step that can
never fit the allocation is UNRUNNABLE. A step whose completion marker says it
already succeeded is SKIPPED (counts as success for its dependents).

A step whose `timeout` passed is stopped by its zygote (SIGTERM, SIGKILL after its
`grace`) and ends TIMED_OUT: retried like a failure. A step `fleet cancel` names is
CANCELLED: if it runs, its zygote stops it the same way; if it has not started, it
never does. A cancelled step is never retried, and blocks its descendants.

A step its node's memory limit killed for passing its own `memory` (a cgroup's, or the
agent's watchdog: fleet.node.memlimit) ends OUT_OF_MEMORY. It is not retried, as Slurm
does not requeue OUT_OF_MEMORY: the same step on the same inputs would pass its
declaration again. (A step the kernel's OOM killer took while others held the memory
ends TERMINATED, and is retried like any failure.)

Several fleets may share one run directory. A step another live fleet has claimed,
or that belongs to another shard, is ELSEWHERE: it holds nothing here and waits for
that fleet's marker (SKIPPED on success, FAILED otherwise), or comes back to READY
when its claim goes stale and is adopted. A step whose attempts across every fleet
reached the limit is STOPPED, and reported rather than retried forever.

A step may also end an attempt early to be run again (fleet.core.phases): it WAITS
FOR ITS CHILDREN (SUSPENDED: it holds nothing and uses no attempt; READY again once
every step it submitted is final), asks for its NEXT stage or a RESTART (READY again at
once), or says it is BROKEN (final, never retried).

A step the fleet itself stopped (`fleet down`, Ctrl-C, a signal to the coordinator:
its agents stop their steps) ends INTERRUPTED. That is not an attempt of the step: it
is not counted against its retries or the attempt limit, leaves no final outcome on
disk (the next `fleet run` runs it again), and no retry or blocked dependent follows
from it, since nothing is decided after a fleet stops. The scheduler never sees it;
the coordinator records it (fleet.control.outcomes). The one exception is the drain
before the allocation's end (fleet.core.deadline): a step stopped there ends
INTERRUPTED in the scheduler too, so that its resources are free and nothing follows.
"""

from __future__ import annotations

WAITING = "waiting"
READY = "ready"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
TERMINATED = "terminated"
LOST = "lost"
BLOCKED = "blocked"
UNRUNNABLE = "unrunnable"
SKIPPED = "skipped"
ELSEWHERE = "elsewhere"
STOPPED = "stopped"
TIMED_OUT = "timed_out"
CANCELLED = "cancelled"
OUT_OF_MEMORY = "out_of_memory"
INTERRUPTED = "interrupted"  # recorded by the coordinator only (see above)
SUSPENDED = "suspended"  # waiting for its children, holding nothing (fleet.core.phases)
BROKEN = "broken"  # the step said it cannot succeed: final, never retried
# How an attempt may end early to run again (fleet.core.phases): exit outcomes, not states.
WAIT, NEXT, RESTART = "wait", "next", "restart"
QUEUED = "queued"  # handed to a node ahead of time, behind a running step (fleet.core.window)

# (state, what happened) -> next state
TRANSITIONS: dict[tuple[str, str], str] = {
    (WAITING, "deps_met"): READY,
    (WAITING, "dep_failed"): BLOCKED,
    (WAITING, "impossible"): UNRUNNABLE,
    (WAITING, "already_done"): SKIPPED,
    (READY, "start"): RUNNING,
    (READY, "impossible"): UNRUNNABLE,
    (RUNNING, "succeeded"): SUCCEEDED,
    (RUNNING, "failed"): FAILED,
    (RUNNING, "terminated"): TERMINATED,
    (RUNNING, "lost"): LOST,
    (RUNNING, "timed_out"): TIMED_OUT,
    (RUNNING, "cancelled"): CANCELLED,
    (RUNNING, "out_of_memory"): OUT_OF_MEMORY,
    (WAITING, "cancel"): CANCELLED,
    (READY, "cancel"): CANCELLED,
    (RUNNING, "retry"): READY,
    (RUNNING, "stopped"): STOPPED,
    (RUNNING, "interrupted"): INTERRUPTED,  # the drain before the allocation's end (fleet.core.deadline)
    (RUNNING, "elsewhere"): ELSEWHERE,
    (WAITING, "foreign"): ELSEWHERE,
    (ELSEWHERE, "done_elsewhere"): SKIPPED,
    (ELSEWHERE, "failed_elsewhere"): FAILED,
    (ELSEWHERE, "reclaim"): READY,
    (RUNNING, "wait"): SUSPENDED,
    (RUNNING, "requeue"): READY,
    (SUSPENDED, "resume"): READY,
    (SUSPENDED, "cancel"): CANCELLED,
    (SUSPENDED, "children_ended"): SUCCEEDED,  # it succeeded before its children ended (fleet.core.phases)
    (RUNNING, "broken"): BROKEN,
    # A node's window (fleet.core.window): not an attempt until it starts.
    (READY, "queue"): QUEUED,
    (QUEUED, "start"): RUNNING,
    (QUEUED, "unqueue"): READY,
    (QUEUED, "cancel"): CANCELLED,
    (QUEUED, "stopped"): STOPPED,
    (QUEUED, "elsewhere"): ELSEWHERE,
    (QUEUED, "failed"): FAILED,  # its launch could not be made
    # Promoted as its predecessor ended, then its node's word in the same batch that it
    # dropped it unstarted (fleet.core.window.unbegun): queued again, to be judged so.
    (RUNNING, "unbegin"): QUEUED,
}

FINAL = frozenset({SUCCEEDED, FAILED, TERMINATED, LOST, BLOCKED, UNRUNNABLE, SKIPPED, STOPPED, TIMED_OUT, CANCELLED,
                   BROKEN, OUT_OF_MEMORY})
GOOD = frozenset({SUCCEEDED, SKIPPED})
EXIT_OUTCOMES = frozenset({SUCCEEDED, FAILED, TERMINATED, LOST, STOPPED, TIMED_OUT, CANCELLED, OUT_OF_MEMORY,
                           WAIT, NEXT, RESTART, BROKEN})
CONTROL = frozenset({WAIT, NEXT, RESTART, BROKEN})  # fleet.core.phases handles these
# Exits of a step that runs again at once, before the steps queued at its priority: its
# node drops the steps queued behind it instead of starting them (fleet.node.queued).
# A wait too: its children, if any are pending, come before new work of its priority
# (fleet.core.phases), else it runs again at once, as after a next.
AT_ONCE = frozenset({NEXT, RESTART, WAIT})
NOT_RETRIED = frozenset({STOPPED, CANCELLED, OUT_OF_MEMORY})  # exits that end a step whatever its retries
# The ends of an attempt (or a step) a user must look at: it did not succeed by itself.
# Not a cancel (the user's own doing), an interrupt (the fleet's: it runs again) nor a
# block (the failure that caused it is among these already).
FAILURES = frozenset({FAILED, TERMINATED, TIMED_OUT, OUT_OF_MEMORY, LOST, UNRUNNABLE, STOPPED, BROKEN})


class IllegalTransition(RuntimeError):
    pass


def advance(state: str, what: str) -> str:
    """The next state, or IllegalTransition: a bug in the caller, never ignored."""
    try:
        return TRANSITIONS[(state, what)]
    except KeyError:
        raise IllegalTransition(f"a {state} step cannot take {what!r}") from None
