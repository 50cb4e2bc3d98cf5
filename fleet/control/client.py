"""Talking to a running fleet from the command line: find it, start it, ask it."""

from __future__ import annotations

import errno
import os
import pwd
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fleet.control import identity
from fleet.control.channel import ANSWER_LIMIT, SLICE_S, Client, CoordinatorGone, FleetError, NoAnswer, request  # noqa: F401 (callers import them from here)
from fleet.control.startlog import failure, preload_refusals, signame, size, tail
from fleet.control.dirlimits import FULL_EXIT, full_disk, room, run_dir_too_long, shown
from fleet.site import jobstate
from fleet.control.takedown import down
from fleet.wire import connection, interpreter, logtag, owndirs, ownfiles


class ExposedFile(FleetError):
    """A connection file of the run directory is readable or writable by others: refused."""


def _forget(path: Path) -> None:
    """Remove a gone fleet's connection file if we can (a read-only run directory keeps it)."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def live(run_dir: Path, embedded: bool = True,
         exposed: list[tuple[Path, str]] | None = None) -> list[tuple[Path, connection.Connection]]:
    """The live fleets of run_dir, each as (connection file, connection): the one `fleet
    up` started (fleet.json) first, then (with embedded) those that `fleet run`s embed
    there, newest first. A stale connection file is removed: of this host, its pid no
    coordinator of that run directory (gone, or used again since: fleet.control.identity);
    of another host, its batch job ended (fleet.site.jobstate: asked only from a job of
    the same Slurm cluster). A file others can read or write is refused (ExposedFile), one
    that cannot be read is a FleetError; with `exposed` given, either is noted there as
    (path, why) and skipped instead (`fleet down`, which finds its coordinator through the
    run directory's lease)."""
    run_dir = Path(run_dir)
    if run_dir_too_long(run_dir):  # no fleet starts there (usable_run_dir)
        return []
    paths = [connection.path_in(run_dir)]
    if embedded:
        def mtime(p: Path) -> float:
            try:
                return p.stat().st_mtime
            except OSError:  # removed by its fleet as we looked
                return 0.0
        paths += sorted(run_dir.glob("fleet-*.json"), key=mtime, reverse=True)
    _look_into(run_dir)
    out = []
    for path in paths:
        if not path.exists():
            continue
        try:
            conn = connection.read(path)
        except connection.ConnectionError_ as e:
            _refused(e, path, run_dir, exposed)
            continue
        except OSError:
            continue  # removed by its fleet between the look and the read
        if conn.host == socket.gethostname() and identity.gone(conn.pid, conn.run_dir, conn.started):
            _forget(path)  # (its coordinator is gone; its pid may be another process's since)
            continue
        if jobstate.ended_elsewhere(conn.host, conn.job, conn.cluster):  # nothing of that job runs any more
            print(f"fleet: removed {path}: its fleet's coordinator (pid {conn.pid} on {conn.host}) ran in {conn.job}, "
                  f"which has ended", file=sys.stderr)
            _forget(path)
            continue
        if _copied(conn, run_dir):
            raise FleetError(f"{path} names the fleet of another run directory, {conn.run_dir} (coordinator pid "
                             f"{conn.pid} on {conn.host}): a copy of its connection file? Nothing was done; give "
                             f"that run directory (--run-dir {conn.run_dir}), or remove the copy")
        out.append((path, conn))
    return out


def _refused(e: connection.ConnectionError_, path: Path, run_dir: Path,
             exposed: list[tuple[Path, str]] | None) -> None:
    """A connection file live() cannot use: raised (ExposedFile, FleetError), or, with
    `exposed` given, noted there with why."""
    if isinstance(e, connection.Exposed):
        why = (f"{e}. If a fleet is up in {shown(run_dir)}, its keys were readable by others: stop it "
               f"(fleet down --run-dir {shown(run_dir)}), or, to keep it, chmod 600 {path}; if none is, "
               f"remove that file")
        if exposed is None:
            raise ExposedFile(why) from None
    elif isinstance(e, connection.Foreign):  # (a colleague's fleet: not to remove, nor to stop)
        why = f"{path}: {theirs(e.uid)}"
        if exposed is None:
            raise FleetError(why) from None
    else:  # unsafe or unreadable: a clear error, not a traceback
        if exposed is None:
            raise FleetError(f"{e} (if no fleet is up in {shown(run_dir)}, remove that file; `fleet down` "
                             f"stops one of this host that is)") from None
        # (`fleet down`: its coordinator, if of this host, is found through the lease)
        why = (f"{e}; no fleet of this host was found through the run directory's lease: if "
               f"none is up in {shown(run_dir)} on another host either, remove that file")
    exposed.append((path, why))


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def theirs(uid: int) -> str:
    """Why a connection file of another user's is refused, and what that means: the
    fleet, if up, is that user's (before 2026-12-07 the advice was to remove the file,
    or that `fleet down` would stop the fleet: neither is for a colleague's fleet)."""
    return (f"belongs to another user, {_owner(uid)}; refusing it: a fleet up there is that user's, which only "
            f"they can use or stop; use a run directory of your own")


def _look_into(run_dir: Path) -> None:
    """RunDirError if this user cannot look into run_dir (another user's, which fleet
    makes 0700): named with its owner, not a traceback (before 2026-12-07 `fleet run`,
    status and down ended in a PermissionError there)."""
    try:
        connection.path_in(run_dir).exists()
    except PermissionError as e:
        try:
            st = run_dir.stat()
        except OSError:
            raise RunDirError(f"cannot use run directory {shown(run_dir)}: {e.strerror}") from None
        whose = "" if st.st_uid == os.getuid() else f"it belongs to another user, {_owner(st.st_uid)}, and "
        raise RunDirError(f"cannot use run directory {shown(run_dir)}: {whose}this user cannot look into it "
                          f"(mode {st.st_mode & 0o7777:04o}): use a run directory of your own") from None


def _copied(conn: connection.Connection, run_dir: Path) -> bool:
    """The connection file in run_dir is another run directory's (copied there): acting
    on it would stop or drive that other fleet (before 2026-12-06 `fleet down` did). A
    path that does not exist here is another host's view of a shared file system (mounted
    elsewhere there) unless the coordinator is of this host: only then is it a copy."""
    try:
        return not os.path.samefile(conn.run_dir, run_dir)
    except OSError:
        return conn.host == socket.gethostname()


def find(run_dir: Path, embedded: bool = False) -> connection.Connection | None:
    """The live fleet started by `fleet up` in run_dir (with embedded=True, failing
    that, the newest live fleet that a `fleet run` embeds there), or None. A stale
    connection file is removed (see live)."""
    fleets = live(run_dir, embedded)
    return fleets[0][1] if fleets else None


class RunDirError(FleetError):
    """The run directory cannot be created or written; nothing was started."""


class RunDirFull(RunDirError):
    """The run directory's file system has no room (blocks or quota); nothing was started."""


class CoordinatorKilled(FleetError):
    """The coordinator died of a signal before its fleet was up (killed, or crashed): the
    fleet was lost, as `fleet run`'s exit 5 says of one lost later."""


class PreloadRefused(FleetError):
    """The fleet did not come up: the zygotes refused its preload modules (a module
    failed to import or started a thread). `nodes`: (node, why) of each that said so."""

    def __init__(self, nodes: list[tuple[str, str]], log: Path):
        self.nodes = nodes
        super().__init__("the zygotes could not import the preload modules: "
                         + "; ".join(f"node {n}: {why}" for n, why in nodes) + f" (see {log})")


def usable_run_dir(run_dir: Path) -> Path:
    """Create run_dir (mode 0700) if need be and prove a file can be made in it, before
    anything starts; RunDirError names the directory and the OS error otherwise."""
    run_dir = Path(run_dir)
    try:
        str(run_dir).encode("utf-8")
    except UnicodeEncodeError:  # (fleet's messages and records are UTF-8: it could not be sent)
        raise RunDirError(f"cannot use run directory {str(run_dir)!r}: its path is not valid UTF-8; rename it") from None
    too_long = run_dir_too_long(run_dir)
    if too_long:
        raise RunDirError(f"cannot use run directory {shown(run_dir)}: {too_long}")
    try:
        if not os.path.lexists(run_dir.parent):  # (its parents, made by fleet: none but their owner may write them)
            owndirs.makedirs(run_dir.parent)
        run_dir.mkdir(mode=0o700, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".fleet-probe-", dir=run_dir)
        try:  # a block's worth: a file system with files left but no block takes an empty file
            os.write(fd, bytes(4096))
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise RunDirFull(f"cannot use run directory {shown(run_dir)}: its file system is full "
                             f"({e.strerror}): free space (or raise the quota) and run again") from None
        why = e.strerror or str(e)
        # Name the path the OS refused when it is not the run dir or our probe in it.
        if e.filename and Path(e.filename) != run_dir and Path(e.filename).parent != run_dir:
            why = f"{e.filename}: {why}"
        raise RunDirError(f"cannot use run directory {shown(run_dir)}: {why}") from None
    # What a fleet appends to there, as an earlier run left it (another user's, made read-only,
    # or not a file at all): said now, not by a coordinator's traceback once it has started.
    for name, is_dir in (("events.jsonl", False), ("coordinator.log", False), (".fleet", True)):
        path = run_dir / name
        if not (path.exists() or path.is_symlink()):
            continue
        if (path.is_dir() if is_dir else path.is_file()) and os.access(path, os.W_OK | (os.X_OK if is_dir else 0)):
            continue
        raise RunDirError(f"cannot use run directory {shown(run_dir)}: its {name} is not a "
                          f"{'directory' if is_dir else 'file'} this user can write")
    return run_dir


def fleet_run_dir(run_dir: Path) -> Path:
    """As usable_run_dir, for a run directory a fleet is to start in: also one that only
    its owner can write (fleet.wire.connection.check_directory), else RunDirError. Before
    2026-12-06 this was found only once `fleet run` had said it was starting a fleet there,
    and said as an error of the fleet (exit 1), not of its run directory (exit 2)."""
    run_dir = usable_run_dir(run_dir)
    try:
        connection.check_directory(run_dir)
    except connection.ConnectionError_ as e:
        raise RunDirError(f"cannot use run directory {shown(run_dir)}: {e}") from None
    _check_own_entries(run_dir)
    return run_dir


# What a fleet trusts in its run directory as an earlier run left it: its directories
# and the files it appends to (the files in those directories are not looked at: fleet
# makes its directories and files so that only their owner can write them,
# fleet.wire.owndirs and fleet.wire.ownfiles; a group-writable events.jsonl says the files
# of an earlier run were made otherwise). A few lstat()s a fleet, none a step: a step's own
# directory was made by a fleet that checked these.
OWN_FILES = ("events.jsonl", "coordinator.log")
OWN_ENTRIES = (".fleet", ".fleet/journal", ".fleet/fleets", "steps", "agents", *OWN_FILES)


def _check_own_entries(run_dir: Path) -> None:
    """RunDirError naming the first of OWN_ENTRIES in run_dir that is another user's or
    that others can write (left so by a run under a umask of 002 before 2026-12-06, or
    made by another user while the run directory was open to them)."""
    for name in OWN_ENTRIES:
        why = owndirs.unsafe(run_dir / name)
        if why is None:
            continue
        fix = (f"chmod -R go-w {shown(run_dir)}" if why.startswith("is writable") else
               "move it aside (it is not this user's: look at what it holds), or use another run directory")
        could = ("so the files the fleet made with it may be too, and they could change what it trusts (done "
                 "markers, its journal)" if name in OWN_FILES and why.startswith("is writable") else
                 "so they could plant files the fleet would trust there (symbolic links, done markers, steps to run)")
        raise RunDirError(f"cannot use run directory {shown(run_dir)}: its {name} {why}, {could}: {fix}")


def embedded_name() -> str:
    """The private connection file of a fleet that one `fleet run` brings up for itself:
    never fleet.json, so other runs on the same directory start fleets of their own."""
    return f"fleet-{socket.gethostname()}-{os.getpid()}.json"


def up(run_dir: Path, nodes: int = 1, machine: str = "local", preload: tuple[str, ...] = (),
       timeout: float = 120.0, extra: list[str] | None = None, name: str = connection.NAME) -> connection.Connection:
    """Start a coordinator (which starts the agents) in the background; return when
    every agent has joined and the connection file is written."""
    run_dir = fleet_run_dir(Path(run_dir).resolve())
    if name == connection.NAME and (there := find(run_dir)) is not None:
        raise FleetError(already_up(run_dir, there))
    if name == connection.NAME and (why := _another_up(run_dir)):
        raise FleetError(why)
    if name != connection.NAME:
        _stale_own(run_dir / name)
    logf = ownfiles.open(run_dir / "coordinator.log", "ab")
    argv = [*interpreter.module("fleet.control.coordinator"), "--run-dir", str(run_dir), "--nodes", str(nodes),
            "--machine", machine, "--preload", ",".join(preload), "--connection-name", name,
            "--join-timeout", str(timeout), *(extra or [])]
    if name != connection.NAME:
        # An embedded fleet lives only as long as the `fleet run` that brings it up, even
        # one killed with SIGKILL (its own session keeps it out of that run's group).
        argv += ["--parent-pid", str(os.getpid())]
    offset = size(run_dir / "events.jsonl")  # what this fleet writes comes after
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True)
    logf.close()
    try:
        return _until_up(proc, run_dir, name, timeout, offset)
    except BaseException:
        # Interrupted (Ctrl-C, or a signal the caller made an exception) while the fleet
        # came up: nothing it started outlives it, or the fleet comes up later unasked.
        stop_started(proc)
        raise


