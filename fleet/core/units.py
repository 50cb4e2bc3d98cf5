"""Values as people write them in suite files and on the command line: each step
field's check, memory sizes, array index ranges and paths that must stay inside the
run directory. (How fields make a step and steps a suite is fleet.core.suite's.)"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from fleet.core.launchsize import arg_string

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    # Bare letters follow Slurm's --mem convention: binary multiples.
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def counted(n: int, word: str, plural: str = "") -> str:
    """"1 step", "2 steps": a count with its noun in the right number."""
    return f"{n} {word if n == 1 else plural or word + 's'}"


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
            n = float(m.group(1)) * _UNITS[m.group(2).lower()]
            # (before 2026-12-07 one past a float, "1" and 400 zeros and "T", was an OverflowError traceback)
            if not n < 2**63:  # inf too: as a TOML integer, at most 64 bits
                shown = repr(value) if len(value) <= 60 else f"{value[:60]!r}... ({len(value)} characters)"
                raise ValueError(f"a size too large: more than 2**63-1 bytes (8EiB), got {shown}")
            return int(n)
    raise ValueError(f"expected a size such as \"4GiB\", \"512MB\" or a number of bytes, got {value!r}")


def check_memory(value: object) -> int:
    """A step's `memory`: a size above 0 (Slurm's --mem=0, "the whole node", has no
    step-sized meaning here; a step without `memory` takes its cores' share)."""
    n = parse_memory(value)
    if n == 0:
        raise ValueError(f"a step's memory must be more than 0, got {value!r} (leave it out for its cores' "
                         f"share of the node)")
    return n


