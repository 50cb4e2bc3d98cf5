"""The zygote's own signal handling, kept whatever a preloaded module does to it.

The zygote's loop depends on its signal handling (fleet.node.zygote): a SIGCHLD
handler and the wakeup fd wake its poll when a step ends, SIGTERM and SIGHUP stop it,
SIGUSR1/2 are the batch system's warning, SIGINT is the agent's to decide. A module
imported into it may change any of that at import (``signal.signal(SIGCHLD, SIG_IGN)``,
a library's own SIGINT handler, a blocked signal): at fleet start that is harmless,
the zygote sets its handlers after its --preload imports; but a module preloaded while
it serves (a suite's ``preload`` on a `fleet up`) changed them under a running loop,
and with SIGCHLD ignored the kernel reaps every step itself: steps ended and were never
reported (before 2026-12-07). So :func:`snapshot` is taken before such an import and
:func:`restore` puts it back after, saying what the module had changed; the probe
(fleet.node.preload) says the same to the user beforehand.

The steps are not affected either way: each is given default signals, none blocked,
no wakeup fd, as it leaves the zygote (fleet.node.child._detach).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

# What the zygote sets (fleet.node.zygote.Zygote.__init__), and SIGPIPE, which Python
# ignores and a module may set back to default (a write to a closed pipe would kill us).
WATCHED = (signal.SIGCHLD, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGHUP,
           signal.SIGPIPE)


@dataclass(frozen=True)
class Handling:
    """A process's signal handling at one moment: the handlers of WATCHED, the wakeup
    fd, the blocked signals."""

    handlers: tuple
    wakeup_fd: int
    mask: frozenset


def snapshot() -> Handling:
    """This process's signal handling now (reading the wakeup fd sets it back at once)."""
    fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(fd, warn_on_full_buffer=False)
    mask = frozenset(signal.pthread_sigmask(signal.SIG_BLOCK, []))
    return Handling(tuple(signal.getsignal(s) for s in WATCHED), fd, mask)


def changes(before: Handling, after: Handling) -> list[str]:
    """What differs, in words: "the SIGCHLD handler", "the signal wakeup fd", "the blocked signals"."""
    out = [f"the {signal.Signals(s).name} handler" for s, a, b in zip(WATCHED, before.handlers, after.handlers)
           if a != b]
    if before.wakeup_fd != after.wakeup_fd:
        out.append("the signal wakeup fd")
    if before.mask != after.mask:
        out.append("the blocked signals")
    return out


def restore(before: Handling) -> list[str]:
    """Put ``before`` back; returns what had changed (:func:`changes`), empty if nothing."""
    changed = changes(before, snapshot())
    if not changed:
        return changed
    for sig, handler in zip(WATCHED, before.handlers):
        if signal.getsignal(sig) != handler and handler is not None:  # (None: set outside Python, left)
            signal.signal(sig, handler)
    signal.set_wakeup_fd(before.wakeup_fd, warn_on_full_buffer=False)
    signal.pthread_sigmask(signal.SIG_SETMASK, before.mask)
    return changed


def told(module: str, changed: list[str]) -> str:
    """The note for the user: what ``module`` changed, and that the zygote keeps its own."""
    return (f"module '{module}' changes {', '.join(changed)} when imported; the zygote put its own back "
            f"(its steps start with default signals as always)")
