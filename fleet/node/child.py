"""What a step's process does between the zygote's fork (or spawn) and its end.

For a ``call`` step, :func:`run_call` runs in the forked child: it sets the process
up (signals, session and process group, death signal, cores, GPUs, environment and
thread pools, log and its attempt header, directories), calls the step's function
with its ``args`` (and a :class:`StepContext` as ``ctx`` if it has that parameter),
waits for its threads and runs its exit handlers (fleet.node.stepend), reports to the
zygote and ends with ``os._exit`` -- it never returns into the zygote's loop, and never
runs the exit handlers or flushes the buffers it inherited from the zygote.

The child writes two records to the zygote's report pipe (fleet.node.childreport):
``begin`` just before the step's own work and ``end`` just after it (and after its
threads and exit handlers: fleet.node.stepend).
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import inspect
import os
import signal
import sys
import time
import traceback
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, NoReturn

from fleet.node import (childprep, childreport, diskfull, logcut, memlimit, oomscore, protocol, reseed, session,
                        stale, stepcontext, stepdirs, stepend, threads)
from fleet.node.params import only_ctx, parameters
from fleet.node.stepdirs import append_to_log, unproduced  # noqa: F401  (their old home; still imported from here)
from fleet.node.stepcontext import StepContext  # noqa: F401  (its old home; still imported from here)
from fleet.wire import interpreter, ownfiles

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

_ERROR_MAX = 1000


# Set in the zygote's forking helper (fleet.node.forker), which its forks inherit: every
# signal in DEFAULT_SIGNALS at default, none blocked, no wakeup fd.
signals_clean = False
# Set there too: the OOM killer's preference for steps (fleet.node.oomscore) is inherited.
oom_raised = False

_prctl = None  # libc's prctl, looked up once: the zygote's own call warms it for every child
_prctl_args: dict = {}  # signal -> prctl's arguments, made once (the helper's call makes the children's)


def set_pdeathsig(sig: int) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux)."""
    global _prctl
    if not sys.platform.startswith("linux"):
        return False
    try:
        if _prctl is None:
            _prctl = ctypes.CDLL(None, use_errno=True).prctl
        args = _prctl_args.get(sig)  # (converting five ints cost a forked child ~15 page faults)
        if args is None:
            args = _prctl_args[sig] = (ctypes.c_int(PR_SET_PDEATHSIG), *map(ctypes.c_ulong, (int(sig), 0, 0, 0)))
        return _prctl(*args) == 0
    except (OSError, AttributeError):
        return False


def die_with(parent: int, sig: int) -> bool:
    """Ask for ``sig`` when this process's parent dies (:func:`set_pdeathsig`); False if
    ``parent`` (its pid, 0: not known) is no longer our parent: it died before we asked,
    and no signal will come."""
    set_pdeathsig(sig)
    return not parent or os.getppid() == parent


