"""A stop from outside: the batch system ending the job under the fleet.

When a job is cancelled, or reaches its time limit with no warning signal asked for,
Slurm (or PBS) sends SIGTERM to every process of the job at about the same moment,
and SIGKILL after its KillWait: the agents, their zygotes and every step. The steps
then end "failed" (exit status 143: a shell or a program that catches SIGTERM) or
"terminated" (killed by SIGTERM), which is not how they would have ended: such an end
is `interrupted` (no attempt used; the next run runs the step again), as at a drain.

The agent knows: it got the same signal. From the moment it did, every exit of its
steps that is a failure, a termination or a success is relayed as interrupted
(:func:`relabel`): a shell whose command the SIGTERM killed goes on and may exit 0,
and such a step must not be taken for done. The batch system signals the processes
one by one, so a step may die and be reaped a moment before its agent's signal
arrives: an exit that looks like that (a SIGTERM, SIGHUP or SIGINT the fleet did not
send, or the 128 + signal status of a program that caught one; :func:`doubtful`) is
held for :data:`DOUBT_S` before it is relayed as it is, and relabelled if the agent's
signal comes meanwhile; while one is held, every other exit (a success too) is held
with it. Exits the fleet caused (timed_out, cancelled) and memory's verdict
(out_of_memory) keep their outcome. (The zygote, which gets the signal too, reports
what it reaps from then on as terminated, "stopped with its node", whatever its status,
and such an exit is doubtful too: fleet.node.stopping.WITH_NODE.)

The coordinator takes an interrupted exit, or an agent's goodbye naming a signal
(P.Ok.signal), for the allocation ending: it drains (fleet.control.drain.Drain.outside).

Slurm's warning signal asked for without ``B:`` (``--signal=USR1@300``) goes to every
process of the job's steps, not to the batch shell: the agent and its zygote take SIGUSR1
and SIGUSR2 (they would die of them), the agent says so at once (``P.Ok("warned")``) and
the coordinator drains, as at the warning the job script passes on. The steps it killed
are held as above, so the drain comes first. Every step running when the agent took the
warning (and every exit held in doubt then) got it too: its exit is relayed as
interrupted whatever it is, a success too (:class:`WarningSignal`), as after SIGTERM.
Slurm signals the deepest processes first: the steps, then the zygote, then the agent.
So the zygote says it took the warning (``P.Ok("warned")`` on its pipe, before the exits
it reaps from then on) and the agent takes that as its own signal: a shell's exit 0 that
its agent's signal would come too late for is caught (one reaped before the zygote's
own signal came cannot be, and keeps its outcome: docs/operations.md). A shell whose command the warning
killed goes on and exits 0 (so does a program that catches the warning, checkpoints and
exits), and before 2026-12-06 that was taken for the step's success: it was recorded
done and its dependents started.
"""

from __future__ import annotations

import dataclasses
import signal

from fleet.core import states as S
from fleet.node.stopping import WITH_NODE_REASON
from fleet.wire import messages as P

DOUBT_S = 0.5  # how long an exit that may be the job's end waits for the agent's own signal
# Exits of a step that the job's end may have caused: a success too, a shell's exit 0
# after the batch system's SIGTERM killed its command (and the shell went on).
RELABELLED = frozenset({S.FAILED, S.TERMINATED, S.SUCCEEDED})
_FAILURES = frozenset({S.FAILED, S.TERMINATED})
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGHUP, signal.SIGINT})
# The batch system's warning, where it reaches every process of the job's steps (Slurm's
# --signal=USR1@300 without B:): the agent and zygote live on and the fleet drains.
WARNING_SIGNALS = frozenset({signal.SIGUSR1, signal.SIGUSR2})
_DOUBTED = STOP_SIGNALS | WARNING_SIGNALS
_STATUSES = frozenset(128 + s for s in _DOUBTED)


def doubtful(msg: P.Exited) -> bool:
    """Whether ``msg`` may be a step the batch system just stopped (see the module doc)."""
    return msg.outcome in _FAILURES and (msg.signal in _DOUBTED or msg.returncode in _STATUSES
                                         or (msg.error or "").startswith(WITH_NODE_REASON))


def relabel(msg: P.Exited, why: str, warned: bool = False) -> bytes | None:
    """``msg`` as an interrupted exit (encoded) if the job's end is how it ended
    (``why``: the signal its agent got; ``warned``: the batch system's warning, which
    reached the step while it ran); None if it keeps its own outcome."""
    if msg.outcome not in RELABELLED:
        return None
    how = "exit status 0" if msg.outcome == S.SUCCEEDED else msg.error or msg.outcome
    cause = f"the batch system's warning signal ({why}) reached it" if warned else f"its agent got {why}"
    return P.encode(dataclasses.replace(
        msg, outcome=S.INTERRUPTED, error=f"{how}; {cause} (the job ending: no attempt used)"))


class WarningSignal:
    """The batch system's warning signal on one node (an agent's record): which steps
    it reached (those running when the agent or its zygote took it, and those whose
    exit was held in doubt then), by which signal, and whether the coordinator was told."""

    def __init__(self) -> None:
        self.steps: set[tuple[str, int]] = set()  # (step, attempt)
        self.by = ""
        self.said = False

    def took(self, name: str, running) -> None:
        """The warning ``name`` (SIGUSR1) came; ``running``: the (step, attempt) it reached."""
        self.by = name
        self.steps.update(running)

    def reached(self, msg: P.Exited) -> bool:
        """Whether the warning reached the step whose exit ``msg`` is."""
        return (msg.step, msg.attempt) in self.steps

    def relabel(self, msg: P.Exited) -> bytes | None:
        """``msg`` interrupted (see :func:`relabel`); the step is forgotten."""
        self.steps.discard((msg.step, msg.attempt))
        return relabel(msg, self.by, warned=True)

    def first_word(self) -> bool:
        """True the first time only: the coordinator is to hear of the warning now."""
        first, self.said = not self.said, True
        return first


# An agent that stopped because its coordinator went silent (fleet.node.agent, at its fence)
# says so in the `error` of each failure of the steps it stopped (fencing.UNHEARD): the
# SIGKILL after its grace, or a trap's exit status, is its doing, not the step's.
_OWN_FAILURES = frozenset({S.FAILED, S.TERMINATED})


def unheard(msg: P.Exited, payload: bytes, why: str) -> bytes:
    """``payload``, or, if its step failed while its agent stopped for the coordinator's
    silence (``why``: "no word from the coordinator at ... for 7.5 s"), the same exit
    saying so (its outcome as it was)."""
    if not why or msg.outcome not in _OWN_FAILURES:
        return payload
    how = msg.error or (f"killed by {_name(msg.signal)}" if msg.signal else f"exit status {msg.returncode}")
    return P.encode(dataclasses.replace(msg, error=f"{how}; its agent stopped it: {why}"))


def _name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:  # (a number Python has no name for)
        return f"signal {signum}"
