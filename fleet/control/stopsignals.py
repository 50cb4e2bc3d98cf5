"""The signals that interrupt `fleet run`, and its output once its terminal went away.

Ctrl-C (SIGINT, Python's KeyboardInterrupt), SIGTERM and SIGHUP (the terminal closed,
the ssh connection dropped) interrupt `fleet run` alike: it stops its embedded fleet,
sums up and exits 130 (Ctrl-C, SIGTERM: as before) or 129 (SIGHUP). Before 2026-12-07
SIGHUP killed it at once (129 with no summary, its embedded fleet still stopping in the
background). A `fleet run` started ignoring SIGHUP (nohup) keeps ignoring it.

A terminal that went away answers writes with EIO (a pipe, ssh's, with EPIPE): what
`fleet run` says then is dropped (Quiet), so that saying it cannot cut the fleet's
stopping short, nor turn its exit status into click's 1.
"""

from __future__ import annotations

import contextlib
import errno
import signal
import sys

GONE = (errno.EIO, errno.EPIPE)  # a terminal hung up; a pipe (ssh's) whose reader went away


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP to `fleet run`: handled as its Ctrl-C, with the signal's own exit status."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def interrupt(signum, frame):
    """The handler of SIGTERM and SIGHUP: raise Interrupted, as SIGINT raises KeyboardInterrupt."""
    raise Interrupted(signum)


def status(e: KeyboardInterrupt) -> int:
    """`fleet run`'s exit status after an interrupt: 129 for SIGHUP, else 130 (Ctrl-C,
    SIGTERM: as documented before SIGHUP was handled)."""
    return 129 if getattr(e, "signum", None) == signal.SIGHUP else 130


def stopping() -> tuple[int, ...]:
    """The signals that interrupt `fleet run`: SIGINT, SIGTERM, and SIGHUP unless this
    process was started ignoring it (nohup: a closed terminal must not stop it then)."""
    hup = () if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN and not _caught_hup else (signal.SIGHUP,)
    return (signal.SIGINT, signal.SIGTERM, *hup)


_caught_hup = False  # (SIGHUP was ours to handle: later, its SIG_IGN is ours, not nohup's)


def catch() -> dict:
    """From here on SIGTERM and SIGHUP (unless ignored: stopping) raise Interrupted;
    the handlers they had, to give back."""
    global _caught_hup
    old = {}
    for sig in stopping()[1:]:
        old[sig] = signal.signal(sig, interrupt)
    _caught_hup = _caught_hup or signal.SIGHUP in old
    return old


def ignore() -> None:
    """Every interrupting signal ignored (`fleet run` only exits from here on)."""
    for sig in stopping():
        signal.signal(sig, signal.SIG_IGN)


class Quiet:
    """A text stream whose writes a terminal that went away refuses (EIO, EPIPE) are
    dropped, and every later one with them; other errors are raised."""

    def __init__(self, stream):
        self._stream = stream
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self._stream.write(text)
            except OSError as e:
                self._lost(e)
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except OSError as e:
                self._lost(e)

    def _lost(self, e: OSError) -> None:
        if e.errno not in GONE:
            raise e
        self.gone = True

    def __getattr__(self, name):
        return getattr(self._stream, name)


def quiet(stream=None):
    """sys.stdout and sys.stderr made Quiet (once); `stream` too, if given: its Quiet one."""
    for name in ("stdout", "stderr"):
        s = getattr(sys, name)
        if s is not None and not isinstance(s, Quiet):
            setattr(sys, name, Quiet(s))
    if stream is None or isinstance(stream, Quiet):
        return stream
    for q in (sys.stdout, sys.stderr):
        if isinstance(q, Quiet) and q._stream is stream:
            return q
    return Quiet(stream)


@contextlib.contextmanager
def before_start():
    """`fleet run` before run_suite: reading and checking a big suite takes seconds (3 s
    at 200,000 steps), and Ctrl-C then gave click's `Aborted!` and exit 1 ("a step did
    not succeed"), SIGTERM killed it (143) with no word, SIGHUP likewise (129). Now each
    says so and exits as run_suite would (130, 130, 129): nothing was started."""
    old = catch()
    try:
        yield
    except KeyboardInterrupt as e:
        ignore()
        quiet()
        print("\nfleet: interrupted before anything started", file=sys.stderr, flush=True)
        sys.exit(status(e))
    finally:  # (run_suite catches them again, and gives back these, the process's own)
        for sig, handler in old.items():
            signal.signal(sig, handler)