def step_environment(base: Mapping[str, str], restore: Mapping[str, str | None],
                     env: Mapping[str, str], gpus: Iterable[int],
                     gpu_vars: Iterable[str], workdir: str = "") -> dict[str, str]:
    """The environment of a step: ``base``, with the ``restore`` variables put back
    to the agent's values (None: unset), then ``env``, then PWD (``workdir``, where the
    step runs, if given), then the GPU variables.

    PWD as a shell sets it after a cd: inherited, it named the directory `fleet up` ran
    in, and a program reading $PWD (getenv, os.environ) wrote to or reported that one
    (a step run through `sh -c` was spared: sh resets it).

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
    if workdir:
        out["PWD"] = workdir
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
    try:
        obj = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if not exc.name or not (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise  # (the step's module found, and something it imports not: its traceback says where)
        raise CallModuleMissing(f"{exc}: {where_modules_are()}", name=exc.name) from None
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{target} is not callable")
    return obj


class CallModuleMissing(ModuleNotFoundError):
    """A call step's own module (or its package) is nowhere on the agents' sys.path: the
    message says where they looked. The suite's mistake: said without fleet's traceback.
    Its reason keeps the words of ModuleNotFoundError (fleet.node.child._short_error)."""


MODULE_DIRS_SAID = 5  # of sys.path's own entries, in a missing module's line


def where_modules_are() -> str:
    """Where this process imports a user's module from, as a clause: the directory the
    fleet started in (fleet.wire.interpreter.user_path) and the other entries of sys.path
    that are not Python's own (PYTHONPATH's, .pth files'), a few; and how to check a suite."""
    own = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    started = interpreter.started_in
    others = [p for p in sys.path if p and p != started and not p.endswith(".zip")
              and not any(os.path.realpath(p).startswith(o + os.sep) for o in own)
              and os.path.basename(p) not in ("site-packages", "dist-packages")]
    said = ", ".join(others[:MODULE_DIRS_SAID]) + (f" and {len(others) - MODULE_DIRS_SAID} more"
                                                   if len(others) > MODULE_DIRS_SAID else "")
    home = f"from {started} (the directory the fleet started in)" if started else "from no directory of the fleet's"
    return (f"the agents import a call step's module {home}"
            + (f" and from {said} (their PYTHONPATH and sys.path)" if said else " (and nothing on their PYTHONPATH)")
            + "; put it there, or start the fleet where it is; `fleet validate --imports SUITE` checks a suite's "
              "modules from where the fleet's agents import")


class ArgumentMismatch(TypeError):
    """A step's ``args`` do not fit its function's parameters (the message names them)."""


def call_arguments(func: Callable, ctx: StepContext, args: Mapping,
                   target: str) -> tuple[tuple, dict]:
    """(positional, keyword) arguments for a call step's function.

    Every ``args`` entry is passed by name. A parameter named ``ctx`` gets the step
    context as well -- except that a function whose only parameter is ``ctx`` (the
    0.1 form, ``def step(ctx)``) gets just the context and reads ``ctx.args``. An
    argument the function has no parameter for, or a required parameter no argument
    fills, is an :class:`ArgumentMismatch` naming it, raised before the call.
    """
    if not args and only_ctx(func):
        return (), {"ctx": ctx}
    try:
        params = parameters(func)  # name -> (kind, has a default)
    except (TypeError, ValueError):  # no signature to read (some builtins): Python checks
        return (), dict(args)
    positional: tuple = ()
    kwargs = dict(args)
    if "ctx" in params:
        if "ctx" in kwargs:
            raise ArgumentMismatch(f"{target}: 'ctx' is the step context, not an argument; rename it in args")
        if len(params) == 1:
            kwargs = {}
        if params["ctx"][0] is inspect.Parameter.POSITIONAL_ONLY:
            positional = (ctx,)
        else:
            kwargs["ctx"] = ctx
    takes_any = any(kind is inspect.Parameter.VAR_KEYWORD for kind, _ in params.values())
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    by_name = [n for n, (kind, _) in params.items() if kind in named]
    unknown = [k for k in kwargs if k not in by_name and not takes_any]
    if unknown:
        raise ArgumentMismatch(
            f"{target} has no parameter {', '.join(repr(k) for k in unknown)} "
            f"(it takes {', '.join(by_name) or 'none by name'})")
    missing = [n for n, (kind, has_default) in params.items() if not has_default
               and kind in named and n not in kwargs and not (n == "ctx" and positional)]
    if missing:
        raise ArgumentMismatch(
            f"{target} needs {', '.join(repr(n) for n in missing)}: add "
            f"{'it' if len(missing) == 1 else 'them'} to the step's args")
    return positional, kwargs


def log_header(launch: Launch, at: float) -> bytes:
    """The line that opens each attempt in a step's log: when, which attempt, which
    fleet (FLEET_ID, when the coordinator sets it) and which node."""
    node = launch.placement[0][0] if launch.placement else os.uname().nodename
    fleet = (launch.env or {}).get("FLEET_ID")
    when = _local_iso(at)
    return (f"==== fleet: step {launch.step} attempt {launch.attempt}"
            f"{f' fleet {fleet}' if fleet else ''} on {node} at {when} ====\n").encode()


