"""A step's directories on its node, made before it runs: its own (``steps/<id>/``, where
its log and its ``.fleet`` records are), then its work directory and each output's
parent, so that a step writes its outputs where the suite says without making
directories itself.

The step's own directory comes first, and its log is opened before the rest is made:
what goes wrong with the rest (a work directory that is a dangling symbolic link, a
file where a directory should be) is said in the log, on one line naming the path and
why (:class:`SetupFailed`). Before 2026-12-06 the work directory was made first, and
such a step's log did not exist though `fleet run` pointed at it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from fleet.node import protocol
from fleet.wire import owndirs, ownfiles
from fleet.wire.records import NO_LOG, NO_LOG_OPEN

if TYPE_CHECKING:
    from fleet.wire.messages import Launch


class SetupFailed(OSError):
    """A step's directories could not be made; the message names the path and why. An
    OSError with the cause's errno (a full or read-only disk stays one: fleet.node.diskfull).
    `own`: one of fleet's own directories (the step's records, its submit directory), not
    the step's work or output directories, which may lie on another file system (a
    symbolic link in the run directory to a read-only dataset)."""

    def __init__(self, message: str, errno_: int | None, own: bool = False):
        super().__init__(errno_, message)
        self.own = own

    def __str__(self) -> str:
        return str(self.strerror)


def make_log_dir(launch: Launch) -> None:
    """The step's own directory and its .fleet records directory (made here, on the
    node, so the coordinator's marker write needs no mkdir of its own)."""
    path = (launch.log.rpartition("/")[0] or "/") + "/.fleet"  # (the log is absolute)
    _made(path, f"{NO_LOG[len('cannot make '):]} {path}", owndirs.makedirs)  # (its words: records.no_log)


def open_log(path: str) -> int:
    """The step's log, opened to append (and read: its last byte); :class:`SetupFailed`
    in records.no_log's words if it cannot be (made immutable, a directory in its place),
    so that no log is pointed to: an earlier attempt's would be read as this one's."""
    try:
        return os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, ownfiles.MODE)
    except OSError as exc:
        raise SetupFailed(f"{NO_LOG_OPEN} {path}: {exc.strerror or exc}", exc.errno, own=True) from None


def make_dirs(launch: Launch) -> None:
    """The work directory and every output's parent. After a restart the old work
    directory is moved aside first; a command with protocol = "steps" gets its
    $FLEET_SUBMIT_DIR, and no stale $FLEET_NEXT_STAGE. :class:`SetupFailed` if one
    cannot be made."""
    if launch.restarts:
        try:
            protocol.fresh_workdir(launch)
        except OSError as exc:
            raise SetupFailed(f"cannot move the earlier attempt's files aside in {launch.workdir}: "
                              f"{_why(exc.filename or launch.workdir, exc)}", exc.errno) from None
    if launch.protocol:
        _made(protocol.submit_dir(launch), f"the submit directory {protocol.submit_dir(launch)}", owndirs.makedirs)
        protocol.clear_submitted(protocol.submit_dir(launch))
        try:
            os.unlink(protocol.next_stage_file(launch))
        except FileNotFoundError:
            pass
    _made(launch.workdir, f"the work directory {launch.workdir}")
    for out in launch.outputs:
        where = os.path.dirname(out) or "."
        _made(where, f"the directory {where} (of output {os.path.basename(out)})")


def enter_workdir(launch: Launch) -> None:
    """chdir to the work directory; :class:`SetupFailed` if it cannot be entered."""
    try:
        os.chdir(launch.workdir)
    except OSError as exc:
        raise SetupFailed(f"cannot enter the work directory {launch.workdir}: {_why(launch.workdir, exc)}",
                          exc.errno) from None


def _made(path: str, what: str, makedirs=None) -> None:
    """makedirs(path) (default: _makedirs, as the umask says: the step's own work
    directory and outputs' directories are the user's to share; fleet's, as
    fleet.wire.owndirs.makedirs: only their owner may write them)."""
    try:
        (makedirs or _makedirs)(path)
    except OSError as exc:
        raise SetupFailed(f"cannot make {what}: {_why(path, exc)}", exc.errno, own=makedirs is not None) from None


def _makedirs(path: str) -> None:
    """os.makedirs(path, exist_ok=True), one mkdir in the common cases (the parent
    exists; the directory exists) instead of makedirs' walk in Python."""
    try:
        os.mkdir(path)
    except FileExistsError:
        if not os.path.isdir(path):
            os.makedirs(path, exist_ok=True)  # raises as makedirs does
    except FileNotFoundError:
        os.makedirs(path, exist_ok=True)


def _why(path: str, exc: OSError) -> str:
    """Why ``path`` could not be made: what is in the way (the path itself or the
    nearest of its parents that exists), else the system's word."""
    there = path
    while there and there != "/" and not os.path.lexists(there):
        there = os.path.dirname(there)
    who = "it" if there == path else there
    try:
        if os.path.islink(there) and not os.path.exists(there):
            return f"{who} is a symbolic link to {os.readlink(there)}, which does not exist"
        if os.path.lexists(there) and not os.path.isdir(there):
            return f"{who} exists and is not a directory"
    except (OSError, ValueError):
        pass
    return exc.strerror or str(exc)


def append_to_log(path: str, text: str) -> None:
    """Append ``text`` to a step's log (from the zygote: a line of its own after the
    step's), on a line of its own (:func:`line_start`)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, ownfiles.MODE)  # (read: line_start)
    except OSError:
        return
    try:
        os.write(fd, line_start(fd) + text.encode(errors="backslashreplace"))
    except OSError:
        pass  # a full disk: the step's outcome still says it
    finally:
        os.close(fd)


def line_start(fd: int) -> bytes:
    """What to write to the log open at ``fd`` before a line of fleet's own (an
    attempt's header, a ``fleet:`` line): a newline if the log's last byte is not one
    (the step's output ended without it: ``printf 'progress 50%'``), else nothing.
    Before 2026-12-06 such a line ran on after the step's last bytes. One fstat, and
    one pread where the log is not empty."""
    return line_start_stat(fd)[0]


def line_start_stat(fd: int) -> tuple[bytes, os.stat_result | None]:
    """(:func:`line_start`, the fstat it made; None if ``fd`` is not a regular file)."""
    try:
        st = os.fstat(fd)
        size = st.st_size
        return (b"\n" if size and os.pread(fd, 1, size - 1) != b"\n" else b""), st
    except OSError:  # (not a regular file: a terminal, a pipe)
        return b"", None


def unproduced(launch: Launch) -> str | None:
    """The error for declared outputs missing after a successful step, else None;
    each named as the suite wrote it (relative to the run directory)."""
    missing = [out for out in launch.outputs if not os.path.exists(out)]
    if not missing:
        return None
    prefix = launch.run_dir.rstrip("/") + "/"
    names = ", ".join(out[len(prefix):] if out.startswith(prefix) else out for out in missing)
    if len(missing) == 1:
        return f"declared output {names} was not produced"
    return f"declared outputs {names} were not produced"
