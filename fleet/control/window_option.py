"""The options of a node's step cycle, of `fleet up` and `fleet run`: `--window`, how
many steps the coordinator may hand each node ahead of time (fleet.core.window), and
`--report-hold`, how long an agent holds step reports to send them together
(fleet.control.liveness.report_hold). Kept here, and handed from the options to the
coordinator's command line through click's context, so that the commands' signatures
need not carry them."""

from __future__ import annotations

import click

_KEY = "fleet.window"
_HOLD = "fleet.report_hold"


def option(f):
    """Add `--window N` to a command that starts a coordinator."""
    return click.option("--window", type=click.IntRange(0), default=None, expose_value=False, callback=_keep,
                        show_default="the node's cores",
                        help="steps each node may be handed ahead of time, to start the moment a running "
                             "step there ends (0: none)")(f)


def hold_option(f):
    """Add `--report-hold SECONDS` to a command that starts a coordinator."""
    return click.option("--report-hold", type=click.FloatRange(min=0), default=None, expose_value=False,
                        callback=_keep_hold, show_default="the nodes / 5,000 s, at most 0.5 s; none under 10 nodes",
                        help="seconds an agent holds step reports after sending some, to send what comes "
                             "meanwhile in one message (0: each at once)")(f)


def _keep(ctx: click.Context, param, value):
    ctx.meta[_KEY] = value
    return value


def _keep_hold(ctx: click.Context, param, value):
    ctx.meta[_HOLD] = value
    return value


def args() -> list[str]:
    """The coordinator's `--window` and `--report-hold` arguments for the command being
    run ([] for their defaults)."""
    ctx = click.get_current_context(silent=True)
    meta = ctx.meta if ctx is not None else {}
    window, hold = meta.get(_KEY), meta.get(_HOLD)
    return (([] if window is None else ["--window", str(window)])
            + ([] if hold is None else ["--report-hold", str(hold)]))


def value() -> int | None:
    """The `--window` given to the command being run (None: not given, the node's cores)."""
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(_KEY) if ctx is not None else None
