"""Step functions for tests/node/test_log_lines.py: output that ends without a newline."""

from __future__ import annotations

import sys


def partial_line(ctx) -> None:
    """Writes a line it does not end, then fails (so its retry's header comes next)."""
    sys.stdout.write(f"call progress {ctx.attempt}")
    sys.stdout.flush()
    raise SystemExit(1)


def reopen_stdout() -> None:
    """Writes a line, then writes through open("/dev/stdout", "w"), which truncates the
    log (fleet.node.logcut), and fails."""
    print("first line", flush=True)
    with open("/dev/stdout", "w") as out:
        out.write("written through /dev/stdout\n")
    raise SystemExit(1)