def _stale_own(path: Path) -> None:
    """Remove the embedded fleet's connection file `path` if one is there: its name is
    this process's own (host and pid: embedded_name), so it was left by an earlier
    process of this pid whose fleet was killed (SIGKILL leaves it), and would stop this
    one coming up ("a fleet is already up", naming a dead coordinator: before
    2026-12-07). Kept only if its coordinator is alive after all (then that is said)."""
    if not path.exists():
        return
    try:
        conn = connection.read(path)
    except (connection.ConnectionError_, OSError):
        conn = None  # (damaged: no one's)
    if conn is None or conn.host != socket.gethostname() or identity.gone(conn.pid, conn.run_dir, conn.started):
        _forget(path)


SAY_WHY_S = 15.0  # past the join timeout: the coordinator's stopping of its agents is bounded (launch.stop)


def _until_up(proc: subprocess.Popen, run_dir: Path, name: str, timeout: float,
              offset: int) -> connection.Connection:
    """Wait for the coordinator proc to publish its connection file; FleetError if it
    cannot (it exited, another fleet won the run directory, or `timeout` passed)."""
    # The coordinator gives up at `timeout` itself and says which nodes did not join
    # (fleet.control.comingup): wait a little longer for that, rather than race it and
    # say only "did not come up" (before 2026-12-06 the client usually won).
    timeout += SAY_WHY_S
    deadline = time.monotonic() + timeout
    path = run_dir / name
    look, said = 0.0, False
    while time.monotonic() < deadline:
        if time.monotonic() >= look:
            look, wait = time.monotonic() + 0.25, _waiting(run_dir, proc.pid, said)
            if wait:
                # Agents start only once the lease is taken: --timeout counts from then (as the coordinator's).
                said, deadline = True, max(deadline, time.monotonic() + timeout)
        if proc.poll() is not None and (proc.returncode not in (0, -signal.SIGTERM) or not path.exists()):
            raise _not_up(run_dir, proc, offset)
        if path.exists():
            try:
                conn = connection.read(path)
            except (connection.ConnectionError_, ValueError):
                conn = None  # being written
            if conn is not None and conn.pid != proc.pid:
                # Another `fleet up` won the race for this run directory; ours stops itself.
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                raise FleetError(already_up(run_dir, conn))
            if conn is not None:
                return conn
        time.sleep(0.02)
    down(run_dir, pid=proc.pid, name=name)
    raise FleetError(f"the fleet did not come up within {timeout:.0f} s; see {_log_of(run_dir, proc.pid)}")


