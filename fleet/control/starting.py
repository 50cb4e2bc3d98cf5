"""Coordinators of a run directory that have no connection file yet: one coming up
(it holds the run directory's lease while its agents join and their preloads import)
or one waiting for another fleet's lease (registered in .fleet/fleets/, see
fleet.control.lease). No connection file names them, so `fleet down` finds them here,
through the lease and the registrations, and stops them (those of this host, only
processes that are coordinators of this run directory)."""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from fleet.control import identity

STOP_S = 30.0  # a coordinator stopped before it was up: its teardown, before SIGKILL


@dataclass(frozen=True)
class Starting:
    """A coordinator of this host with no connection file: `lease` is the run
    directory's lease as it was read (its own, or the one it waits for)."""

    pid: int
    holds: bool
    lease: dict
    name: str = "fleet.json"  # the connection file it will write: fleet.json if `fleet up` started it
    job: str = ""  # the batch job it runs in, as its lease record says (fleet.control.lease; "": none, or not said)
    cluster: str = ""

    def describe(self, run_dir: Path | None = None) -> str:
        """What it is: coming up, waiting for the lease, or (run_dir given, and its
        events.jsonl says so) up, with its connection file gone or refused."""
        if run_dir is not None and recorded_up(run_dir, self.pid):
            return (f"a fleet that was up with no connection file `fleet down` could use (removed, or refused), "
                    f"coordinator pid {self.pid}")
        if self.holds or self.lease.get("shared"):
            return f"a fleet still coming up, coordinator pid {self.pid}"
        return (f"a fleet waiting for the run directory's lease, held by pid {self.lease.get('pid')} on host "
                f"{self.lease.get('host')}; coordinator pid {self.pid}")


def recorded_up(run_dir: Path, pid: int) -> bool:
    """The coordinator pid of this host recorded in run_dir's events.jsonl that its fleet
    is up (fleet_up; its fleet id begins with host-pid-: fleet.control.coordinator)."""
    tag = f"{socket.gethostname()}-{pid}-"
    try:
        with open(Path(run_dir) / "events.jsonl", "rb") as f:
            for line in f:  # (one pass, once per `fleet down`; only fleet_up lines are parsed)
                if b"fleet_up" in line and tag.encode() in line:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if rec.get("kind") == "fleet_up" and str(rec.get("fleet", "")).startswith(tag):
                        return True
    except OSError:
        pass
    return False


def foreign_lease(run_dir: Path) -> str:
    """A word on the run directory's lease when another host's fleet holds it (nothing
    here can tell whether that one is alive), else ""."""
    path = Path(run_dir) / ".fleet" / "lease"
    rec = _read(path)
    if not rec or rec.get("host") in (None, socket.gethostname()):
        return ""
    try:
        ago = max(0.0, time.time() - path.stat().st_mtime)
    except OSError:
        return ""
    return (f"; its lease is held by pid {rec.get('pid')} on host {rec.get('host')}, last refreshed {ago:.0f} s ago "
            f"(a fleet there, or one that crashed: the next fleet here takes the lease over once it is "
            f"--stale-after old)")


def _read(path: Path) -> dict:
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return rec if isinstance(rec, dict) else {}


def coordinators(run_dir: Path, known: set[int] = frozenset()) -> list[Starting]:
    """The coordinators of run_dir on this host that hold its lease or registered to
    share it, but none of `known` (those a connection file names)."""
    run_dir = Path(run_dir).resolve()
    root = run_dir / ".fleet"
    lease = _read(root / "lease")
    recs = [(lease, True)]
    try:
        names = sorted(os.listdir(root / "fleets"))
    except OSError:
        names = []
    recs += [(_read(root / "fleets" / n), False) for n in names if n.endswith(".json")]
    here = socket.gethostname()
    out, seen = [], set(known)
    for rec, holds in recs:
        pid = rec.get("pid")
        if rec.get("host") != here or not isinstance(pid, int) or pid in seen:
            continue
        seen.add(pid)
        p = identity.coordinator(pid, run_dir)
        if p is not None:
            job, cluster = rec.get("job"), rec.get("cluster")
            out.append(Starting(pid, holds, lease, _connection_name(p), job if isinstance(job, str) else "",
                                cluster if isinstance(cluster, str) else ""))
    return out


def _connection_name(p: psutil.Process) -> str:
    """The connection file the coordinator p will write (its --connection-name)."""
    try:
        argv = p.cmdline()
    except psutil.Error:
        return ""
    return argv[argv.index("--connection-name") + 1] if "--connection-name" in argv[:-1] else "fleet.json"


def waiting_for(run_dir: Path, pid: int) -> dict | None:
    """What the coordinator pid of this host says it waits for (fleet.control.lease,
    its registration's `waiting`), if it says so."""
    root = Path(run_dir) / ".fleet" / "fleets"
    try:
        names = os.listdir(root)
    except OSError:
        return None
    here = socket.gethostname()
    for name in names:
        if name.endswith(".json"):
            rec = _read(root / name)
            if rec.get("pid") == pid and rec.get("host") == here and isinstance(rec.get("waiting"), dict):
                return rec["waiting"]
    return None


def _gone(p: psutil.Process) -> bool:
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def stop(pid: int, timeout: float = STOP_S) -> bool:
    """SIGTERM (one coming up tears down what it started; one waiting for the lease
    just ends), SIGKILL after `timeout` (its agents end by their death signal); True
    once it is gone."""
    try:
        p = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return True
    for sig_of, wait in ((p.terminate, timeout), (p.kill, 10.0)):
        try:
            sig_of()
        except psutil.NoSuchProcess:
            return True
        except psutil.AccessDenied:  # (another user's since, found so between the look and now: not ours to stop)
            return False
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if _gone(p):
                return True
            time.sleep(0.02)
    return _gone(p)
