"""The type of every option that is a number of seconds (`fleet up`'s and `fleet run`'s
--timeout, --heartbeat, --heartbeat-timeout, --stale-after and --report-hold, `fleet
audit`'s --stale-after, `fleet status`'s --interval): a finite number within bounds.

click.FloatRange let "nan" through (every comparison with NaN is false, so no bound
refused it) and "inf" past any lower bound: a NaN heartbeat crashed the coordinator
after the run directory was made, a NaN or infinite heartbeat timeout or stale-after
turned losing agents or adopting claims off without a word. Kept in fleet.control
beside window_option, whose --report-hold takes it too.
"""

from __future__ import annotations

import math

import click

# The most any of them takes unless it says less: a year is beyond any allocation, and
# well below what timers take (threading's waits overflow from about 9.2e9 s).
YEAR = 365 * 86400.0


class Seconds(click.ParamType):
    """A finite number of seconds from `least` (more than it if `above`) to `most`
    (`most_said`: how to say `most`, e.g. "a day")."""
    name = "seconds"

    def __init__(self, least: float, most: float = YEAR, above: bool = False, most_said: str = "a year"):
        self.least, self.most, self.above, self.most_said = float(least), float(most), above, most_said

    def convert(self, value, param, ctx):
        try:
            v = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        low_ok = v > self.least if self.above else v >= self.least
        if not (math.isfinite(v) and low_ok and v <= self.most):  # (nan fails every comparison: refused too)
            self.fail(f"{value!r}: give {self.range()}", param, ctx)
        return v

    def range(self) -> str:
        """The values taken, in words."""
        low = f"more than {_num(self.least)}" if self.above else _num(self.least)
        return f"{low} to {_num(self.most)} seconds ({self.most_said})"


def _num(x: float) -> str:
    return str(int(x)) if x.is_integer() else f"{x:g}"  # (31536000, not 3.1536e+07)
