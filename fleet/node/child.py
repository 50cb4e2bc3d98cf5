"""What a step's process does between the zygote's fork (or spawn) and its end.

For a ``call`` step, :func:`run_call` runs in the forked child: it sets the process
up (signals, process group, death signal, cores, GPUs, environment, directory, log),
calls the step's function with a :class:`StepContext`, reports to the zygote and
ends with ``os._exit`` -- it never returns into the zygote's loop, and never runs
the exit handlers or flushes the buffers it inherited.

The child writes two records to the zygote's report pipe (shared by all children):
``begin`` just before the step's own work and ``end`` just after. Each is one
``os.write`` shorter than PIPE_BUF, so records of different children never mix.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import select
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, NoReturn

import msgpack

if TYPE_CHECKING:
    from fleet.wire.messages import Launch

PR_SET_PDEATHSIG = 1

# Dispositions a step must not inherit from the zygote (which handles SIGCHLD,
# SIGTERM, SIGHUP and SIGINT itself) or from Python (which ignores SIGPIPE, SIGXFSZ).
DEFAULT_SIGNALS = tuple(
    getattr(signal, name) for name in (
        "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGCHLD", "SIGPIPE", "SIGXFSZ",
        "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGTTIN", "SIGTTOU", "SIGTSTP",
    ) if hasattr(signal, name)
)

# Room below PIPE_BUF (4096 on Linux, 512 by POSIX) for a report record.
_REPORT_MAX = 4000 if sys.platform.startswith("linux") else select.PIPE_BUF
_ERROR_MAX = 1000


@dataclass(frozen=True)
class StepContext:
    """The one argument of a ``call`` step's function.

    id, attempt: the step and which attempt this is (1 for the first).
    workdir: the step's directory, already the current directory.
    run_dir: the run directory of the fleet.
    cores, gpus: ids this step was given (the process is pinned to ``cores``; the
        GPU variables are set to ``gpus``). memory: its share, in bytes.
    placement: ((node, cores, gpus, memory), ...) for every node it spans.
    inputs, outputs: the paths the step declared. args: its arguments.
    log: the log file that fds 1 and 2 (and sys.stdout/sys.stderr) write to.
    """

    id: str
    attempt: int
    workdir: str
    run_dir: str
    cores: tuple
    gpus: tuple
    memory: int
    placement: tuple
    inputs: tuple
    outputs: tuple
    args: dict
    log: str


_prctl = None  # libc's prctl, looked up once: the zygote's own call warms it for every child


def set_pdeathsig(sig: int) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux)."""
    global _prctl
    if not sys.platform.startswith("linux"):
        return False
    try:
        if _prctl is None:
            _prctl = ctypes.CDLL(None, use_errno=True).prctl
        return _prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def step_environment(base: Mapping[str, str], restore: Mapping[str, str | None],
                     env: Mapping[str, str], gpus: Iterable[int],
                     gpu_vars: Iterable[str]) -> dict[str, str]:
    """The environment of a step: ``base``, with the ``restore`` variables put back
    to the agent's values (None: unset), then ``env``, then the GPU variables.

    GPU variables come last so the placement wins over a suite's env. An empty GPU
    list hides every device (``""``) except for ZE_AFFINITY_MASK, where empty means
    every device, so there it is left as inherited.
    """
    out = dict(base)
    for name, value in restore.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    out.update({str(k): str(v) for k, v in env.items()})
    ids = ",".join(str(g) for g in gpus)
    for name in gpu_vars:
        if ids or name != "ZE_AFFINITY_MASK":
            out[name] = ids
    return out


def placement_mismatch(cores: Iterable[int], affinity: Iterable[int]) -> str | None:
    """A log line if ``affinity`` (what the kernel gave) differs from ``cores``
    (what the step was given), else None. No cores means "not pinned": always fine."""
    want, got = sorted(set(cores)), sorted(set(affinity))
    if not want or want == got:
        return None
    return (f"fleet: PLACEMENT MISMATCH: this step was given cores {want} "
            f"but the kernel lets it run on {got}")