def _local_iso(at: float) -> str:
    """datetime.fromtimestamp(at).astimezone().isoformat(timespec="seconds"), from
    time.localtime (datetime costs a forked child ~0.1 ms more in page faults)."""
    t = time.localtime(at)
    off = t.tm_gmtoff or 0
    if off % 60 == 0:  # every zone since the 1970s: strftime's %z, with the colon
        text = time.strftime("%Y-%m-%dT%H:%M:%S%z", t)
        return text[:-2] + ":" + text[-2:]
    sign, off = ("-", -off) if off < 0 else ("+", off)
    zone = f"{sign}{off // 3600:02d}:{off % 3600 // 60:02d}:{off % 60:02d}"
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + zone


def _short_error(exc: BaseException) -> str:
    try:
        kind = "ModuleNotFoundError" if isinstance(exc, CallModuleMissing) else type(exc).__name__  # (as before)
        text = f"{kind}: {exc}"
    except BaseException:  # (its __str__ raised: the step's end must still be said, with its class)
        text = f"{type(exc).__name__}: <its text could not be made: str() of it raised>"
    return text if len(text) <= _ERROR_MAX else text[:_ERROR_MAX - 3] + "..."


def _detach(close_fds: Iterable[int], parent: int, own_group: bool = True) -> None:
    """Leave the zygote: default signals, none of its descriptors, a session and process
    group of our own (unless ``own_group`` is False: a foreground step stays in the
    terminal's group, so that Ctrl-C and a debugger's reads reach it), and death with it."""
    # Signals first: until now a SIGTERM would run the zygote's handler in here.
    if not signals_clean:  # (a spare forked by the zygote's helper has them clean already)
        signal.set_wakeup_fd(-1)
        for sig in DEFAULT_SIGNALS:
            if signal.getsignal(sig) is not signal.SIG_DFL:
                signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for fd in close_fds:
        try:
            os.close(fd)
        except OSError:
            pass
    if own_group:
        session.lead()
    set_pdeathsig(signal.SIGKILL)
    if os.getppid() != parent:  # the zygote died before the death signal was armed
        os._exit(1)
    if not oom_raised:  # a step, not fleet, is the OOM killer's first choice
        oomscore.raise_for()


def _set_environment(launch: Launch, restore_env: Mapping[str, str | None]) -> None:
    # The step's thread count replaces the zygote's "1" (and whatever the agent had);
    # then the step's env, then its GPU variables: the same variables and values as
    # step_environment() of the whole environment, but only what changes is written
    # (copying and comparing all of os.environ cost a forked child ~0.7 ms), and the
    # restore part is made once in the zygote for one-thread steps (childprep).
    environ = os.environ
    for name, value in childprep.environment_changes(restore_env, threads.step_threads(launch)):
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
    for name, value in (launch.env or {}).items():  # (FLEET_STEP etc. differ every step:
        environ[str(name)] = str(value)              # set, not read and compared first)
    if launch.env and "TZ" in launch.env:  # (time functions read TZ once, at import, unless told again)
        time.tzset()
    if launch.workdir:  # (where the step runs: step_environment)
        environ["PWD"] = launch.workdir
    if launch.gpu_vars:
        ids = ",".join(str(g) for g in launch.gpus)
        for name in launch.gpu_vars:
            if (ids or name != "ZE_AFFINITY_MASK") and environ.get(name) != ids:
                environ[name] = ids


