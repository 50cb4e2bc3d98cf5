"""Whether a lease, a registration or a claim another fleet refreshes has gone stale,
judged on this host's own monotonic clock.

Its age as `time.time() - st_mtime` compares this host's clock with the clock that set
the mtime (the holder's host, or the file server's): a fleet whose clock is ahead of
the holder's by --stale-after found a live holder's lease stale at its first look and
took it over, and every step ran twice (before 2026-12-07). So a file counts as stale
only once this process has SEEN it unchanged (same inode, mtime and size: a refresh or
a rewrite changes them) for long enough on its own monotonic clock:

- for --stale-after, whatever its mtime says (a holder whose clock or file server is
  far behind is still taken over, that long after this fleet began to watch it), but
  never for less than `confirm_s` (below, a --stale-after shorter than two of the
  holder's refresh intervals found a live holder's file unchanged between two of its
  refreshes, and a second fleet ran the live fleet's steps again: before 2026-12-07), or
- for `confirm_s` (the holder's refresh interval twice, plus MARGIN_S), when its mtime
  also says it is --stale-after old: a crashed holder's lease, long dead, is taken over
  within tens of seconds, yet a live holder, which changes the file every refresh
  interval, is never found unchanged that long, whatever the clocks say.

The mtime alone never decides it: on agreeing clocks a holder whose loop is held up
keeps --stale-after of grace since its last refresh, as before; with clocks apart it
keeps at least `confirm_s`. One stat per look, as before: nothing more is read.
"""

from __future__ import annotations

import os
import time

MARGIN_S = 2.0   # beyond two refresh intervals: a holder's loop turn, the file system's mtime granularity
# Files watched at once, at most: the claims of other fleets' steps this fleet looked at can
# be many on a shared run directory of a million steps. Past it every watch starts again,
# which only puts verdicts off (never makes one sooner): memory stays bounded.
MAX_WATCHED = 100_000


def signature(st: os.stat_result) -> tuple:
    """What a refresh (utime) or a rewrite (rename over it) changes."""
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def confirm_s(refresh_s: float) -> float:
    """How long a file refreshed every refresh_s must be seen unchanged before its mtime
    may say it is stale."""
    return 2.0 * refresh_s + MARGIN_S


def refresh_of(rec: dict, default: float) -> float:
    """The refresh interval a record's writer says it keeps (`refresh_s`, since
    2026-12-07), else `default` (what an older fleet kept: --stale-after/4, assumed ours)."""
    r = rec.get("refresh_s") if isinstance(rec, dict) else None
    return float(r) if isinstance(r, (int, float)) and 0 < r < 1e9 else default


def stale(unchanged_s: float, mtime_age: float, stale_after: float, refresh_s: float) -> bool:
    """The verdict (see the module's docstring)."""
    confirm = confirm_s(refresh_s)
    return unchanged_s >= max(stale_after, confirm) or (unchanged_s >= confirm and mtime_age >= stale_after)


def stale_in(unchanged_s: float, mtime_age: float, stale_after: float, refresh_s: float) -> float:
    """Seconds until `stale` says so, if the file stays unchanged (0: it does now)."""
    confirm = confirm_s(refresh_s)
    later = max(confirm - unchanged_s, stale_after - mtime_age)
    return max(0.0, min(max(stale_after, confirm) - unchanged_s, later))


class Sightings:
    """Since when (this process's monotonic clock) each file has looked the same."""

    def __init__(self):
        self._seen: dict[str, tuple[tuple, float]] = {}

    def unchanged_for(self, path, st: os.stat_result, now: float | None = None) -> float:
        """Seconds this process has seen the file at `path` as `st` shows it (0: new or changed)."""
        key, sig = os.fspath(path), signature(st)
        now = time.monotonic() if now is None else now
        cur = self._seen.get(key)
        if cur is None or cur[0] != sig:
            if cur is None and len(self._seen) >= MAX_WATCHED:
                self._seen.clear()
            self._seen[key] = (sig, now)
            return 0.0
        return now - cur[1]

    def forget(self, path) -> None:
        """The file is gone: a new one there is new."""
        self._seen.pop(os.fspath(path), None)


SEEN = Sightings()  # one per process: every look at a file adds to the same watch