def resolve(target: str) -> Callable:
    """The function named by ``"pkg.mod:func"`` (``func`` may be dotted)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"call target {target!r} is not 'module:function'")
    obj = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{target} is not callable")
    return obj


def _short_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= _ERROR_MAX else text[:_ERROR_MAX - 3] + "..."


def write_report(fd: int, record: dict) -> None:
    """Write one record to the report pipe in a single atomic write."""
    data = msgpack.packb(record, use_bin_type=True)
    if len(data) > _REPORT_MAX:
        # A huge core list or a wordy error: keep placement_ok and the error's start.
        error = record.get("error")
        record = dict(record, affinity=[], error=error[:200] if error else error)
        data = msgpack.packb(record, use_bin_type=True)
    os.write(fd, data)


def make_dirs(launch: Launch) -> None:
    """The work directory, the log's directory and every output's parent: a step
    writes its outputs where the suite says without creating directories itself."""
    os.makedirs(launch.workdir, exist_ok=True)
    os.makedirs(os.path.dirname(launch.log), exist_ok=True)
    for out in launch.outputs:
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)


def _setup(launch: Launch, close_fds: Iterable[int],
           restore_env: Mapping[str, str | None],
           parent: int) -> tuple[list, str | None]:
    """Everything before the step's own work; returns (affinity, mismatch line)."""
    # Signals first: until now a SIGTERM would run the zygote's handler in here.
    signal.set_wakeup_fd(-1)
    for sig in DEFAULT_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for fd in close_fds:
        try:
            os.close(fd)
        except OSError:
            pass
    try:
        os.setpgid(0, 0)
    except OSError:
        pass  # the zygote already did it for us
    set_pdeathsig(signal.SIGKILL)
    if os.getppid() != parent:  # the zygote died before the death signal was armed
        os._exit(1)
    if launch.cores:
        try:
            os.sched_setaffinity(0, launch.cores)
        except OSError:
            pass  # e.g. no given core exists here; reported as a mismatch below
    environment = step_environment(
        dict(os.environ), restore_env, launch.env, launch.gpus, launch.gpu_vars)
    # Change only what differs (the same variables and values as clear() + update(),
    # which calls putenv for every variable and costs a forked child ~100 extra
    # copy-on-write faults, ~0.4 ms here).
    for name in [name for name in os.environ if name not in environment]:
        del os.environ[name]
    for name, value in environment.items():
        if os.environ.get(name) != value:
            os.environ[name] = value
    make_dirs(launch)
    os.chdir(launch.workdir)
    log = os.open(launch.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    # Fresh line-buffered streams: the inherited ones may hold the zygote's bytes.
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8",
                      errors="backslashreplace", closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8",
                      errors="backslashreplace", closefd=False)
    affinity = sorted(os.sched_getaffinity(0))
    mismatch = placement_mismatch(launch.cores, affinity)
    if mismatch:
        print(mismatch, file=sys.stderr, flush=True)
    return affinity, mismatch


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def run_call(launch: Launch, report_fd: int, *, first_at: float | None = None,
             close_fds: Iterable[int] = (),
             restore_env: Mapping[str, str | None] | None = None,
             parent: int | None = None) -> NoReturn:
    """Run a ``call`` step in a freshly forked child; always ends in ``os._exit``.

    ``first_at`` is the time of the child's first instruction (taken here if not
    given). ``close_fds`` are the zygote's own descriptors (agent pipes, wakeup fd,
    report read end). ``restore_env`` are variables the zygote changed for itself
    (thread counts) to put back for the step. ``parent`` is the zygote's pid, to
    notice that it died before the death signal was armed.
    """
    if first_at is None:
        first_at = time.time()
    if parent is None:
        parent = os.getppid()
    code, error = 1, None
    affinity: list = []
    placement_ok = True
    work_start = work_end = None
    try:
        try:
            affinity, mismatch = _setup(launch, close_fds, restore_env or {}, parent)
            placement_ok = mismatch is None
            func = resolve(launch.call)
            ctx = _context(launch)
            work_start = time.time()
            write_report(report_fd, {
                "pid": os.getpid(), "phase": "begin", "first_at": first_at,
                "work_start": work_start, "affinity": affinity,
                "placement_ok": placement_ok})
            try:
                func(ctx)
                code = 0
            finally:
                work_end = time.time()
        except SystemExit as exc:
            code = _exit_code(exc)
            if code:
                error = f"SystemExit: {exc.code}"
        except BaseException as exc:
            code = 1
            error = _short_error(exc)
            try:
                traceback.print_exc()
            except BaseException:
                pass
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        _report_end(report_fd, first_at, work_start, work_end, affinity, placement_ok, error)
    finally:
        os._exit(code)


def _context(launch: Launch) -> StepContext:
    return StepContext(
        id=launch.step, attempt=launch.attempt, workdir=launch.workdir,
        run_dir=launch.run_dir, cores=launch.cores, gpus=launch.gpus,
        memory=launch.memory, placement=launch.placement,
        inputs=launch.inputs, outputs=launch.outputs, args=launch.args,
        log=launch.log)


def _report_end(report_fd: int, first_at: float, work_start: float | None,
                work_end: float | None, affinity: list, placement_ok: bool,
                error: str | None) -> None:
    """The ``end`` record; a step that never reached its work is given none (now)."""
    now = time.time()
    write_report(report_fd, {
        "pid": os.getpid(), "phase": "end", "first_at": first_at,
        "work_start": work_start if work_start is not None else now,
        "work_end": work_end if work_end is not None else now,
        "affinity": affinity, "placement_ok": placement_ok, "error": error})
