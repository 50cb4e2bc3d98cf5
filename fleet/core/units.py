"""Memory sizes as people write them in suite files and on the command line."""

from __future__ import annotations

import re

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    # Bare letters follow Slurm's --mem convention: binary multiples.
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_memory(value: object) -> int:
    """Bytes from an int (bytes) or a string such as "4GiB", "512MB" or "16G".

    Raises ValueError with a message that says what was expected.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a size such as \"4GiB\" or a number of bytes, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a size cannot be negative, got {value}")
        return value
    if isinstance(value, str):
        m = _SIZE.match(value)
        if m and m.group(2).lower() in _UNITS:
            return int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    raise ValueError(f"expected a size such as \"4GiB\", \"512MB\" or a number of bytes, got {value!r}")


def format_memory(n: int) -> str:
    """A short human form of a byte count ("1.5GiB")."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n}B"
