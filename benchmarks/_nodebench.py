"""Shared plumbing of the node-agent benchmarks (startup_throughput, memory, idle,
prefork): where results go, the machine, bringing a fleet up and down with timeouts,
and making sure nothing a benchmark started is left running."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
PRELOAD = ("numpy", "scipy.linalg")
STEPS_MODULE = "fleet_bench_steps"  # benchmarks/fleet_bench_steps.py


def bench_env() -> dict[str, str]:
    """This environment with benchmarks/ (the call targets) on PYTHONPATH."""
    env = dict(os.environ)
    parts = [str(HERE)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict:
    return {"cpus": os.cpu_count(), "usable_cpus": len(os.sched_getaffinity(0)), "cpu": cpu_name(),
            "python": platform.python_version(), "platform": platform.platform(),
            "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
            "note": "2 cores, shared with other work (noisy): figures vary run to run",
            "code": code_version()}


def code_version() -> dict:
    """The commit measured, and which files of the fleet package differed from it."""
    def git(*args):
        try:
            # Strip line ends only: porcelain lines start with a status column that may be a space.
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                                  timeout=20).stdout.rstrip("\n")
        except (OSError, subprocess.SubprocessError):
            return ""
    return {"commit": git("rev-parse", "HEAD").strip(),
            "uncommitted_in_fleet": [line[3:] for line in git("status", "--porcelain", "--", "fleet").splitlines()]}


def today() -> str:
    return _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")


def pct(values, q: float) -> float:
    """The q-th percentile (0-100), linear between closest ranks."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def median(values) -> float:
    return statistics.median(values) if values else float("nan")


def write_result(name: str, res: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(res, indent=1) + "\n")
    return path


def run(argv: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    """subprocess.run in its own process group, killed as a group on timeout."""
    proc = subprocess.Popen(argv, start_new_session=True, **kw)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def fleet_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "fleet", *args]


class Fleet:
    """`fleet up` in a run directory, and whatever it started; `down()` stops it and
    checks, from the process table, that none of it is left (killing by pid if so)."""

    def __init__(self, run_dir: Path, nodes: int = 2, preload=PRELOAD, up_args=()):
        self.run_dir = Path(run_dir)
        self.nodes = nodes
        self.preload = preload
        self.up_args = list(up_args)  # more options of `fleet up` (e.g. --window-depth)
        self.env = bench_env()
        self.pids: set[int] = set()

    def up(self, timeout: float = 120.0) -> None:
        r = run(fleet_cli("up", "--run-dir", str(self.run_dir), "--nodes", str(self.nodes),
                          "--preload", ",".join(self.preload), *self.up_args),
                timeout=timeout, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            raise RuntimeError(f"fleet up failed ({r.returncode}): {r.stdout.decode(errors='replace')}")
        for p in self.processes():
            self.pids.add(p.pid)

    def connection(self) -> dict:
        return json.loads((self.run_dir / "fleet.json").read_text())

    def coordinator(self) -> psutil.Process:
        return psutil.Process(self.connection()["pid"])

    def processes(self) -> list[psutil.Process]:
        """The coordinator and everything under it (agents, zygotes, steps)."""
        c = self.coordinator()
        return [c] + c.children(recursive=True)

    def roles(self) -> dict[int, str]:
        out = {}
        for p in self.processes():
            try:
                cmd = " ".join(p.cmdline())
            except psutil.Error:
                continue
            role = ("coordinator" if "fleet.control.coordinator" in cmd else "agent" if "fleet.node.agent" in cmd
                    else "zygote" if "fleet.node.zygote" in cmd else "step")
            if role == "agent":
                role += " " + cmd.split("--node ", 1)[1].split()[0]
            out[p.pid] = role
        return out

    def down(self, timeout: float = 60.0) -> list[int]:
        """`fleet down`; returns pids of ours still alive afterwards (then killed)."""
        try:
            run(fleet_cli("down", "--run-dir", str(self.run_dir)), timeout=timeout, env=self.env,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            pass
        return reap_or_kill(self.pids)


def reap_or_kill(pids, wait: float = 5.0) -> list[int]:
    """Wait up to `wait` s for pids to go; SIGKILL (each, by pid) what is left;
    returns those that had to be killed."""
    deadline = time.monotonic() + wait
    left = set(pids)
    while left and time.monotonic() < deadline:
        left = {p for p in left if _alive(p)}
        if left:
            time.sleep(0.05)
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return sorted(left)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def cpu_snapshot(procs: dict[int, str]) -> dict[int, tuple]:
    """pid -> (role, own user+system s, reaped children's user+system s, own minor page
    faults, reaped children's minor page faults)."""
    out = {}
    for pid, role in procs.items():
        try:
            t = psutil.Process(pid).cpu_times()
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)": state is fields[0]
        except (psutil.Error, OSError):
            continue
        out[pid] = (role, t.user + t.system, t.children_user + t.children_system, int(fields[7]), int(fields[8]))
    return out


def cpu_delta(a: dict, b: dict) -> dict[str, dict]:
    out = {}
    for pid, (role, own, kids, flt, kflt) in b.items():
        if pid in a:
            out[f"{role} ({pid})"] = {"own_s": round(own - a[pid][1], 3),
                                      "children_s": round(kids - a[pid][2], 3),
                                      "minflt": flt - a[pid][3], "children_minflt": kflt - a[pid][4]}
    return out