def already_up(run_dir: Path, conn: connection.Connection) -> str:
    """Why `fleet up` refuses: whose fleet is in the way (it may be another job's, still
    at work: `fleet down` would stop that job's fleet), and what to do."""
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(conn.started))
    job = f"{conn.job}, " if conn.job else ""
    return (f"a fleet is already up in {run_dir}: {job}coordinator pid {conn.pid} on {conn.host}, up since {since}. "
            f"If it is another job's, it is at work there: use another run directory, or wait for that job; "
            f"stop it ({_down_of(conn.job, conn.cluster, run_dir)}) only if nothing needs it any more")


def _down_of(job: str, cluster: str, run_dir: Path) -> str:
    """The `fleet down` that stops a fleet of batch job `job` in run_dir: inside another
    batch job, with --any-job (fleet.control.jobfleets: without it, that fleet is left
    alone; before 2026-12-07 the advice named the `fleet down` that leaves it alone)."""
    any_job = " --any-job" if connection.another_job(job, cluster) else ""
    return f"fleet down{any_job} --run-dir {run_dir}"


def _another_up(run_dir: Path) -> str:
    """Why `fleet up` refuses when another `fleet up`'s coordinator of this host has no
    fleet.json yet (coming up, waiting for the lease, or up with its file removed), else
    "". Before 2026-12-06 the second `fleet up` went on, and of the two the first to
    have its agents joined won: often the second, the first then failing."""
    from fleet.control.starting import coordinators
    for s in coordinators(run_dir):
        if s.name == connection.NAME:
            return (f"another fleet up is at work in {run_dir}: {s.describe(run_dir)} on {socket.gethostname()}. "
                    f"Wait for it (fleet status --run-dir {run_dir} says when it is up), or use another run "
                    f"directory; stop it ({_down_of(s.job, s.cluster, run_dir)}) only if nothing needs it")
    return ""


