"""Talking to a running fleet from the command line: find it, start it, ask it."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import zmq

from fleet.control.reach import unreachable
from fleet.control.startlog import preload_refusals, signame, size, tail
from fleet.control.dirlimits import FULL_EXIT, full_disk, room, run_dir_too_long, shown
from fleet.site import jobstate
from fleet.wire import connection, interpreter
from fleet.wire import messages as P
from fleet.wire import security


class FleetError(RuntimeError):
    pass


class NoAnswer(FleetError):
    """The coordinator did not answer in time (not: it answered with an error)."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still answers kill(0); it is not alive.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


# An answer comes from the coordinator this client authenticated (CURVE), so it is not
# held to the 1 MiB bound of what the coordinator takes in: a status answer of a
# coordinator from before fleet.control.nodestatus listed every node, ~130 bytes each
# (10,000 nodes: ~1.3 MB); now it is bounded and the node table comes in pages.
ANSWER_LIMIT = 256 << 20


class Client:
    """A request/reply channel to one coordinator. Answers come in the order asked, on
    one socket: a question and its answer hold `lock` (threads may share a client)."""

    def __init__(self, conn: connection.Connection, endpoint: str | None = None):
        self.conn = conn
        self.endpoint = endpoint or conn.client
        self.ctx = zmq.Context.instance()
        self.lock = threading.RLock()
        self.broken, self.via_hint = None, ""  # (fleet status: its --ssh tunnel's closed, what to check of --via)
        self._connect()

    def reset(self) -> None:
        """A new socket: an answer still owed on the old one is never taken for the next."""
        self.sock.close(0)
        self._connect()

    def _connect(self) -> None:
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        try:
            if self.conn.server_key:
                security.connect_as(self.sock, self.conn.server_key, self.conn.client_public, self.conn.client_secret)
            self.sock.connect(self.endpoint)
        except (zmq.ZMQError, TypeError, ValueError) as e:  # (a hand-made file, or --via: not a traceback)
            self.sock.close(0)
            raise FleetError(f"cannot connect to the coordinator at {self.endpoint!r}: {e}") from None

    def ask(self, msg, timeout: float = 10.0):
        """Send one request and return its reply; FleetError on silence or an error reply."""
        with self.lock:
            if self.sock.closed:  # (close(), or a Fleet's down(): pyzmq's own error says only "not a socket")
                raise FleetError(f"this client's connection to the coordinator at {self.endpoint} is closed")
            self.sock.send(P.encode(msg))
            if not self._answered(timeout):
                self.reset()  # (a late answer must not be taken for the answer to the next question)
                broken = self.broken() if self.broken else ""
                if broken:
                    raise FleetError(broken)
                raise NoAnswer(f"the coordinator at {self.endpoint} did not answer within {timeout:.0f} s"
                               f"{self._where()}")
            reply = P.decode(self.sock.recv(), limit=ANSWER_LIMIT)
        if isinstance(reply, P.Error):
            raise FleetError(reply.reason)
        return reply

    def _answered(self, timeout: float) -> bool:
        """An answer came within `timeout` (or, with `broken` set, before it said why none can)."""
        if self.broken is None:
            return bool(self.sock.poll(int(timeout * 1000)))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.sock.poll(int(min(0.2, max(0.0, deadline - time.monotonic())) * 1000)):
                return True
            if self.broken():
                return False
        return False

    def _where(self) -> str:
        """Where the coordinator runs, if not here and asked at its own address: the likely why."""
        if self.endpoint != self.conn.client:
            return self.via_hint
        return "" if self.conn.host in ("", socket.gethostname()) else unreachable(self.conn)

    def close(self) -> None:
        with self.lock:
            self.sock.close(0)


class ExposedFile(FleetError):
    """A connection file of the run directory is readable or writable by others: refused."""


