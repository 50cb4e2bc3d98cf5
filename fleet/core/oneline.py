"""A reason (or any text a step put there) as one line a terminal shows as written.

A step's reason is its own words: an exception's message with newlines in it
(numpy's "shapes do not match:\\n a: ...") or ANSI colours from a tool's output. Printed
raw, a newline breaks `fleet run`'s one line per step and ESC, CR or BEL reach the
terminal (a line overwritten, the screen recoloured). Every place a reason is printed
(`fleet run`'s lines, `fleet status`, `fleet report`'s text) shows it through `one_line`:
a newline as "\\n", a carriage return as "\\r", a tab as "\\t", any other control character as
"\\xNN" ("\\uNNNN" past 0xff). The records keep the text as it was (JSON escapes it).
"""

from __future__ import annotations

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# C0, DEL and C1 (0x9b is a one-byte CSI to some terminals), and the line and paragraph separators.
_TABLE = {c: _NAMED.get(chr(c), f"\\x{c:02x}") for c in [*range(0x20), *range(0x7f, 0xa0)]}
_TABLE.update({c: f"\\u{c:04x}" for c in (0x2028, 0x2029)})


def one_line(text: str) -> str:
    """`text` with its control characters escaped, so it prints as one line."""
    if text.isprintable():  # (the common case: nothing to translate)
        return text
    return text.translate(_TABLE)
