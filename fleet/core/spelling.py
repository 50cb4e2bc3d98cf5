"""What an unknown field of a suite was probably meant to be.

Two sources: a close spelling of a known field (difflib: `coers` -> `cores`), and the
names other schedulers and workflow tools give the same thing, which a user moving a
suite over writes from habit (`after`, `depends_on` -> `deps`; `walltime` -> `timeout`).
A suggestion is only a hint in the error; nothing is renamed for the user, so a suite
means the same on every version of fleet.
"""

from __future__ import annotations

import difflib
from typing import Iterable

# Names from Snakemake, Nextflow, Parsl, Slurm, PBS and httk for what fleet names
# otherwise (a key is never a field): the field meant, or what to write instead.
HABITS = {
    "after": "deps", "depends": "deps", "depends_on": "deps", "dependencies": "deps", "needs": "deps",
    "requires": "deps", "parents": "deps", "dependency": "deps",
    "walltime": "timeout", "time": "timeout", "time_limit": "timeout", "timelimit": "timeout",
    "cpus": "cores", "ncpus": "cores", "ncores": "cores", "cpus_per_task": "cores", "threads_per_task": "threads",
    "ntasks": "ranks", "nprocs": "ranks", "np": "ranks", "mpiprocs": "ranks", "n_ranks": "ranks",
    "mem": "memory", "mem_mb": "memory", "memory_gb": "memory",
    "ngpus": "gpus", "gpus_per_task": "gpus",
    "function": "call", "func": "call", "python": "call",
    "cmd": "command", "shell": "command", "script": "command", "run": "command",
    "kwargs": "args", "arguments": "args", "params": "args",
    "cwd": "workdir", "dir": "workdir", "directory": "workdir",
    "max_retries": "retries", "retry": "retries", "attempts": "retries",
    "name": "id", "exclusive": "concurrent = false",
}


def hint(key: object, known: Iterable[str], habits: dict[str, str] | None = None) -> str:
    """`" (did you mean 'x'?)"` for an unknown `key` among the `known` field names, or
    "" when nothing is close. `habits` maps other tools' names to what to say."""
    if not isinstance(key, str):
        return ""
    names = sorted(known)
    said = (habits or {}).get(key.lower())
    if said is not None and said.split(" ")[0] in names:
        return f" (did you mean {said}?)" if " " in said else f" (did you mean '{said}'?)"
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""
