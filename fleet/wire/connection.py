"""The connection file (fleet.json): how clients and agents reach a running fleet.

Created exclusively with mode 0600, since it will hold the fleet's keys, and whole (see
write); a file that others can read is refused rather than trusted.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Mapping

from fleet.wire.messages import VERSION

NAME = "fleet.json"


ENDPOINT = re.compile(r"tcp://[^\s:/]+:\d{1,5}|tcp://\[[0-9a-fA-F:.]+\]:\d{1,5}|ipc://\S+")


class ConnectionError_(RuntimeError):
    """No usable fleet at the given place (missing, unsafe or stale connection file)."""


class Foreign(ConnectionError_):
    """The connection file is another user's: refused (its fleet, if up, is that user's)."""

    def __init__(self, message: str, uid: int):
        super().__init__(message)
        self.uid = uid


class Exposed(ConnectionError_):
    """The connection file is readable or writable by others (its keys were exposed):
    refused, though its fleet may well be up (`fleet down` still stops it, by its lease)."""


@dataclass(frozen=True)
class Connection:
    client: str        # endpoint for clients (fleet run/status/down)
    agents: str        # endpoint for agents
    pid: int           # the coordinator's pid
    host: str
    started: float
    run_dir: str
    server_key: str = ""      # the coordinator's CURVE public key
    client_public: str = ""   # the key pair clients present (hence mode 0600)
    client_secret: str = ""
    version: int = VERSION
    job: str = ""             # the batch job the coordinator runs in ("Slurm job 1234"; "": none, or not said)
    cluster: str = ""         # its Slurm cluster ("": none, or not said): fleet.site.jobstate
    # The directory the coordinator started in, and so its agents (launched from it) and
    # their zygotes, which put it first on sys.path for preloads and call steps
    # (fleet.wire.interpreter.user_path): `fleet validate --imports` imports from it.
    # "": not said (a fleet started before 2026-12-06, or its directory was gone).
    cwd: str = ""
    # A digest of each variable that decides what a step runs (PATH, PYTHONPATH, ...), as
    # the coordinator, and so its agents, had them; not their values (fleet.control.shellenv):
    # `fleet run` says which of its own differ. {}: not said (a fleet started before 2026-12-07).
    env_digests: dict = field(default_factory=dict, hash=False)
    # The fleet's id (its coordinator's fleet_id: events.jsonl and the claims name it), whose
    # submissions a client of it may wait for (fleet.control.api). "": not said (before 2026-12-07).
    fleet: str = ""


def start_directory() -> str:
    """This process's working directory, as a connection file records it ("" if it is gone)."""
    try:
        return os.getcwd()
    except OSError:
        return ""


def this_job(env: Mapping[str, str] | None = None) -> str:
    """The batch job this process runs in, as the connection file names it: whose fleet
    it is, for whoever finds it in the way of theirs. "" outside a batch job. Read from
    the environment, unchecked; a fleet starts only where the batch system said that
    job is live (fleet.control.preflight.asked_job: an ended job's variables, left in a
    shell, were recorded before 2026-12-07, and the live fleet then taken for dead)."""
    env = os.environ if env is None else env
    if env.get("SLURM_JOB_ID"):
        return f"Slurm job {env['SLURM_JOB_ID']}"
    if env.get("PBS_JOBID"):
        return f"PBS job {env['PBS_JOBID']}"
    return ""


def another_job(job: str, cluster: str = "", env: Mapping[str, str] | None = None) -> bool:
    """Whether a fleet whose connection file (or lease record) names batch job `job`, of
    Slurm cluster `cluster`, is another job's than the one this process runs in: never
    outside a batch job (a login node acts on every fleet), and never for a record that
    names no job (a local fleet's, or one written before 2026-12-02): those count as
    this job's, as before. `fleet down` and `fleet run` inside a job leave another job's
    fleet alone (fleet.control.jobfleets)."""
    mine = this_job(env)
    if not mine or not job:
        return False
    here = this_cluster(env)
    return job != mine or bool(cluster and here and cluster != here)


