"""Everything checked before a suite runs: the file, the graph, given an allocation
whether every step can ever fit it, and on request whether the preload modules and
every call target import.

This is the shell around the pure core: it reads the suite file, resolves its run
directory, looks on disk for the inputs no step produces and imports call targets in
a child process.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Mapping

from fleet.control import answerline
from fleet.core import unparsedgraph
from fleet.core.graph import Graph, build_graph
from fleet.core.problems import Problem, SuiteError
from fleet.core.resources import Capacity, NodeSpec
from fleet.core.suite import Reading, StepSpec, Suite, Unparsed, read_toml

IMPORT_TIMEOUT_S = 120.0  # for importing every preload and call module of a suite, all together


def read_suite_file(path: str | Path) -> Reading:
    """Read and check a suite file: the steps that read cleanly and every problem."""
    path = Path(path)
    return read_toml(_text(path), path, resolve=Path.resolve)


def suite_head(path: str | Path) -> Suite:
    """A suite file's [suite] table only (fleet.core.suite.read_toml's `head`): the
    suite with no steps; SuiteError with that table's problems."""
    path = Path(path)
    return read_toml(_text(path), path, resolve=Path.resolve, head=True).check()


def _text(path: Path) -> str:
    fname = str(path)
    try:
        return path.read_text(encoding="utf-8")  # (TOML is UTF-8, whatever the locale)
    except FileNotFoundError:
        from fleet.site.shipped import hint  # (the README's examples/demo.toml, in an installed fleet)
        raise SuiteError([Problem(fname, None, None, "no such file" + hint(path))]) from None
    except OSError as e:
        if e.errno not in _THE_FILES:  # (EMFILE, ENOMEM, EIO: the reader's trouble, not the suite's)
            raise SuiteUnread([Problem(fname, None, None, f"cannot read: {e}")], fname, e) from None
        raise SuiteError([Problem(fname, None, None, f"cannot read: {e}")]) from None
    except UnicodeDecodeError as e:
        raise SuiteError([Problem(fname, None, None, f"cannot read: {e}")]) from None


# Errors reading a suite file that are its own or its path's (missing, not the user's to read, a
# directory): the suite's problem. Any other is the reader's (SuiteUnread).
_THE_FILES = frozenset({errno.ENOENT, errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOTDIR, errno.ELOOP,
                        errno.ENAMETOOLONG})


class SuiteUnread(SuiteError):
    """A suite file that could not be read for a reason of the reader's own (no descriptor
    left, no memory, an I/O error): nothing was judged of the suite. A SuiteError still,
    where the reader is the user's own process (fleet run's checks); the coordinator
    answers it as its own error, not the suite's (fleet.control.submissions.check;
    before 2026-12-07 "1 problem found" and exit 2, as if the suite were invalid)."""

    def __init__(self, problems: list[Problem], path: str, error: OSError):
        super().__init__(problems)
        self.fault = f"the fleet could not read {path}: {error}; the suite was not judged (nothing of it started)"


def load_suite(path: str | Path) -> Suite:
    """Read and check a suite file; raise SuiteError listing every problem found."""
    return read_suite_file(path).check()


def fit_problems(suite: Suite, nodes: list[NodeSpec], notes: Mapping[str, str] = {},
                 blocks: bool = False) -> list[Problem]:
    """Steps whose minimum can never be met by this allocation (`blocks`: an MPI step's
    ranks in blocks of one count per node, as PALS places them: fleet.core.ppnblocks). `notes`: what to add to
    a problem that names a word ("GPU", "memory"): what the nodes were assumed or found
    to have, and why, which the problem alone would hide (no GPU ids could be read; the
    memory was not given)."""
    cap = Capacity.of(nodes)
    out = []
    # The answer depends only on the step's demand: asked once per distinct one (a big
    # array suite has a handful), not once per step.
    widths: dict[tuple, object] = {}
    for s in suite.steps:
        key = (s.cores, s.min_cores, s.threads if s.mpi else 1, s.gpus, s.memory, s.span, blocks and s.mpi and s.span)
        w = widths.get(key, widths)
        if w is widths:
            w = widths[key] = cap.width(*key)
        if isinstance(w, str):
            field = ("threads" if w.startswith("a rank needs") else "gpus" if "GPU" in w
                     else "memory" if "memory" in w else _width_field(s))
            note = "".join(f"; {text}" for word, text in notes.items() if word in w)
            out.append(Problem(s.source, s.id, field, "can never run on this allocation: " + w + note))
    return out