def _waiting(run_dir: Path, pid: int, said: bool) -> bool:
    """Whether the coordinator pid waits for another fleet's lease; the first time, say
    (stderr, one line) whose and until when: a crashed fleet's from another host is
    waited for until --stale-after."""
    from fleet.control.lease import waiting_line
    from fleet.control.starting import waiting_for
    wait = waiting_for(run_dir, pid)
    if wait is not None and not said:
        print(waiting_line(wait, run_dir, time.time()), file=sys.stderr, flush=True)
    return wait is not None


STOP_S = 30.0  # how long a coordinator stopped before it was up is given for its teardown


def stop_started(proc: subprocess.Popen, timeout: float = STOP_S) -> None:
    """Stop a coordinator this process started and wait for it, bounded: SIGTERM to its
    process group (its teardown stops the agents it launched and gives back the lease;
    one still waiting for the lease just ends), SIGKILL after `timeout` (its agents
    then end by their death signal)."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _not_up(run_dir: Path, proc: subprocess.Popen, offset: int) -> FleetError:
    """Why the coordinator exited before its fleet was up: the zygotes' refusal of the
    preload modules (PreloadRefused), else its exit status and the end of its log."""
    refused = preload_refusals(run_dir / "events.jsonl", offset, proc.pid)
    if refused:
        return PreloadRefused(refused, _log_of(run_dir, proc.pid))
    if proc.returncode in (0, -signal.SIGTERM):  # (its teardown's status, or ended waiting for the lease)
        return FleetError(f"the fleet was stopped before it was up (fleet down, or SIGTERM to its coordinator "
                          f"pid {proc.pid})")
    if proc.returncode < 0:  # (a signal other than SIGTERM: killed, or crashed)
        return CoordinatorKilled(f"the coordinator (pid {proc.pid}) was killed by {signame(-proc.returncode)} "
                                 f"before the fleet was up; see {_log_of(run_dir, proc.pid)}")
    if proc.returncode == FULL_EXIT and "(errno 30, EROFS)" in (said := tail(run_dir / "coordinator.log", 3,
                                                                               pid=proc.pid)):
        # A file it needs is on a read-only file system (coordinator_cli._cannot_start): exit 4 too, not "full".
        return RunDirFull(f"the fleet could not come up in {shown(run_dir)}: a file it writes there is on a "
                          f"read-only file system; make it writable and run again:\n{said}")
    if proc.returncode == FULL_EXIT:  # it said so (fleet.control.comingup): its file system has no room
        return RunDirFull(f"the fleet could not come up in {shown(run_dir)}: its file system is full"
                          f"{room(run_dir)}; free space (or raise the quota) and run again "
                          f"(see {_log_of(run_dir, proc.pid)})")
    full = full_disk(run_dir)
    if full:  # (its log may be empty: it could not write it either)
        return RunDirFull(f"the coordinator exited with status {proc.returncode} before the fleet was up: {full}; "
                          f"free space (or raise the quota) and run again")
    why = failure(run_dir / "events.jsonl", offset, proc.pid)
    return FleetError(f"the coordinator exited with status {proc.returncode} before the fleet was up"
                      f"{': ' + why if why else ''}; see {_log_of(run_dir, proc.pid)}:\n"
                      + tail(run_dir / "coordinator.log", pid=proc.pid))


def _log_of(run_dir: Path, pid: int) -> str:
    """coordinator.log, named for the coordinator pid of this host (fleets may share it)."""
    return logtag.pointer(run_dir / "coordinator.log", socket.gethostname(), pid)
