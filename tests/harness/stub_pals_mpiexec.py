"""A stand-in for HPE PALS `mpiexec`, for tests on machines without PALS.

It records its argv (one JSON line in $STUB_LOG), then does what PALS does with it, as
far as fleet uses it: one application whose --hosts, --ppn, --cpu-bind and --env are
given once (PalsLaunchArgs of HPE's CTI front end); after ":" an MPMD section may carry
only -n, --depth, --wdir and --umask (PalsCmdOpts), anything else is refused. Ranks go
in blocks of --ppn over --hosts; each is run here, locally, with PALS_RANKID,
PALS_NODEID and PALS_LOCAL_RANKID set, bound as PALS would: `--cpu-bind list:a:b` by
local rank, `core` to one core by local rank, `none` not at all; without --cpu-bind,
as PALS_CPU_BIND says (default none here). STUB_RUN=0: record only, run nothing.
"""

import json
import os
import subprocess
import sys

APP = {"-n", "--np", "--ppn", "-ppn", "--hosts", "--depth", "-d", "--cpu-bind", "--env", "--umask", "--wdir"}
SECTION = {"-n", "--np", "--depth", "-d", "--wdir", "--umask"}
FLAGS = {"--no-transfer", "--label", "-l", "--line-buffer"}


def refuse(why: str) -> None:
    print(f"mpiexec: {why}", file=sys.stderr, flush=True)
    sys.exit(2)


def parse(args: list[str], allowed: set) -> tuple[dict, list[str], list[str]]:
    """(options, the section's argv, what follows it after ":")."""
    opts, i = {}, 0
    while i < len(args) and args[i].startswith("-"):
        a = args[i]
        if a in FLAGS:
            i += 1
            continue
        if a not in allowed:
            refuse(f"option {a} is not allowed here")
        if a == "--env":
            opts.setdefault("env", []).append(args[i + 1])
        else:
            opts[a.lstrip("-")] = args[i + 1]
        i += 2
    rest = args[i:]
    cut = rest.index(":") if ":" in rest else len(rest)
    return opts, rest[:cut], rest[cut + 1:]


def binding(bind: str, local: int) -> set | None:
    if bind in ("", "none"):
        return None
    if bind == "core":
        return {sorted(os.sched_getaffinity(0))[local]}
    if bind.startswith("list:"):
        lists = bind[5:].split(":")
        return {int(c) for c in lists[local % len(lists)].split(",")}
    refuse(f"--cpu-bind {bind} is not known to this stub")


def main() -> int:
    with open(os.environ["STUB_LOG"], "a") as f:
        f.write(json.dumps(sys.argv[1:]) + "\n")
    opts, argv, more = parse(sys.argv[1:], APP)
    sections = [(int(opts.get("n", opts.get("np", "1"))), argv)]
    while more:
        sec, argv, more = parse(more, SECTION)
        sections.append((int(sec.get("n", sec.get("np", "1"))), argv))
    if os.environ.get("STUB_RUN") == "0":
        return 0
    ppn = int(opts.get("ppn", "1"))
    hosts = opts.get("hosts", "localhost").split(",")
    bind = opts.get("cpu-bind", os.environ.get("PALS_CPU_BIND", ""))
    extra = dict(e.split("=", 1) for e in opts.get("env", []))
    procs, rank = [], 0
    for n, argv in sections:
        for _ in range(n):
            node, local = divmod(rank, ppn)
            if node >= len(hosts):
                refuse(f"{rank + 1} ranks at {ppn} per node do not fit on {len(hosts)} hosts")
            cpus = binding(bind, local)
            env = {**os.environ, **extra, "PALS_RANKID": str(rank), "PALS_NODEID": str(node),
                   "PALS_LOCAL_RANKID": str(local)}
            procs.append(subprocess.Popen(argv, env=env, preexec_fn=(lambda c=cpus: os.sched_setaffinity(0, c))
                                          if cpus else None))
            rank += 1
    rc = 0
    for p in procs:
        rc = p.wait() or rc
    return rc


if __name__ == "__main__":
    sys.exit(main())