def _width_field(s) -> str:
    """The field the user wrote for a step's width: its minimum only when that differs
    from its target (otherwise the minimum is the target, and the target is what was written)."""
    if s.mpi:
        return "min_ranks" if s.min_ranks != s.ranks else "ranks"
    return "min_cores" if s.min_cores != s.cores else "cores"


def inside_run_dir(run_dir: Path) -> Callable[[str], str]:
    """The graph's `local`: the path an input is matched against outputs by. A relative
    input is its own; an absolute one that points inside run_dir (as written, or once
    symbolic links are resolved) is made relative to it, so that it names the file a
    step's output there is (before 2026-12-06 it was said to be produced by no step)."""
    bases = tuple(dict.fromkeys(b.rstrip(os.sep) + os.sep for b in (os.path.normpath(run_dir),
                                                                     os.path.realpath(run_dir))))
    real_dirs: dict[str, str] = {}  # (many inputs share a directory: it is resolved once)

    def local(inp: str) -> str:
        p = os.path.normpath(inp)
        if not os.path.isabs(p):
            return p
        head, tail = os.path.split(p)
        if head not in real_dirs:
            real_dirs[head] = os.path.realpath(head)
        for path in (p, os.path.join(real_dirs[head], tail)):
            for base in bases:
                if path.startswith(base):
                    return path[len(base):]
        return p
    return local


def missing_on_disk(run_dir: Path, produced_elsewhere: Unparsed = Unparsed(), into: list[Problem] | None = None,
                    local: Callable[[str], str] = os.path.normpath):
    """The graph's `unproduced` hook: an input no step produces must exist under run_dir
    (an absolute input: where it says). One that a step with problems would produce is
    not looked for: that step's problems are reported already (`local`: the path it
    is matched by, as the graph's). With `into`, a problem is put there instead of in
    the graph's list (checked_suite's `scope` narrows them)."""
    def check(step: StepSpec, inp: str) -> Problem | None:
        if local(inp) in produced_elsewhere or (run_dir / inp).exists():
            return None
        where = "" if os.path.isabs(inp) else f" in {run_dir}"
        problem = Problem(step.source, step.id, "inputs", f"{inp!r} is produced by no step and does not exist{where}")
        if into is None:
            return problem
        into.append(problem)
        return None
    return check


def run_dir_problem(suite: Suite) -> Problem | None:
    """What keeps the suite's run_dir from being made and used, as `fleet run` would find
    it (fleet.control.client.usable_run_dir), found without making anything: it, or a
    directory it would be made in, is a file; or its path is too long for fleet's files."""
    from fleet.control.dirlimits import not_a_directory, run_dir_too_long, shown
    too_long = run_dir_too_long(suite.run_dir)
    why = f"cannot be used: {too_long}" if too_long else not_a_directory(suite.run_dir)
    return Problem(str(suite.path), None, "suite.run_dir", f"{shown(suite.run_dir)} {why}") if why else None


