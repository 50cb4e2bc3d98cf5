"""The `fleet` command's own standard streams, made safe before a command runs.

- A character the locale's encoding cannot show (a step's reason in Chinese under
  LC_ALL=C or a Latin-1 locale) is written as an escape, not raised: the error used to
  end `fleet run` midway, and the embedded fleet and its running steps with it.
- A stream the caller closed (`fleet run >&-`) is /dev/null, not None.
- A reader that goes away (`fleet run suite.toml | head -3`, a pager quit) silences the
  stream from then on (EPIPE): it no longer ends `fleet run` midway, stopping its
  embedded fleet and interrupting its steps; the suite runs to its end and the exit
  status says how it went.
"""

from __future__ import annotations

import os
import sys


class Hushed:
    """A text stream that drops what is written once its reader is gone (EPIPE); the
    rest is the stream's own."""

    def __init__(self, stream):
        self._stream, self._gone = stream, False

    def write(self, text: str) -> int:
        if not self._gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._hush()
        return len(text)

    def flush(self) -> None:
        if not self._gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._hush()

    def _hush(self) -> None:
        # What the stream still buffers is flushed again at exit: into /dev/null, not an error.
        self._gone = True
        try:
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, self._stream.fileno())
            os.close(fd)
        except (OSError, ValueError):
            pass

    def __getattr__(self, name):
        return getattr(self._stream, name)


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
        if not isinstance(stream, Hushed):
            setattr(sys, name, Hushed(stream))
