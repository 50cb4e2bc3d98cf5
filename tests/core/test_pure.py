"""The core does no I/O: no files, no clock, no processes, no environment. Its shells
(control.checks, the coordinator, simulate's caller) do that and hand it values."""

from __future__ import annotations

import ast
from pathlib import Path

import fleet.core

CORE = Path(fleet.core.__file__).parent

# Modules that only do I/O, keep time or start processes.
IMPURE_MODULES = {"time", "datetime", "subprocess", "socket", "shutil", "glob", "tempfile", "threading",
                  "multiprocessing", "signal", "select", "io", "random", "uuid", "zmq"}
# Methods that ask the filesystem (on Path, os or os.path).
FILE_METHODS = {"open", "read_text", "write_text", "read_bytes", "write_bytes", "exists", "is_file", "is_dir",
                "resolve", "absolute", "stat", "lstat", "iterdir", "mkdir", "unlink", "rename", "glob", "rglob",
                "cwd", "home", "getcwd", "listdir", "scandir", "walk", "realpath", "abspath", "isfile", "isdir",
                "getmtime", "getsize", "expanduser", "expandvars", "environ", "getenv", "getpid", "kill",
                "fork", "system", "popen", "touch", "chmod"}


def offences(source: str) -> list[str]:
    found = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Import):
            found += [a.name for a in n.names if a.name.split(".")[0] in IMPURE_MODULES]
        elif isinstance(n, ast.ImportFrom) and n.module and n.module.split(".")[0] in IMPURE_MODULES:
            found.append(n.module)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("open", "input", "print"):
            found.append(f"{n.func.id}() at line {n.lineno}")
        elif isinstance(n, ast.Attribute) and n.attr in FILE_METHODS:
            found.append(f".{n.attr} at line {n.lineno}")
    return found


def test_no_core_module_reads_files_the_clock_or_the_environment_or_starts_processes():
    found = {p.name: offences(p.read_text()) for p in sorted(CORE.glob("*.py"))}
    assert {name: o for name, o in found.items() if o} == {}


def test_the_purity_check_finds_what_it_looks_for():
    found = offences("import time\nfrom pathlib import Path\nPath('x').resolve()\nopen('y')\n")
    assert sorted(found) == [".resolve at line 3", "open() at line 4", "time"]