def _setup(launch: Launch, close_fds: Iterable[int],
           restore_env: Mapping[str, str | None],
           parent: int, foreground: bool = False) -> tuple[list, str | None]:
    """Everything before the step's own work; returns (affinity, mismatch line).
    ``foreground`` (`fleet step`): fds 0, 1 and 2 stay the terminal's, not the log."""
    _detach(close_fds, parent, own_group=not foreground)
    unheld = memlimit.enter(launch)  # into its memory cgroup before anything of the step's
    if launch.cores:
        try:
            os.sched_setaffinity(0, launch.cores)
        except OSError:
            pass  # e.g. no given core exists here; reported as a mismatch below
    _set_environment(launch, restore_env)
    if not foreground:  # the log before the rest: what goes wrong making that is said in it
        stepdirs.make_log_dir(launch)
        _to_log(launch)
    # Fresh line-buffered streams: the inherited ones may hold the zygote's bytes
    # (made once in the zygote, never written to, where it prepared them).
    if childprep.streams is not None:
        sys.stdout, sys.stderr = childprep.streams
        childprep.streams = None
    else:
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8",
                          errors="backslashreplace", closefd=False)
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8",
                          errors="backslashreplace", closefd=False)
    if unheld:
        print(unheld, file=sys.stderr, flush=True)
    affinity = sorted(os.sched_getaffinity(0))
    mismatch = placement_mismatch(launch.cores, affinity)
    if mismatch:
        print(mismatch, file=sys.stderr, flush=True)
    # After the pinning: an OpenMP runtime sizes new threads' affinity from ours.
    failed = threads.resize_preloaded_pools(threads.step_threads(launch))
    if failed:
        print(failed, file=sys.stderr, flush=True)
    # What the step inherits of its zygote's preloads: numpy's random state (or every step
    # forked here draws the same numbers), and code that may have been edited since.
    for line in (reseed.reseed_preloaded(), stale.changed(launch.call)):
        if line:
            print(line, file=sys.stderr, flush=True)
    stepdirs.make_dirs(launch)
    note = protocol.take_note()  # (a restart that moved nothing aside says so, after the header)
    if note:
        print(note, end="", file=sys.stderr, flush=True)
    stepdirs.enter_workdir(launch)
    return affinity, mismatch


def _to_log(launch: Launch) -> None:
    """stdin from /dev/null, stdout and stderr to the step's log, opened by its header."""
    log = stepdirs.open_log(launch.log)  # (one it cannot open: said so, and no log pointed to)
    null = childprep.devnull  # opened once in the zygote (childprep), else here
    childprep.devnull = None
    if null is None:
        null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    # Its length after the header, to find at the step's end whether the step truncated
    # its log (fleet.node.logcut): through fd 2, which a step redirects less than fd 1.
    global log_mark
    log_mark = logcut.write_header(2, log_header(launch, time.time()))


log_mark = None  # the forked child's log after its header (fleet.node.logcut)


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _failure(exc: BaseException) -> tuple[int, str | None]:
    """(exit status, error) for what a step raised; the traceback goes to its log.
    fleet.Next, WaitForChildren, Restart or Broken: httk's code, and no traceback."""
    if isinstance(exc, protocol.Control):
        stepcontext.control.update(outcome=exc.outcome, stage=getattr(exc, "stage", ""))
        return exc.code, exc.words()
    if isinstance(exc, SystemExit):
        code = _exit_code(exc)
        return code, (f"SystemExit: {exc.code}" if code else None)
    if isinstance(exc, stepdirs.SetupFailed):  # the path and why, on one line: no traceback of ours
        error = str(exc)[:_ERROR_MAX]
        _said(f"fleet: {error}")
        return 1, error
    error = _short_error(exc)
    try:
        if isinstance(exc, (ArgumentMismatch, CallModuleMissing, stepend.NotAStepFunction)):  # the suite's: no traceback
            print(f"fleet: {error}", file=sys.stderr)
        else:
            traceback.print_exc()
    except BaseException:
        pass
    return 1, error


def _said(line: str) -> None:
    try:
        print(line, file=sys.stderr)
    except BaseException:
        pass