def checked_suite(path: str | Path, nodes: list[NodeSpec] | None = None, check_inputs: bool = True,
                  run_dir: Path | None = None, imports: bool = False, own_run_dir: bool = False,
                  imports_from: Path | None = None, fit_notes: Mapping[str, str] = {},
                  more: Callable[[Suite, Graph], list[Problem]] | None = None,
                  scope: Callable[[Suite, Graph, list[Problem]], list[Problem]] | None = None) -> tuple[Suite, Graph]:
    """Load a suite and check it whole; raise SuiteError with every problem, in setup order.

    The graph is built from the steps that read cleanly, so a field problem in one step
    does not hide a cycle, an unknown dep, a missing input or a twice-produced output in
    another; nor its own unknown deps and twice-produced outputs (fleet.core.unparsedgraph). Inputs are looked for in `run_dir` (default: the suite's own run_dir).
    With `imports`, each call target's module is imported in a child process started
    in `imports_from` (default: the current directory). With `own_run_dir`, the suite's
    run_dir must be a directory or one that can be made. `fit_notes`: what the fit
    problems against `nodes` add (fit_problems's notes). `more` finds further problems
    from the suite and graph (a submission's fit: fleet.control.fitscope), merged in
    setup order with the rest. `scope` keeps, of the missing inputs and `more`'s
    problems, those that matter (a submission's: of the steps it would start)."""
    reading = read_suite_file(path)
    suite = reading.suite
    where = run_dir if run_dir is not None else suite.run_dir
    missing: list[Problem] = []
    local = inside_run_dir(where)
    hook = (missing_on_disk(where, reading.unparsed_outputs, into=missing if scope else None, local=local)
            if check_inputs else None)
    graph, later = build_graph(suite.steps, known_done=reading.unparsed, unproduced=hook, local=local)
    later += unparsedgraph.problems(str(suite.path), reading.partial, suite.steps, reading.unparsed)
    if own_run_dir and (problem := run_dir_problem(suite)) is not None:
        later.append(problem)
    if nodes is not None:
        later += fit_problems(suite, nodes, notes=fit_notes)
    found = missing + (more(suite, graph) if more is not None else [])
    later += scope(suite, graph, found) if scope is not None and found else found
    if imports:
        later += import_problems(suite, cwd=imports_from)
    problems = reading.merged(later)
    if problems:
        raise SuiteError(problems)
    return suite, graph


def unpreloaded_modules(suite: Suite) -> list[str]:
    """The distinct modules of the suite's call targets that its ``preload`` does not
    name, in setup order: each call step would import them itself (fleet validate's hint)."""
    named = set(suite.preload)
    modules = dict.fromkeys(s.call.partition(":")[0] for s in suite.steps if s.call is not None)
    return [m for m in modules if m not in named]


def preload_hint(suite: Suite) -> str | None:
    """A line suggesting to preload the call steps' modules; None if there is none to add."""
    missing = unpreloaded_modules(suite)
    if not missing:
        return None
    listed = ", ".join(json.dumps(m) for m in (*suite.preload, *missing))
    return (f"hint: call steps import {', '.join(repr(m) for m in missing)} themselves; "
            f"preload = [{listed}] in [suite] lets every zygote import them once (see docs/user-guide.md in fleet's source)")


