"""The options of a node's step cycle, of `fleet up` and `fleet run`: `--window`, how
many steps the coordinator may hand each node ahead of time (fleet.core.window),
`--window-depth`, how many of them may wait behind one running step (a chain,
fleet.core.windowchain), and `--report-hold`, how long an agent holds step reports to send them together
(fleet.control.liveness.report_hold). Kept here, and handed from the options to the
coordinator's command line through click's context, so that the commands' signatures
need not carry them."""

from __future__ import annotations

import click

from fleet.control.seconds_option import Seconds

_KEY = "fleet.window"
_DEPTH = "fleet.window_depth"
_HOLD = "fleet.report_hold"


def option(f):
    """Add `--window N` and `--window-depth D` to a command that starts a coordinator."""
    f = click.option("--window-depth", type=click.IntRange(1), default=None, expose_value=False,
                     callback=_keep_depth, show_default="1",
                     help="of a node's window, steps that may wait behind one running step, each starting "
                          "when the one before it ends")(f)
    return click.option("--window", type=click.IntRange(0), default=None, expose_value=False, callback=_keep,
                        show_default="the node's cores times the depth",
                        help="steps each node may be handed ahead of time, to start the moment a running "
                             "step there ends (0: none)")(f)


def hold_option(f):
    """Add `--report-hold SECONDS` to a command that starts a coordinator."""
    return click.option("--report-hold", type=Seconds(0), default=None, expose_value=False,
                        callback=_keep_hold, show_default="the nodes / 5,000 s, at most 0.5 s; none under 10 nodes",
                        help="seconds an agent holds step reports after sending some, to send what comes "
                             "meanwhile in one message (0: each at once)")(f)


def _keep(ctx: click.Context, param, value):
    ctx.meta[_KEY] = value
    return value


def _keep_depth(ctx: click.Context, param, value):
    ctx.meta[_DEPTH] = value
    return value


def _keep_hold(ctx: click.Context, param, value):
    ctx.meta[_HOLD] = value
    return value


def args() -> list[str]:
    """The coordinator's `--window`, `--window-depth` and `--report-hold` arguments for
    the command being run ([] for their defaults)."""
    ctx = click.get_current_context(silent=True)
    meta = ctx.meta if ctx is not None else {}
    window, depth, hold = meta.get(_KEY), meta.get(_DEPTH), meta.get(_HOLD)
    return (([] if window is None else ["--window", str(window)])
            + ([] if depth is None else ["--window-depth", str(depth)])
            + ([] if hold is None else ["--report-hold", str(hold)]))


def value() -> int | None:
    """The `--window` given to the command being run (None: not given, the node's cores)."""
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(_KEY) if ctx is not None else None


def depth() -> int:
    """The `--window-depth` given to the command being run (1: not given)."""
    ctx = click.get_current_context(silent=True)
    got = ctx.meta.get(_DEPTH) if ctx is not None else None
    return 1 if got is None else got
