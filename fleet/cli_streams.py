"""The `fleet` command's own standard streams, made safe before a command runs.

- A character the locale's encoding cannot show (a step's reason in Chinese under
  LC_ALL=C or a Latin-1 locale) is written as an escape, not raised: the error used to
  end `fleet run` midway, and the embedded fleet and its running steps with it.
- A stream the caller closed (`fleet run >&-`) is /dev/null, not None.
"""

from __future__ import annotations

import os
import sys


def tolerant() -> None:
    """Make sys.stdout and sys.stderr safe to write to (the module doc)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))
            continue
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if encoding != "utf8" and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