def live(run_dir: Path, embedded: bool = True,
         exposed: list[tuple[Path, str]] | None = None) -> list[tuple[Path, connection.Connection]]:
    """The live fleets of run_dir, each as (connection file, connection): the one `fleet
    up` started (fleet.json) first, then (with embedded) those that `fleet run`s embed
    there, newest first. A stale connection file is removed: of this host, its pid gone;
    of another host, its batch job ended (fleet.site.jobstate: asked only from a job of
    the same Slurm cluster). A file others can read or write is refused (ExposedFile); with
    `exposed` given, it is noted there as (path, why) and skipped instead (`fleet down`)."""
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
    out = []
    for path in paths:
        if not path.exists():
            continue
        try:
            conn = connection.read(path)
        except connection.Exposed as e:
            why = (f"{e}. If a fleet is up in {shown(run_dir)}, its keys were readable by others: stop it "
                   f"(fleet down --run-dir {shown(run_dir)}), or, to keep it, chmod 600 {path}; if none is, "
                   f"remove that file")
            if exposed is None:
                raise ExposedFile(why) from None
            exposed.append((path, why))
            continue
        except connection.ConnectionError_ as e:  # unsafe or unreadable: a clear error, not a traceback
            raise FleetError(f"{e} (if no fleet is up in {shown(run_dir)}, remove that file: `fleet down` "
                             f"cannot read it either)") from None
        except OSError:
            continue  # removed by its fleet between the look and the read
        if conn.host == socket.gethostname() and not _alive(conn.pid):
            path.unlink(missing_ok=True)
            continue
        if jobstate.ended_elsewhere(conn.host, conn.job, conn.cluster):  # nothing of that job runs any more
            print(f"fleet: removed {path}: its fleet's coordinator (pid {conn.pid} on {conn.host}) ran in {conn.job}, "
                  f"which has ended", file=sys.stderr)
            path.unlink(missing_ok=True)
            continue
        if _copied(conn, run_dir):
            raise FleetError(f"{path} names the fleet of another run directory, {conn.run_dir} (coordinator pid "
                             f"{conn.pid} on {conn.host}): a copy of its connection file? Nothing was done; give "
                             f"that run directory (--run-dir {conn.run_dir}), or remove the copy")
        out.append((path, conn))
    return out


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
        run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
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


def embedded_name() -> str:
    """The private connection file of a fleet that one `fleet run` brings up for itself:
    never fleet.json, so other runs on the same directory start fleets of their own."""
    return f"fleet-{socket.gethostname()}-{os.getpid()}.json"


def up(run_dir: Path, nodes: int = 1, machine: str = "local", preload: tuple[str, ...] = (),
       timeout: float = 120.0, extra: list[str] | None = None, name: str = connection.NAME) -> connection.Connection:
    """Start a coordinator (which starts the agents) in the background; return when
    every agent has joined and the connection file is written."""
    run_dir = usable_run_dir(Path(run_dir).resolve())
    try:
        connection.check_directory(run_dir)
    except connection.ConnectionError_ as e:
        raise FleetError(str(e)) from None
    if name == connection.NAME and (there := find(run_dir)) is not None:
        raise FleetError(already_up(run_dir, there))
    logf = open(run_dir / "coordinator.log", "ab")
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
    raise FleetError(f"the fleet did not come up within {timeout:.0f} s; see {run_dir / 'coordinator.log'}")


def already_up(run_dir: Path, conn: connection.Connection) -> str:
    """Why `fleet up` refuses: whose fleet is in the way (it may be another job's, still
    at work: `fleet down` would stop that job's fleet), and what to do."""
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(conn.started))
    job = f"{conn.job}, " if conn.job else ""
    return (f"a fleet is already up in {run_dir}: {job}coordinator pid {conn.pid} on {conn.host}, up since {since}. "
            f"If it is another job's, it is at work there: use another run directory, or wait for that job; "
            f"stop it (fleet down --run-dir {run_dir}) only if nothing needs it any more")


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