def run_call(launch: Launch, report_fd: int, *, first_at: float | None = None,
             close_fds: Iterable[int] = (),
             restore_env: Mapping[str, str | None] | None = None,
             parent: int | None = None, foreground: bool = False) -> NoReturn:
    """Run a ``call`` step in a freshly forked child; always ends in ``os._exit``.

    ``first_at`` is the time of the child's first instruction (taken here if not
    given). ``close_fds`` are the zygote's own descriptors (agent pipes, wakeup fd,
    report read end). ``restore_env`` are variables to put back for the step before
    its own (the thread-pool variables are then set to the step's thread count
    whatever they were). ``parent`` is the zygote's pid, to notice that it died
    before the death signal was armed. ``foreground`` (`fleet step`, forked from the
    command itself): the step keeps the terminal as its stdin, stdout and stderr, and
    its process group, instead of the log. The function is called as
    :func:`call_arguments` says, after :func:`fleet.context` was set to its context.
    """
    if first_at is None:
        first_at = time.time()
    # No collection during the set-up: it would walk (and so copy) pages the zygote
    # shares; the step's own code runs with the collector as the zygote had it.
    collecting = gc.isenabled()
    gc.disable()
    if parent is None:
        parent = os.getppid()
    code, error, full = 1, None, None
    affinity: list = []
    placement_ok = True
    work_start = work_end = worked = None
    try:
        try:
            affinity, mismatch = _setup(launch, close_fds, restore_env or {}, parent, foreground)
            placement_ok = mismatch is None
            stepend.forget_inherited()  # the zygote's atexit handlers; the step's module may add its own
            func = resolve(launch.call)
            ctx = _context(launch)
            stepcontext.enter(ctx)
            positional, kwargs = call_arguments(func, ctx, launch.args, launch.call)
            stepend.refuse_generators(func, launch.call)
            if collecting:
                gc.enable()
            work_start, work_mono = time.time(), time.monotonic()  # (its length is the latter's: exits.worked)
            childreport.write_report(report_fd, {
                "pid": os.getpid(), "phase": "begin", "first_at": first_at,
                "work_start": work_start, "work_mono": work_mono, "affinity": affinity,
                "placement_ok": placement_ok})
            stepend.call(func, positional, kwargs, launch.call)
            code = 0
        except BaseException as exc:
            code, error = _failure(exc)
            if work_start is None:  # its set-up (directories, log) found the disk full or read-only: no attempt
                full = diskfull.errno_of(exc)
        stepend.wind_up()  # its threads, atexit handlers and buffers, as at a program's end: still its work
        logcut.cut(log_mark)  # (after its own last words)
        if work_start is not None:
            work_end, worked = time.time(), time.monotonic() - work_mono
        childreport.report_end(report_fd, first_at, work_start, work_end, affinity, placement_ok, error, full,
                               worked)
    finally:
        os._exit(code)


def _context(launch: Launch) -> StepContext:
    # Every field given, so its __dict__ is set at once: the frozen dataclass's
    # __init__ (one object.__setattr__ a field) costs a forked child ~0.1 ms more.
    ctx = object.__new__(StepContext)
    object.__setattr__(ctx, "__dict__", dict(
        id=launch.step, attempt=launch.attempt, workdir=launch.workdir,
        run_dir=launch.run_dir, cores=tuple(launch.cores), gpus=tuple(launch.gpus),
        memory=launch.memory, placement=_tuples(launch.placement),
        inputs=tuple(launch.inputs), outputs=tuple(launch.outputs), args=launch.args,
        log=launch.log, threads=threads.step_threads(launch), phase=launch.phase, stage=launch.stage,
        children=dict(launch.children), restarts=launch.restarts, children_omitted=launch.children_omitted))
    return ctx


def _tuples(placement) -> tuple:
    """((node, cores, gpus, memory), ...), as the fleet's message gives it (tuple() of a
    tuple is the tuple itself): `fleet step` makes its Launch of lists, and before
    2026-12-06 its ctx.cores was [0] where a fleet's was (0,)."""
    if type(placement) is tuple and all(type(s) is tuple for s in placement):
        return placement
    return tuple((node, tuple(cores), tuple(gpus), memory) for node, cores, gpus, memory in placement)
