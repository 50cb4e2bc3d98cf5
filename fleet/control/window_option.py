"""`--window` of `fleet up` and `fleet run`: how many steps the coordinator may hand
each node ahead of time (fleet.core.window). Kept here, and handed from the option
to the coordinator's command line through click's context, so that the commands'
signatures need not carry it."""

from __future__ import annotations

import click

_KEY = "fleet.window"


def option(f):
    """Add `--window N` to a command that starts a coordinator."""
    return click.option("--window", type=click.IntRange(0), default=None, expose_value=False, callback=_keep,
                        show_default="the node's cores",
                        help="steps each node may be handed ahead of time, to start the moment a running "
                             "step there ends (0: none)")(f)


def _keep(ctx: click.Context, param, value):
    ctx.meta[_KEY] = value
    return value


def args() -> list[str]:
    """The coordinator's `--window` argument for the command being run ([] for its default)."""
    ctx = click.get_current_context(silent=True)
    value = ctx.meta.get(_KEY) if ctx is not None else None
    return [] if value is None else ["--window", str(value)]


def value() -> int | None:
    """The `--window` given to the command being run (None: not given, the node's cores)."""
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(_KEY) if ctx is not None else None