def format_memory(n: int) -> str:
    """A short human form of a byte count ("1.5GiB", "1010MiB")."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            # Three significant digits, but whole numbers from 999.5 up: :.3g writes
            # 1010 MiB (less than a GiB) as "1.01e+03", which nobody reads as a size.
            v = n / size
            return f"{v:.3g}{unit}" if v < 999.5 else f"{v:.0f}{unit}"
    return f"{n}B"


# --- array index ranges ----------------------------------------------------------------------

_PART = re.compile(r"(\d+)(?:-(\d+))?")


def array_ranges(text: str) -> list[tuple[int, int]]:
    """The inclusive (lo, hi) ranges "0-99" or "0-3,7,9" writes, in the order written.

    Nothing is expanded: a range of a billion indices is two integers here."""
    out = []
    for part in text.split(","):
        part = part.strip()
        m = _PART.fullmatch(part)
        if not m:
            raise ValueError(f"expected indices such as \"0-99\" or \"0-3,7,9\", got {text!r}")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ValueError(f"range {part!r} runs backwards")
        out.append((lo, hi))
    return out


def array_size(ranges: list[tuple[int, int]]) -> int:
    """How many distinct indices the ranges hold (overlaps counted once), without
    expanding them: memory grows with the text, not with the indices."""
    total, reach = 0, -1  # reach: the highest index counted so far, ranges taken in ascending order
    for lo, hi in sorted(ranges):
        if hi > reach:
            total += hi - max(lo, reach + 1) + 1
            reach = hi
    return total


def parse_array(text: str) -> list[int]:
    """Indices from "0-99" or "0-3,7,9" (ranges inclusive, in the order written, each once).

    Expands: check array_size(array_ranges(text)) first when the text is untrusted."""
    out: list[int] = []
    seen: set[int] = set()
    for lo, hi in array_ranges(text):
        for i in range(lo, hi + 1):
            if i not in seen:
                seen.add(i)
                out.append(i)
    return out


# A NUL ends a C string: no argv entry, environment variable or file name can hold one.
# Such a step passed `fleet validate` and failed when it ran ("embedded null byte").
_NUL = "\0"


def _no_nul(text: str, what: str) -> str:
    if _NUL in text:
        raise ValueError(f"{what} holds a NUL character (\\u0000), which no command, environment variable or "
                         f"file name can: {text!r}")
    return text


def lone_surrogate(text: str) -> str | None:
    """Why text cannot be UTF-8, which fleet's suites, messages and records are: the lone
    surrogate it holds (what Python makes of bytes that are not UTF-8, in a file name
    from os.listdir or an argument: os.fsdecode's surrogateescape), and where; else None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"{text!r} holds {text[e.start]!r} at {e.start}, a lone surrogate (bytes that are not UTF-8)"
    return None


# --- paths inside the run directory ------------------------------------------------------------

def clean_step_id(v: str) -> str:
    """A step id is a clean relative path: it names the step's directory steps/<id>/.

    No empty segment (so no leading, trailing or doubled "/"), no "." or "..", and no
    ".fleet" segment (the name of every step's own records directory)."""
    for seg in v.split("/"):
        if seg in ("", ".", "..", ".fleet"):
            what = "an empty segment (a leading, trailing or doubled '/')" if not seg else f"a {seg!r} segment"
            raise ValueError(f"a step id is a clean relative path, without {what}; got {v!r}")
    return v


NAME_MAX = 255  # bytes of one name (a part between '/'), on every file system fleet runs on
PATH_MAX = 4096  # bytes of a whole path, with its NUL, that Linux takes


def too_long(v: str, most: int) -> str | None:
    """Why the path v can never be made or found: a part of it (between '/') over
    NAME_MAX bytes, or the whole over `most` bytes; None if neither (the system says
    "File name too long" only when a step starts, or a check stats it)."""
    if len(v) <= NAME_MAX // 4:  # (the common case: too few characters to be too many bytes)
        return None
    b = v.encode("utf-8", "surrogatepass")
    if len(b) > most:
        room = "a path has" if posixpath.isabs(v) else "fit under the run directory"
        return f"is {len(b)} bytes long, and at most {most} {room}: {v[:60]!r}..."
    part = max(b.split(b"/"), key=len)
    if len(part) > NAME_MAX:
        return (f"has a part of {len(part)} bytes between '/', and a name ends at {NAME_MAX}: "
                f"{part[:60].decode('utf-8', 'ignore')!r}...")
    return None


def inside_run_dir(v: str, *, absolute_ok: bool = False, dir_ok: bool = True, writes: bool = True) -> str:
    """A path relative to the run directory that stays inside it (string arithmetic only).

    `absolute_ok`: an absolute path is taken as it is (inputs from shared datasets).
    `dir_ok`: the run directory itself (".") is acceptable.
    `writes`: the step writes there, so not into a .fleet/ records directory.
    Not too long to make or find (too_long): a relative one at most MAX_ID bytes, as a
    step id (so that under the longest run directory it stays a path), an absolute one
    under PATH_MAX."""
    if not v:
        raise ValueError("the path is empty")
    _no_nul(v, "the path")
    why = too_long(v, PATH_MAX - 1 if posixpath.isabs(v) else MAX_ID)
    if why:  # (before 2026-12-06 found when the step started, or by validate with a traceback)
        raise ValueError(f"the path {why}")
    if posixpath.isabs(v):
        if absolute_ok:
            return v
        raise ValueError(f"must be relative to the run directory, got the absolute path {v!r}")
    norm = posixpath.normpath(v)
    if norm == ".." or norm.startswith("../"):
        raise ValueError(f"must stay inside the run directory, but {v!r} leads out of it through '..'")
    if norm == "." and not dir_ok:
        raise ValueError(f"names the run directory itself, not a file in it: {v!r}")
    parts = norm.split("/")
    if writes and ".fleet" in parts:  # the fleet's own records: a step's markers and claims
        raise ValueError(f"may not be in a .fleet directory (the fleet's own records), got {v!r}")
    if writes and _fleets_own(parts):  # (before 2026-12-07 a step could overwrite events.jsonl)
        raise ValueError(f"may not be {'in agents/' if parts[0] == 'agents' else parts[0]}: fleet writes its own "
                         f"files at the top of the run directory ({FLEETS_OWN}), got {v!r}")
    return v


FLEETS_OWN = "events.jsonl, coordinator.log, fleet.json and fleet-*.json, shards.json, agents/"


def _fleets_own(parts: list[str]) -> bool:
    """Whether a path (split at "/") is one of the files fleet writes at the top of a run
    directory, or in its agents/ directory (the agents' and the launcher's logs): its
    events, its log, its connection files (fleet.control.client looks for fleet-*.json)
    and a sharded run's shards.json (fleet.control.shard)."""
    top = parts[0]
    return top == "agents" or len(parts) == 1 and (
        top in ("events.jsonl", "coordinator.log", "fleet.json", "shards.json")
        or top.startswith("fleet-") and top.endswith(".json"))


# --- the step fields: each check takes the raw value and returns the typed one or raises ValueError

STEP_ID = re.compile(r"^[A-Za-z0-9._/-]+\Z")  # \Z, not $: "$" also matches before a final newline
CALL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*\Z")


def check_int(lo: int, hi: int | None = None):
    """The check of an integer from lo (to hi)."""
    def check(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"expected an integer, got {v!r}")
        if v < lo or (hi is not None and v > hi):
            span = f"from {lo} to {hi}" if hi is not None else f"at least {lo}"
            raise ValueError(f"expected an integer {span}, got {v}")
        return v
    return check


def check_bool(v: Any) -> bool:
    """true or false."""
    if not isinstance(v, bool):
        raise ValueError(f"expected true or false, got {v!r}")
    return v


def check_str(v: Any) -> str:
    """Any string."""
    if not isinstance(v, str):
        raise ValueError(f"expected a string, got {v!r}")
    return v


# A step id names its directory, <run dir>/steps/<id>/: each of its parts a name (at most
# 255 bytes), and the whole short enough that its records' paths, under a run directory
# of the longest fleet takes (fleet.control.dirlimits.MAX_RUN_DIR), stay under 4,096 bytes.
MAX_ID = 1900


def check_id(v: Any) -> str:
    """A step id: ASCII letters, digits and . _ - /, a clean relative path."""
    v = check_str(v)
    if not STEP_ID.match(v):
        raise ValueError(f"a step id uses only ASCII letters, digits and . _ - /, got {v!r}")
    if len(v) > 255 and (len(v) > MAX_ID or max(map(len, v.split("/"))) > 255):
        part = max(map(len, v.split("/")))
        what = (f"is {len(v)} characters long, and at most {MAX_ID} fit in the paths of its files" if len(v) > MAX_ID
                else f"has a part of {part} characters between '/', and a directory's name ends at 255")
        raise ValueError(f"a step id names its directory steps/<id>/: this one {what}; got {v[:60]!r}...")
    return clean_step_id(v)


def check_call(v: Any) -> str:
    """"package.module:function"."""
    v = check_str(v)
    if not CALL.match(v):
        raise ValueError(f"expected \"package.module:function\", got {v!r}")
    return v


def check_command(v: Any) -> tuple[str, ...] | str:
    """An argv list (a tuple here) or a shell string, not empty (nor an argv list's
    program name), without a NUL."""
    if isinstance(v, str):
        if not v.strip():
            raise ValueError("the command is empty")
        why = arg_string(v, "the shell command string")  # (/bin/sh -c <it>: one argument)
        if why:
            raise ValueError(why)
        return _no_nul(v, "the command")
    if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
        if not v[0].strip():  # (it would fail only when run: "Permission denied: ''")
            raise ValueError(f"command[0], the program to run, is {'empty' if not v[0] else 'blank'}")
        for i, x in enumerate(v):
            _no_nul(x, f"command[{i}]")
            why = arg_string(x, f"command[{i}]")
            if why:
                raise ValueError(why)
        return tuple(v)
    raise ValueError(f"expected an argv list of strings or a shell string, got {v!r}")


def check_strings(v: Any) -> tuple[str, ...]:
    """A list of strings (a tuple here)."""
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ValueError(f"expected a list of strings, got {v!r}")
    return tuple(v)


def check_table(v: Any) -> dict:
    """A TOML table."""
    if not isinstance(v, dict):
        raise ValueError(f"expected a table, got {v!r}")
    return v


_PLAIN = frozenset({str, int, float, bool})
# The integers a step's args travel to its node in (msgpack's): TOML has any integer.
ARG_INT_MIN, ARG_INT_MAX = -2**63, 2**64 - 1


def check_args(v: Any) -> dict:
    """A call step's args: a table of plain values (strings, numbers, booleans, and arrays
    and tables of them), integers from ARG_INT_MIN to ARG_INT_MAX. A TOML date or time has
    no form the arguments travel to a node in: such a step was started, never reached its
    node, and the run never ended; a bigger integer failed the step at its launch."""
    if type(v) is dict:  # the common case, flat (a million array steps are checked one by one)
        for x in v.values():
            if type(x) not in _PLAIN or (type(x) is int and not ARG_INT_MIN <= x <= ARG_INT_MAX):
                break
        else:
            return v
    stack = [("args", check_table(v))]
    while stack:  # (no recursion: how deep tomllib nests is its own limit)
        where, x = stack.pop()
        if isinstance(x, dict):
            stack.extend((f"{where}.{k}", y) for k, y in x.items())
        elif isinstance(x, list):
            stack.extend((f"{where}[{i}]", y) for i, y in enumerate(x))
        elif isinstance(x, int) and not ARG_INT_MIN <= x <= ARG_INT_MAX:  # (bool is an int, and in range)
            raise ValueError(f"{where} is an integer of {x.bit_length()} bits ({str(x)[:30]}): a step's args "
                             f"travel as 64-bit integers, from -2**63 to 2**64-1; write it as a string "
                             f"(\"{str(x)[:30]}\") or a float")
        elif not isinstance(x, (str, int, float)):  # (bool is an int)
            text = x.isoformat() if hasattr(x, "isoformat") else str(x)
            raise ValueError(f"{where} is a TOML {type(x).__name__} ({text}): a step's args are strings, numbers, "
                             f"booleans, arrays and tables; write it as a string (\"{text}\")")
    return v


# Thread-pool sizes of numerical libraries: they read these when loaded. A step's are set
# from its cores (or an MPI step's threads) by its node (fleet.node.threads).
THREAD_VARS = (
    "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS", "NUMEXPR_MAX_THREADS", "VECLIB_MAXIMUM_THREADS",
    "BLIS_NUM_THREADS", "GOTO_NUM_THREADS", "NUMBA_NUM_THREADS",
    "RAYON_NUM_THREADS", "TBB_NUM_THREADS",
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


def check_env(v: Any) -> tuple[tuple[str, str], ...]:
    """Environment variables for the step: a table of NAME = "value" (a number is
    written as text), as (name, value) pairs sorted by name. Not fleet's own (FLEET_*),
    nor a thread-pool size (cores or threads set those)."""
    if not isinstance(v, dict):
        raise ValueError(f'expected a table of NAME = "value", got {v!r}')
    out, wrong = [], []  # (every variable that is wrong is said, in one problem for the field)
    for name, value in v.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            wrong.append(f"{name!r} is not an environment variable's name (ASCII letters, digits and _, "
                         "not starting with a digit)")
        elif name.startswith("FLEET_"):
            wrong.append(f"{name} is fleet's own: a step's env may not set FLEET_* variables")
        elif name in THREAD_VARS:
            wrong.append(f"{name} is set from the step's cores (an MPI step's threads): change those instead")
        elif isinstance(value, bool) or not isinstance(value, (str, int, float)):
            wrong.append(f'{name}: expected a string (or a number), got {value!r}')
        elif isinstance(value, str) and _NUL in value:
            wrong.append(f"{name}: its value holds a NUL character (\\u0000), which no environment variable "
                         f"can: {value!r}")
        elif isinstance(value, str) and len(value) > 1000 and (why := arg_string(f"{name}={value}", f"{name}={{value}}")):
            wrong.append(why)  # (the string is NAME=value, exec'd by a command, or a call's own commands)
        else:
            out.append((name, value if isinstance(value, str) else str(value)))
    if wrong:
        raise ValueError("; ".join(wrong))
    return tuple(sorted(out))


# The longest estimate (about 32 years): sums and products of longer ones (1e308) overflow
# a simulation's or a schedule's arithmetic to inf and nan (fleet simulate printed them).
ESTIMATE_MAX_S = 1e9


def check_estimate(v: Any) -> float:
    """Seconds, at least 0 and at most ESTIMATE_MAX_S (TOML has nan and inf: a schedule
    of them means nothing)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= ESTIMATE_MAX_S:
        raise ValueError(f"expected a number of seconds >= 0 and at most {ESTIMATE_MAX_S:,.0f} (about 32 years), "
                         f"got {v!r}")
    return float(v)


def check_timeout(v: Any) -> float:
    """Seconds, more than 0 and finite (0 would stop the step before it starts)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
        raise ValueError(f"expected a number of seconds > 0, got {v!r}")
    return float(v)


def check_grace(v: Any) -> float:
    """Seconds, at least 0 and finite (0: SIGKILL at once)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
        raise ValueError(f"expected a number of seconds >= 0, got {v!r}")
    return float(v)


def check_workdir(v: Any) -> str:
    """A directory inside the run directory ("." is the run directory itself)."""
    return inside_run_dir(check_str(v))


class Wrongs(ValueError):
    """Every thing wrong with one field's value (each bad entry of a list), each said
    on a line of its own (fleet.core.suite); as text, all of them joined by "; "."""

    def __init__(self, messages: list[str]):
        self.messages = list(messages)
        super().__init__("; ".join(self.messages))


def each_wrong(e: ValueError) -> list[str]:
    """What a field check's ValueError says, one message per thing wrong."""
    return e.messages if isinstance(e, Wrongs) else [str(e)]


def _paths(v: Any, **inside: bool) -> tuple[str, ...]:
    """A list of paths, each checked by inside_run_dir: every bad one is said, not only
    the first (a user fixing the first would otherwise learn of the next one run later)."""
    out, wrong = [], []
    for x in check_strings(v):
        try:
            out.append(inside_run_dir(x, **inside))
        except ValueError as e:
            wrong.append(str(e))
    if wrong:
        raise Wrongs(wrong)
    return tuple(out)


def check_inputs(v: Any) -> tuple[str, ...]:
    """Paths inside the run directory, or absolute (shared datasets)."""
    return _paths(v, absolute_ok=True, dir_ok=False, writes=False)


def check_outputs(v: Any) -> tuple[str, ...]:
    """Paths of files inside the run directory."""
    return _paths(v, dir_ok=False)


def check_protocol(v: Any) -> str:
    """A command step's exit protocol: "steps" (httk's exit codes 2-5: fleet.node.protocol)."""
    if v != "steps":
        raise ValueError(f'expected "steps" (httk\'s exit codes: 2 next stage, 3 wait for children, 4 restart,'
                         f' 5 broken), got {v!r}')
    return v


CHECKS = {
    "id": check_id, "task": check_str, "call": check_call, "command": check_command, "args": check_args,
    "cores": check_int(1), "min_cores": check_int(1), "gpus": check_int(0), "memory": check_memory,
    "span": check_bool, "mpi": check_bool, "ranks": check_int(1), "min_ranks": check_int(1), "threads": check_int(1),
    "deps": check_strings, "inputs": check_inputs, "outputs": check_outputs, "workdir": check_workdir,
    "priority": check_int(1, 5), "concurrent": check_bool, "retries": check_int(0), "estimate": check_estimate,
    "timeout": check_timeout, "grace": check_grace, "array": check_str,
    "protocol": check_protocol, "env": check_env,
}
STEP_FIELDS = frozenset(CHECKS)
SUITE_FIELDS = frozenset({"name", "run_dir", "preload", "max_steps"})