# The child that imports: one process for every module, each import's failure caught,
# the answer on one marked line (a module may print while it is imported). The preload
# modules come first, in order, as a zygote imports them, each followed by a count of
# the process's threads (a zygote refuses one that starts a thread: it forks); then the
# call steps' modules, as a forked child imports them once the preloads are in.
_IMPORTER = r"""
import importlib, json, os, sys
preload, calls = json.loads(sys.stdin.read())  # (on stdin: many calls' args keys outgrow one argv string)
_null = os.open(os.devnull, os.O_RDONLY)  # (a module that reads stdin on import reads nothing, as before)
os.dup2(_null, 0)
os.close(_null)
try:  # the rule a step's child applies before the call (before sys.path has the user's directory:
    # a fleet.py there is not fleet)
    from fleet.node.child import ArgumentMismatch, call_arguments
except BaseException:
    call_arguments = None
try:  # this directory first, as a zygote has it once its own imports are done (fleet.wire.interpreter)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
except OSError:
    pass

try:  # a subreaper: what an import orphans stays below this process, to be ended (fleet.node.orphans)
    from fleet.node.orphans import become_subreaper
    become_subreaper()
except BaseException:
    become_subreaper = lambda: None

# The imports run in a child: one that ends its process (a crash in a C extension, an
# os._exit) leaves this one, a subreaper that imports nothing of the suite's, to end what
# they left running, the orphans of the child's own subreaping too; then it ends as the
# child did. Before 2026-12-07 such a crash left a daemon an import had started for good.
_worker = os.fork()
if _worker:
    import signal
    while True:
        try:
            _status = os.waitpid(_worker, 0)[1]
            break
        except InterruptedError:
            continue
    try:
        from fleet.node import orphans
        orphans.end(0.0)
    except BaseException:
        pass
    if os.WIFSIGNALED(_status):
        import resource  # (no core file of this process: the child's crash is the news)
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
        signal.signal(os.WTERMSIG(_status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(_status))
    os._exit(os.WEXITSTATUS(_status) if os.WIFEXITED(_status) else 1)
become_subreaper()

def threads():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None

def load(module):
    print("\nFLEET-IMPORTING " + module, flush=True)  # (named if its import kills this process)
    try:
        return importlib.import_module(module), None
    except ModuleNotFoundError as e:
        mine = e.name is not None and (module == e.name or module.startswith(e.name + "."))
        return None, "not found" if mine else f"{type(e).__name__}: {e}"
    except BaseException as e:
        return None, f"{type(e).__name__}: {e}"

out = {"preload": {}, "calls": {}}
for module in preload:
    before = threads()
    m, error = load(module)
    after = threads()
    out["preload"][module] = [error, after if after != 1 and after != before else None]
def found(m, name):  # (a call step's function: "func" or "Class.method")
    obj = m
    for part in name.split("."):
        obj = getattr(obj, part, None)
    return obj

def kind(obj):
    if not callable(obj):
        return "missing"
    import inspect
    return ("async generator" if inspect.isasyncgenfunction(obj) else "generator" if inspect.isgeneratorfunction(obj)
            else "")

def mismatch(func, target, keys):  # (None: they fit, or the function has no signature to read)
    try:
        call_arguments(func, None, dict.fromkeys(keys), target)
    except ArgumentMismatch as e:
        return str(e)
    except Exception:
        pass
    return None

for module, names in calls:
    m, error = load(module)
    kinds, wrong = {}, {}
    for n, shapes in names if m is not None else ():
        obj = found(m, n)
        if (k := kind(obj)):
            kinds[n] = k
        elif call_arguments is not None:
            wrong[n] = [mismatch(obj, f"{module}:{n}", keys) for keys in shapes]
    out["calls"][module] = [error, kinds, wrong]
sys.stdout.flush()
try:  # what the imports left running (a child, a daemon), ended before the answer: validate stops reading there
    from fleet.node import orphans
    orphans.end(0.0)
except BaseException:
    pass
print("\nFLEET-IMPORTS " + json.dumps(out), flush=True)
"""
_MARK = "FLEET-IMPORTS "
_IMPORTING = "FLEET-IMPORTING "


def import_problems(suite: Suite, timeout: float = IMPORT_TIMEOUT_S, cwd: Path | None = None) -> list[Problem]:
    """Import the suite's ``preload`` modules as a zygote does (in order, thread-pool
    variables pinned to 1, each to import and leave the process one thread), then each
    distinct module a call step names, all in one child process with this interpreter
    and environment, started in `cwd`: the directory the fleet's agents started in
    (fleet.control.importdir), which a zygote puts first on sys.path. Report a preload
    module that is not found, fails to import or starts a thread (field suite.preload),
    and a call module that is not found or fails to import, a function it lacks and a
    generator function (a step runs none of its body), at the first step that calls it
    (counting the others); and `args` that do not fit the function by the rule a step's
    child applies before the call (fleet.node.child.call_arguments), once per distinct
    set of args keys of a function, at the first step that has it (counting the others)."""
    users = _call_users(suite)
    if not users and not suite.preload:
        return []
    wanted: dict[str, list] = {}
    for (module, function), shapes in users.items():
        wanted.setdefault(module, []).append([function, list(shapes)])
    answer = _import_in_child(list(dict.fromkeys(suite.preload)), list(wanted.items()), timeout, cwd)
    if isinstance(answer, str):
        return [Problem(str(suite.path), None, None, answer)]
    if isinstance(answer, tuple):
        return [_killed_problem(suite, users, *answer)]
    return _preload_problems(suite, answer["preload"]) + _call_problems(users, answer["calls"])


def _killed_problem(suite: Suite, users: dict, module: str, why: str) -> Problem:
    """The module whose import killed the importing process, where the suite names it
    (`users`: _call_users's)."""
    if module in suite.preload:
        return Problem(str(suite.path), None, "suite.preload", _cannot(module, why))
    firsts = [seen for (m, _), shapes in users.items() if m == module for seen in shapes.values()]
    if firsts:
        first = firsts[0][0]
        return Problem(first.source, first.id, "call", _cannot(module, why) + _more(sum(n for _, n in firsts) - 1))
    return Problem(str(suite.path), None, None, f"module '{module}' cannot be imported: {why}")


