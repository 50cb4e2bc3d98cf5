"""Ordering names as people number them."""

from __future__ import annotations

import re

_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> list:
    """node2 before node10: digit runs compare as numbers."""
    return [int(t) if t.isdigit() else t for t in _DIGITS.split(name)]