def from_dict(data: dict) -> Connection:
    """A connection from its JSON fields; fields this version does not know are left out
    (a newer fleet's file is still read), a missing required one is a TypeError."""
    if not isinstance(data, dict):
        raise TypeError(f"a JSON object was expected, not {type(data).__name__}")
    known = {f.name: f for f in fields(Connection)}
    missing = [k for k, f in known.items() if f.default is MISSING and f.default_factory is MISSING and k not in data]
    if missing:
        raise TypeError(f"no {', '.join(missing)} in it")
    v = data["client"]  # (what a client's socket would refuse with a bare "Invalid argument")
    if not isinstance(v, str) or not ENDPOINT.fullmatch(v):
        raise TypeError(f"field 'client': expected an endpoint like tcp://HOST:PORT, got {v!r}")
    for k in ("server_key", "client_public", "client_secret"):
        v = data.get(k, "")
        if not isinstance(v, str) or (v and len(v) != 40):
            raise TypeError(f"field {k!r}: expected a CURVE key (40 characters of Z85), got {v!r}")
    if not isinstance(data.get("cwd", ""), str):
        raise TypeError(f"field 'cwd': expected a directory, got {data['cwd']!r}")
    if not isinstance(data["pid"], int) or isinstance(data["pid"], bool):
        raise TypeError(f"field 'pid': expected a process id, got {data['pid']!r}")
    digests = data.get("env_digests")  # (a note for `fleet run`: one it cannot read is no reason to refuse the fleet)
    data = {**data, "env_digests": {k: v for k, v in digests.items() if isinstance(k, str) and isinstance(v, str)}
            if isinstance(digests, dict) else {}}
    if not isinstance(data.get("fleet", ""), str):  # (nor is an id it cannot read: not said)
        data["fleet"] = ""
    return Connection(**{k: v for k, v in data.items() if k in known})


def this_cluster(env: Mapping[str, str] | None = None) -> str:
    """The Slurm cluster this process's job runs on ("" outside a Slurm job): a job id
    means that job only on its own cluster (several may share a file system)."""
    env = os.environ if env is None else env
    return env.get("SLURM_CLUSTER_NAME", "") if env.get("SLURM_JOB_ID") else ""


def path_in(run_dir: Path) -> Path:
    return Path(run_dir) / NAME


def write(run_dir: Path, name: str, conn: Connection) -> Path:
    """Create the connection file `name` in run_dir: exclusively (FileExistsError if it
    is there), mode 0600, and whole or not at all (OSError, and no file: a full disk).

    Written to a temporary file first, then linked to its name: written in place, a
    write that failed left an empty fleet.json that every `fleet up`, status and down
    then refused until it was removed by hand, and a reader could find it half written."""
    path = Path(run_dir) / name
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=run_dir)  # (0600, O_EXCL)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(asdict(conn), f, indent=1)
            f.flush()
            os.fsync(f.fileno())  # (its blocks are taken now: no later ENOSPC for a reader to find)
        os.link(tmp, path)  # fails if it exists: another fleet's is never replaced
    finally:
        os.unlink(tmp)
    return path


def check_directory(run_dir: Path) -> None:
    """The connection file's directory must be this user's, and writable by its owner
    only: anyone who can write there could replace the file (and its keys) with their
    own, or make the entries fleet has not made yet (steps/, .fleet/, events.jsonl) as
    they please. The message says why and what to do, not which directory (the caller's
    words name it). Before 2026-12-06 a sticky directory others could write (/tmp,
    /dev/shm, another user's 1777 directory) was accepted: the sticky bit only keeps
    others from removing what is there, not from making what is not yet."""
    st = Path(run_dir).stat()
    # (A shared sticky directory first: /tmp is root's, and "another user's" would blame root.)
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and st.st_mode & stat.S_ISVTX:  # (not to be chmod'ed: shared)
        raise ConnectionError_(f"it is a shared directory (mode {stat.S_IMODE(st.st_mode):04o}: others can make "
                               f"entries in it, such as the fleet's steps/ and .fleet/, before the fleet does): use "
                               f"a directory of your own in it, such as {Path(run_dir) / 'run'}")
    if st.st_uid != os.getuid():
        raise ConnectionError_(f"it belongs to another user (uid {st.st_uid}), who could replace the fleet's "
                               f"connection file and its keys, and its other files, with their own: use a "
                               f"directory of your own that only you can write")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConnectionError_(f"others can write to it (mode {stat.S_IMODE(st.st_mode):04o}), so they could "
                               f"replace the fleet's connection file and its keys with their own: chmod go-w "
                               f"{run_dir}, or use a directory only you can write (a umask of 002 makes new "
                               f"directories group-writable)")


def read(path: Path) -> Connection:
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ConnectionError_(f"{path}: no fleet is up here (no connection file)") from None
    except PermissionError as e:
        raise ConnectionError_(f"{path}: cannot read it: {e.strerror}") from None
    if st.st_uid != os.getuid():
        raise Foreign(f"{path}: belongs to another user (uid {st.st_uid}); refusing it", st.st_uid)
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise Exposed(f"{path}: refusing a connection file that others can read or write "
                               f"(mode {stat.S_IMODE(st.st_mode):04o}; it must be 0600)")
    try:
        data = json.loads(path.read_text())
        return from_dict(data)
    except PermissionError as e:
        raise ConnectionError_(f"{path}: cannot read it: {e.strerror}") from None
    except (ValueError, TypeError) as e:
        raise ConnectionError_(f"{path}: not a fleet connection file: {e}") from None