def down(run_dir: Path, pid: int | None = None, timeout: float = 20.0,
         name: str = connection.NAME) -> bool:
    """Stop the fleet in run_dir whose connection file is `name`: ask, then insist.
    True if one was running. A coordinator of another host (a run directory on a
    shared file system, `fleet down` from a login node) is only asked: its pid means
    nothing here, so nothing here is signalled; FleetError if it does not stop."""
    run_dir = Path(run_dir).resolve()
    conn = None
    path = run_dir / name
    if path.exists():
        try:
            conn = connection.read(path)
        except connection.ConnectionError_ as e:
            raise FleetError(str(e)) from None
        if conn.host == socket.gethostname() and not _alive(conn.pid):
            path.unlink(missing_ok=True)
            conn = None
    answered = False
    if conn is not None:
        pid = conn.pid
        c = Client(conn)
        try:
            reply = c.ask(P.Down(), timeout=5.0)
            answered = True
            if isinstance(reply, P.Stopping):
                # Its steps may take their grace to stop, and its agents a little more
                # (fleet.control.coordinator's teardown): only then insist.
                timeout = max(timeout, 2 * (reply.grace + 12.0))
        except FleetError:
            pass
        finally:
            c.close()
        if conn.host != socket.gethostname():
            return _gone_elsewhere(path, conn, answered, timeout)
    if pid is None:
        return False
    deadline = time.monotonic() + timeout
    sent_term = False
    while _alive(pid):
        if not sent_term and (time.monotonic() > deadline - timeout / 2 or (not answered and _stopped(pid))):
            _kill(pid, signal.SIGTERM)
            _kill(pid, signal.SIGCONT)  # a stopped coordinator (SIGSTOP, Ctrl-Z) handles its SIGTERM then
            sent_term = True
        if time.monotonic() > deadline:
            _kill(pid, signal.SIGKILL)
            break
        time.sleep(0.02)
    return True


def _stopped(pid: int) -> bool:
    """The process is stopped (SIGSTOP, SIGTSTP: state T), so it cannot answer."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except OSError:
        return False


def _gone_elsewhere(path: Path, conn: connection.Connection, answered: bool, timeout: float) -> bool:
    """Wait for a coordinator of another host that was asked to stop to remove its
    connection file (its teardown's last step). One that did not answer, of a Slurm job
    that has ended (fleet.site.jobstate), is gone: its file is removed. FleetError if it
    did not answer otherwise, or did not stop."""
    where = f"its coordinator runs on {conn.host} (pid {conn.pid})"
    if not answered and jobstate.ended_elsewhere(conn.host, conn.job, conn.cluster, outside=True):
        print(f"fleet: removed {path}: its fleet's coordinator (pid {conn.pid} on {conn.host}) ran in {conn.job}, "
              f"which has ended", file=sys.stderr)
        path.unlink(missing_ok=True)
        return True
    if not answered:
        raise FleetError(f"the fleet in {path.parent} did not answer: {where}, and only `fleet down` there can "
                         f"stop it for sure (ssh {conn.host} fleet down --run-dir {path.parent})")
    deadline = time.monotonic() + timeout
    while path.exists():
        if time.monotonic() > deadline:
            raise FleetError(f"the fleet in {path.parent} said it was stopping but is still up after {timeout:g} s: "
                             f"{where}; run `fleet down` there (ssh {conn.host} fleet down --run-dir {path.parent})")
        time.sleep(0.1)
    return True


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _not_up(run_dir: Path, proc: subprocess.Popen, offset: int) -> FleetError:
    """Why the coordinator exited before its fleet was up: the zygotes' refusal of the
    preload modules (PreloadRefused), else its exit status and the end of its log."""
    refused = preload_refusals(run_dir / "events.jsonl", offset, proc.pid)
    if refused:
        return PreloadRefused(refused, run_dir / "coordinator.log")
    if proc.returncode in (0, -signal.SIGTERM):  # (its teardown's status, or ended waiting for the lease)
        return FleetError(f"the fleet was stopped before it was up (fleet down, or SIGTERM to its coordinator "
                          f"pid {proc.pid})")
    if proc.returncode < 0:  # (a signal other than SIGTERM: killed, or crashed)
        return CoordinatorKilled(f"the coordinator (pid {proc.pid}) was killed by {signame(-proc.returncode)} "
                                 f"before the fleet was up; see {run_dir / 'coordinator.log'}")
    if proc.returncode == FULL_EXIT:  # it said so (fleet.control.comingup): its file system has no room
        return RunDirFull(f"the fleet could not come up in {shown(run_dir)}: its file system is full"
                          f"{room(run_dir)}; free space (or raise the quota) and run again "
                          f"(see {run_dir / 'coordinator.log'})")
    full = full_disk(run_dir)
    if full:  # (its log may be empty: it could not write it either)
        return RunDirFull(f"the coordinator exited with status {proc.returncode} before the fleet was up: {full}; "
                          f"free space (or raise the quota) and run again")
    return FleetError(f"the coordinator exited with status {proc.returncode} before the fleet was up; "
                      f"see {run_dir / 'coordinator.log'}:\n" + tail(run_dir / "coordinator.log"))
