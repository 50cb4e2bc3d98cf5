"""File-system metadata operations of one node's start: the agent and its zygote.

    python benchmarks/agent_start_files.py              # writes results/agent_start_files.json and its README section
    python benchmarks/agent_start_files.py --no-write   # prints them

`fleet up` starts one agent a node, and each agent one zygote: two Python interpreters
that import fleet (and the zygote the suite's preloads) from wherever Python and its
packages are installed. On a big allocation that is usually a parallel filesystem, where
every node's first look at a file is a request to the metadata server: 10,000 nodes each
opening and statting the same files is that many requests for each. This counts them,
with `strace -f` (the file-system calls: open, stat, access, readlink, getdents), for:

- the interpreter alone (`python -c pass`: startup, site-packages and their .pth files);
- importing the agent's modules, and the zygote's;
- a real agent start (fleet.node.agent with its zygote), no preload, up to its join
  attempt against a port where nothing listens (it gives up after --join-timeout);
- the same with the preloads given (default: numpy,scipy when installed).

The counts are this machine's (its sys.path, its packages); what differs elsewhere is
mostly the interpreter's and the preloads' part, which fleet does not choose.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _nodebench import machine, write_result
from readme_section import write_section

SECTION = "## A node's start on a shared filesystem: the agent's and zygote's file operations"
CALLS = "%file,getdents64"
METADATA = ("openat", "open", "newfstatat", "stat", "lstat", "statx", "access", "faccessat2", "readlink",
            "readlinkat", "getdents64")


def counted(argv: list[str], timeout: float = 120.0, env: dict | None = None) -> dict:
    """The file-system calls of `argv` and every process it starts (strace -f): by call,
    and the distinct paths looked at (a node's first look at each is what reaches a
    parallel filesystem's metadata server; later looks are answered by the node's cache)."""
    with tempfile.NamedTemporaryFile(prefix="strace-", suffix=".txt", delete=False) as f:
        out = f.name
    p = subprocess.Popen(["strace", "-f", "-e", f"trace={CALLS}", "-o", out, *argv],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                         env={**os.environ, **(env or {})})
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
        raise
    lines = Path(out).read_text().splitlines()
    os.unlink(out)
    calls: dict[str, int] = {}
    paths, missing, on_fd = set(), set(), 0
    for line in lines:
        m = re.match(r"\d+\s+(\w+)\((.*)", line)
        if not m or m.group(1) not in METADATA:
            continue
        calls[m.group(1)] = calls.get(m.group(1), 0) + 1
        path = re.search(r'"([^"]*)"', m.group(2))
        if not path or not path.group(1):  # on an open file (fstat, getdents): no lookup
            on_fd += 1
            continue
        paths.add(path.group(1))
        if "ENOENT" in line:
            missing.add(path.group(1))
    return {"calls": calls, "metadata_ops": sum(calls.values()), "on_open_files": on_fd,
            "distinct_paths": len(paths), "distinct_missing": len(missing)}


def cases(preload: str) -> dict:
    py = sys.executable
    agent = [py, "-m", "fleet.node.agent", "--connect", "tcp://127.0.0.1:9", "--node", "bench", "--cores", "0",
             "--memory", str(2**30), "--join-timeout", "1"]
    env = {"FLEET_MEMLIMIT": "none"}
    out = {
        "interpreter alone": counted([py, "-c", "pass"]),
        "the agent's imports": counted([py, "-c", "import fleet.node.agent, zmq"]),
        "the zygote's imports": counted([py, "-c", "import fleet.node.zygote"]),
        "a node's start (agent and zygote), no preload": counted([*agent, "--preload", ""], env=env),
    }
    if preload:
        out[f"a node's start, --preload {preload}"] = counted([*agent, "--preload", preload], env=env)
    return out


def section(res: dict) -> str:
    m = res["machine"]
    rows = ["| what | file-system calls | of them on open files | distinct paths looked at | of them missing |",
            "|---|---:|---:|---:|---:|"]
    for name, c in res["cases"].items():
        rows.append(f"| {name} | {c['metadata_ops']:,} | {c['on_open_files']:,} | {c['distinct_paths']:,} | "
                    f"{c['distinct_missing']:,} |")
    node = res["cases"]["a node's start (agent and zygote), no preload"]["distinct_paths"]
    bare = res["cases"]["interpreter alone"]["distinct_paths"]
    return "\n".join([
        SECTION, "",
        f"{res['date']}, commit {m['code']['commit'][:7]}, Python {m['python']}, {len(res['sys_path'])} entries on "
        f"sys.path:", "",
        f"    {res['command']}", "",
        "Results: `benchmarks/results/agent_start_files.json`. `fleet up` starts one agent a node and each agent "
        "a zygote: two Python interpreters importing fleet (and, in the zygote, the suite's preloads) from wherever "
        "Python and its packages are installed. Counted with `strace -f` (open, stat, access, readlink, getdents): "
        "the interpreter alone (`python -c pass`); the agent's imports; the zygote's; a real agent start "
        "(fleet.node.agent and its zygote, up to its join attempt against a port where nothing listens), without "
        "preloads and with them. \"Distinct paths\" is what reaches a parallel filesystem's metadata server: a "
        "node's first look at each path (later looks are answered from the node's own cache).",
        "", *rows, "",
        f"- Of a node's {node:,} distinct paths, {bare:,} are the interpreter's own start (this machine's site "
        f"packages and .pth files included) and {node - bare:,} the modules fleet's two processes import (the "
        "standard library's, ZeroMQ, msgpack, psutil, fleet's own).",
        f"- At 10,000 nodes a start without preloads looks at {node:,} distinct paths a node, {node * 10_000:,} "
        "first looks in all, on wherever Python and fleet are installed: on a parallel filesystem each is a "
        "request to its metadata server (the same files on every node; a node's later looks are its own "
        "cache's). docs/operations.md, \"Starting thousands of agents\", says what to do about it.",
    ]) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = ",".join(m for m in ("numpy", "scipy") if importlib.util.find_spec(m))
    ap.add_argument("--preload", default=default, help=f"the preloads of the last case (default: {default or 'none'})")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    m = machine()
    res = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": m, "sys_path": sys.path[1:],
           "cases": cases(args.preload),
           "command": "python benchmarks/agent_start_files.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    print(json.dumps({k: (v["metadata_ops"], v["distinct_paths"]) for k, v in res["cases"].items()}, indent=1))
    if not args.no_write:
        write_result("agent_start_files", res)
        write_section(SECTION, section(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