def _call_users(suite: Suite) -> dict[tuple[str, str], dict[tuple[str, ...], list]]:
    """(module, function) -> the keys of its steps' args -> [first step, how many], in
    setup order. An array's steps share their keys (`{i}` is replaced in values only),
    so a million-step array is a tuple of keys and a dict look-up per step here and one
    inspection of its function in the child, not a million."""
    by_call: dict[str, dict[tuple[str, ...], list]] = {}
    for s in suite.steps:
        if s.call is not None:
            shapes = by_call.get(s.call)
            if shapes is None:
                shapes = by_call[s.call] = {}
            seen = shapes.get(keys := tuple(s.args))
            if seen is None:
                shapes[keys] = [s, 1]
            else:
                seen[1] += 1
    return {(call.partition(":")[0], call.partition(":")[2]): shapes for call, shapes in by_call.items()}


def _preload_problems(suite: Suite, answer: dict) -> list[Problem]:
    from fleet.node.preload import thread_problem
    out = []
    for module in dict.fromkeys(suite.preload):
        error, threads = answer.get(module, ["no answer", None])
        if error is not None:
            out.append(Problem(str(suite.path), None, "suite.preload", _cannot(module, error)))
        if threads is not None:
            out.append(Problem(str(suite.path), None, "suite.preload", thread_problem(module, threads)))
    return out


def _call_problems(users: dict, answer: dict) -> list[Problem]:
    from fleet.node.stepend import generator_refusal
    out = []
    for (module, function), shapes in users.items():
        error, kinds, wrong = answer.get(module, ["no answer", {}, {}])
        if error is not None:
            message = _cannot(module, error)
        elif kinds.get(function) == "missing":
            message = f"module '{module}' has no function '{function}'"
        elif kinds.get(function):  # a generator function: its body would never run (fleet.node.stepend)
            message = generator_refusal(f"{module}:{function}", kinds[function] == "async generator")
        else:
            for (first, count), said in zip(shapes.values(), wrong.get(function, ())):
                if said is not None:
                    out.append(Problem(first.source, first.id, "args", said + _more(count - 1)))
            continue
        firsts = list(shapes.values())
        out.append(Problem(firsts[0][0].source, firsts[0][0].id, "call",
                           message + _more(sum(count for _, count in firsts) - 1)))
    return out


def _more(steps: int) -> str:
    return f" (and in {steps} more step{'s' if steps != 1 else ''})" if steps else ""


def _cannot(module: str, error: str) -> str:
    return f"module '{module}' not found" if error == "not found" else f"module '{module}' cannot be imported: {error}"


def _import_in_child(preload: list[str], calls: list[tuple[str, list]], timeout: float,
                     cwd: Path | None = None) -> dict | str | tuple[str, str]:
    """The child's answer, or what went wrong with the child itself: (module, how the
    child ended) if an import ended it, else a sentence."""
    from fleet.node.threads import THREAD_VARS
    env = {**os.environ, **dict.fromkeys(THREAD_VARS, "1")}  # as a zygote has them (fleet.node.zygote)
    from fleet.wire.interpreter import SAFE
    p = subprocess.Popen([sys.executable, *SAFE, "-c", _IMPORTER],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, env=env, cwd=cwd)
    # Done at its answer line or its exit, not at its pipes' end of file: what an import
    # left running holds them (fleet.control.answerline); all of it is killed.
    out, err, timed_out = answerline.answer(p, json.dumps([preload, calls]), _MARK, timeout)
    if timed_out:
        return f"importing the suite's modules took longer than {timeout:g} s"
    lines = out.splitlines()
    for line in reversed(lines):
        if line.startswith(_MARK):
            return json.loads(line[len(_MARK):])
    from fleet.node.hello import ended as how
    ended = how(p.returncode)
    module = next((line[len(_IMPORTING):] for line in reversed(lines) if line.startswith(_IMPORTING)), None)
    if module is not None:  # a crash in a C extension, a build for another CPU, an os._exit
        return module, f"the process importing it {ended}"
    tail = " ".join(err.strip().splitlines()[-3:])
    return f"importing the suite's modules ended without an answer (it {ended}): {tail}".rstrip(": ")
