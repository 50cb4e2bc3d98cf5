"""What `fleet report` does, short of printing: read the stream, build the report, write
the trace and the page if asked, and say what to print. Only fleet.cli imports this
(and the tests): it is the one report module that reads the clock and writes files
other than through trace/html's writers, and the only one that imports those."""

from __future__ import annotations

import gc
import json
import time
from pathlib import Path

from fleet.report import blocks, build, events_path, format_text
from fleet.report.html import write_html
from fleet.report.model import Report
from fleet.report.trace import write_trace
from fleet.wire import events as E


def run(run_dir: str, as_json: bool = False, trace: str | None = None, html_file: str | None = None,
        session: int = -1, now: float | None = None) -> tuple[int, str, list[str]]:
    """(exit status, stdout text, messages for stderr)."""
    path = events_path(Path(run_dir))
    if not path.exists():
        return 2, "", [f"no event stream at {path}"]
    try:
        why = not_a_stream(path) or _unwritable(trace, "--trace") or _unwritable(html_file, "--html")
    except OSError as e:  # (unreadable: another user's, or not a file)
        why = f"cannot read the event stream {path}: {e.strerror or e}"
    if why:  # said before the stream is read (a million steps' takes seconds)
        return 2, "", [why]
    # Hundreds of thousands of small objects and no cycles among them: the cyclic
    # collector would rescan them again and again for nothing.
    was = gc.isenabled()
    gc.disable()
    try:
        try:  # the stream read a block at a time, gathered as it is read
            rep = build(blocks(Path(run_dir)), now=time.time() if now is None else now, session=session,
                        run_dir=str(run_dir))
        except ValueError as e:
            return 2, "", [str(e)]
        return _emit(rep, as_json, trace, html_file)
    finally:
        if was:
            gc.enable()


LOOKED_AT = 20  # whole lines at the head of a file, one of which a stream's record must be


def not_a_stream(path: Path, hint: str = "give a run directory or its events.jsonl") -> str | None:
    """Why the file at `path` is not a fleet event stream, or None: judged by the whole
    lines of its first MiB, of which the first LOOKED_AT must not all fail to be fleet
    records (the reader skips a damaged line, a fleet's killed mid-write, anywhere; a
    live run's last line may be torn, so a line with no end yet is not judged). An empty
    file is a stream with nothing in it yet. `hint`: what to do instead, said after why."""
    with open(path, "rb") as f:
        head = f.read(1 << 20)
    whole = [line for line in head.split(b"\n")[:-1] if line.strip()][:LOOKED_AT]
    for line in whole:
        try:
            if E.parse(json.loads(line)) is not None:
                return None
        except ValueError:
            pass
    if not whole:
        return None
    return (f"{path} is not a fleet event stream (none of its first {len(whole)} line(s) is a fleet record)"
            + (f"; {hint}" if hint else ""))


def _unwritable(target: str | None, flag: str) -> str | None:
    """Why the file `flag` names cannot be written, or None (nothing written here)."""
    if not target:
        return None
    p = Path(target)
    if p.is_dir():
        return f"{flag} {target}: is a directory; give a file name"
    if not p.parent.is_dir():
        return f"{flag} {target}: no directory {p.parent} to write it in"
    return None


def _emit(rep: Report, as_json: bool, trace: str | None, html_file: str | None) -> tuple[int, str, list[str]]:
    msgs = []
    # What _unwritable cannot see before the stream is read (a read-only file system, a
    # directory of another user's, a full disk) the write itself says: one line, exit 2.
    flag, target = "--trace", trace
    try:
        if trace:
            n = write_trace(rep, Path(trace))
            msgs.append(f"trace: {trace} ({n} events; open in https://ui.perfetto.dev or chrome://tracing)")
        flag, target = "--html", html_file
        if html_file:
            write_html(rep, Path(html_file))
            msgs.append(f"html: {html_file}")
    except OSError as e:
        return 2, "", msgs + [f"{flag} {target}: cannot write it: {e.strerror or e}"]
    out = json.dumps(rep.to_json(), separators=(",", ":")) if as_json else format_text(rep)
    return 0, out, msgs
