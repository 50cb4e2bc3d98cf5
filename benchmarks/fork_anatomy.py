"""What one fork costs a process, by what the process holds (issue 12, benchmark b).

    python benchmarks/fork_anatomy.py [--forks 400] [--out results/fork_anatomy.json]

Each case runs in a fresh Python process: it builds its memory (imports, buffers,
mappings), then times N rounds of fork / child _exit(0) / waitpid and reports, per
fork, the parent's CPU (the fork itself: copying the page table and the mappings) and
the child's (mostly tearing its copy down at exit), from getrusage. Both are CPU that a
zygote's fork of a step costs the node whatever the step does; the parent's is counted
as fleet's own, the child's as the step's.

Cases: a bare interpreter; + numpy; + numpy and scipy (the benchmarks' preload,
_nodebench.PRELOAD); + 64 MiB written in 4 KiB pages; + 64 MiB written in one
transparent huge page range (MADV_HUGEPAGE); + 400 small written mappings (each its
own VMA); numpy and scipy after MADV_COLLAPSE of their 2 MiB-aligned anonymous ranges.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CASES = {
    "bare interpreter": "",
    "numpy": "import numpy",
    "numpy, scipy (the benchmarks' preload)": "import numpy, scipy, scipy.linalg, scipy.sparse",
    "+ 64 MiB written, 4 KiB pages": (
        "import mmap\nm = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)\nm.madvise(mmap.MADV_NOHUGEPAGE)\n"
        "for i in range(0, len(m), 4096): m[i] = 1"),
    "+ 64 MiB written, huge pages": (
        "import mmap\nm = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)\nm.madvise(mmap.MADV_HUGEPAGE)\n"
        "for i in range(0, len(m), 4096): m[i] = 1"),
    "+ 400 small written mappings": (
        "import mmap\nkeep = []\nfor i in range(400):\n"
        "    m = mmap.mmap(-1, 8192, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS); m[0] = 1; keep.append(m)\n"
        "    keep.append(mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=mmap.PROT_READ))"),
    "numpy, scipy, then MADV_COLLAPSE": (
        "import numpy, scipy, scipy.linalg, scipy.sparse, ctypes\n"
        "madvise = ctypes.CDLL(None, use_errno=True).madvise\n"
        "madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]\n"
        "for line in open('/proc/self/maps'):\n"
        "    f = line.split()\n"
        "    if f[1][:2] != 'rw' or f[1][3] != 'p' or (len(f) > 5 and f[5] != '[heap]'): continue\n"
        "    lo, hi = (int(x, 16) for x in f[0].split('-'))\n"
        "    lo, hi = (lo + (2 << 20) - 1) & ~((2 << 20) - 1), hi & ~((2 << 20) - 1)\n"
        "    if hi > lo: madvise(lo, hi - lo, 25)"),
}

PROBE = r'''
import os, resource, sys, time
{setup}
def memory():
    out = {{"vmas": sum(1 for _ in open("/proc/self/maps"))}}
    for line in open("/proc/self/smaps_rollup"):
        k, _, v = line.partition(":")
        if k in ("Rss", "Anonymous", "AnonHugePages"):
            out[k.lower() + "_kib"] = int(v.split()[0])
    return out
n = {forks}
for _ in range(20):  # warm: the first forks fault in the loop's own pages
    pid = os.fork()
    if pid == 0: os._exit(0)
    os.waitpid(pid, 0)
s0, c0, t0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
for _ in range(n):
    pid = os.fork()
    if pid == 0: os._exit(0)
    os.waitpid(pid, 0)
s1, c1, t1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
cpu = lambda a, b: (b.ru_utime + b.ru_stime - a.ru_utime - a.ru_stime) / n * 1e3
print(repr(dict(memory(), wall_ms=round((t1 - t0) / n * 1e3, 3), parent_cpu_ms=round(cpu(s0, s1), 3),
                child_cpu_ms=round(cpu(c0, c1), 3))))
'''


def case(setup: str, forks: int) -> dict:
    code = PROBE.format(setup=setup, forks=forks)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    return eval(out.stdout.strip().splitlines()[-1], {})  # noqa: S307 -- our own probe's repr of a dict


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--forks", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", help="write the results (JSON) here")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(HERE))
    from _nodebench import machine
    res = {"machine": machine(), "forks": args.forks, "cases": {}}
    for r in range(args.rounds):
        for name, setup in (CASES.items() if r % 2 == 0 else reversed(CASES.items())):
            got = case(setup, args.forks)
            res["cases"].setdefault(name, []).append(got)
            print(f"round {r + 1}  {name:42s} {got}", flush=True)
    res["command"] = "python benchmarks/fork_anatomy.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
