"""What a Ctrl-C (or SIGTERM) of `fleet run` left, said as the end of a whole run says
what ended: the counts, the steps its embedded fleet stopped (interrupted, by name, with
their logs), where the report and the logs are, and the command that goes on from there.

The client saw the steps that ended up to its last answer; the ones its embedded fleet
stopped while going down (and any that ended after that answer) are only in events.jsonl.
Those are read from the stream's last gone.TAIL bytes, this fleet's records only (the
run directory may be shared: fleet.control.jobfleets): one open, one seek, one read,
so a million-step stream is not read to say this. A step whose end fell before the tail
is counted as the client last saw it.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

from fleet.control.gone import TAIL
from fleet.core import states as S

NAMED = 10  # interrupted steps named, the rest counted (a million running steps print no million names)


def tail_exits(run_dir: Path, host: str, pid: int) -> dict[str, str]:
    """step id -> its last outcome among the `exit` records in the tail of run_dir's
    events.jsonl written by the fleet of coordinator `pid` on `host` (its fleet id
    begins `host-pid-`: fleet.control.coordinator); {} when unreadable."""
    try:
        with open(Path(run_dir) / "events.jsonl", "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - TAIL))
            tail = f.read(TAIL)
    except OSError:
        return {}
    lines = tail.split(b"\n")[1 if size > TAIL else 0:]  # (a first piece of a line is no record)
    prefix = f"{host}-{pid}-"
    needle = prefix.encode()
    ended: dict[str, str] = {}
    for line in lines:
        if b'"exit"' not in line or needle not in line:  # (cheap tests before the parse)
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if (isinstance(rec, dict) and rec.get("kind") == "exit" and str(rec.get("fleet", "")).startswith(prefix)
                and isinstance(rec.get("step"), str) and isinstance(rec.get("outcome"), str)):
            ended[rec["step"]] = rec["outcome"]
    return ended


def same_command() -> str:
    """The `fleet run` command line this process was started with, to run again (without
    --force, which would run again what succeeded); "" when this is not `fleet run` (the
    Python API's runner, say)."""
    argv = sys.argv[1:]
    if not argv or argv[0] != "run":
        return ""
    return "fleet " + shlex.join(a for a in argv if a != "--force")


def left_lines(run_dir: Path, interrupted: list[str], still_up: bool) -> list[str]:
    """The lines after an interrupted run's summary line: which steps were stopped
    (`interrupted`, in order; none when the fleet goes on), where the report and the logs
    are, and how to go on (run the same command again: what succeeded is not run again),
    or, with a fleet that was up and goes on, how to follow or stop it."""
    out = []
    if interrupted:
        named = ", ".join(interrupted[:NAMED]) + (f" and {len(interrupted) - NAMED} more"
                                                  if len(interrupted) > NAMED else "")
        out.append(f"  interrupted ({len(interrupted)}, no attempt used): {named}")
    logs = f"{run_dir}/steps/<id>/log"
    out.append(f"  report: fleet report {shlex.quote(str(run_dir))}; step logs: {logs}"
               + ("" if still_up else f" (the first stopped: steps/{interrupted[0]}/log)" if interrupted else ""))
    again = same_command()
    if still_up:
        out.append(f"  the fleet goes on with the suite: follow it with fleet status --run-dir "
                   f"{shlex.quote(str(run_dir))}; stop it with fleet down --run-dir {shlex.quote(str(run_dir))} "
                   f"(its running steps end interrupted)")
    else:
        out.append("  to go on: run the same command again" + (f" ({again})" if again else "")
                   + ": steps that succeeded are not run again, the interrupted and the not run ones are")
    return out


def merged(seen: dict[str, str], tail: dict[str, str]) -> dict[str, str]:
    """The outcomes the client saw, with what the stream's tail adds: the steps the
    fleet stopped or ended after the client's last answer (a step it saw end keeps
    that end: a later exit of it is another attempt's, submitted again)."""
    out = dict(seen)
    for step, outcome in tail.items():
        if step not in out and outcome not in ("retry",):
            out[step] = outcome
    return out


def interrupted_of(outcomes: dict[str, str]) -> list[str]:
    """The steps that ended interrupted, in their order of ending."""
    return [s for s, o in outcomes.items() if o == S.INTERRUPTED]


def counts_clause(outcomes: dict[str, str]) -> str:
    """`1 succeeded, 2 interrupted`-style counts of outcomes other than interrupted
    ("none ended" for none)."""
    counts: dict[str, int] = {}
    for o in outcomes.values():
        if o != S.INTERRUPTED:
            counts[o] = counts.get(o, 0) + 1
    return ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "none ended"

