"""`fleet step SUITE ID`: one step in the foreground, as a fleet would run it.

The step gets what a one-node local fleet on this machine would give it: the real
scheduler places it on a pretend node made of this machine's usable cores (its
profile's held-back cores left out), GPUs and memory; fleet.control.launching turns
that into the Launch an agent would receive (an MPI step's launcher command rendered
for the local profile); and the step's process is set up by the same code a zygote's
child runs (fleet.node.child, fleet.node.command): cores, thread variables, FLEET_*
environment, work directory. Only its stdin, stdout and stderr differ: they stay the
terminal's (or whatever this command's are), and it stays in this command's process
group, so Ctrl-C and a debugger reach it.

It is held to its timeout and memory, and this command's SIGTERM or SIGHUP is passed on
to it, as a node would (fleet.control.foreground). It runs one stage: what it asks for
(wait, next, restart) and the children it submits are said, not acted on; its submit
files and next stage go to a temporary directory (fleet.node.protocol.scratch).

Nothing is recorded (no events.jsonl, no marker, no claim) unless asked: with
``record``, an attempt record and, on success, a done marker (or, on failure, a final
record) are written as a fleet writes them, so a later `fleet run` skips the step. An
end that uses no attempt (a step asking to go on, this command stopped) records nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import msgpack

from fleet.control import foreground, importdir, journal, launching, store
from fleet.core import attempts, states as S
from fleet.core.childsteps import not_a_suite_step, parent_in
from fleet.core.oneline import one_line
from fleet.core.decisions import NodeJoined, Start, Submitted, Unrunnable, Wait
from fleet.core.resources import NodeSpec
from fleet.core.scheduler import Scheduler
from fleet.node import child, command, exits, orphans, probe, protocol, searchpaths
from fleet.site.profiles import Profile
from fleet.wire import interpreter, records
from fleet.wire.messages import Launch
from fleet.wire.numtext import work_seconds

NODE = "node1"  # the name a one-node local fleet gives its node


class StepError(ValueError):
    """The step cannot run here (unknown, or it can never fit this machine)."""


@dataclass(frozen=True)
class Ran:
    """How the foreground attempt ended: exit status of `fleet step`, outcome, reason,
    and when the step's own work started and ended."""

    status: int
    outcome: str
    reason: str
    work_start: float
    work_end: float
    control: dict = field(default_factory=dict)  # what it asked for: {"stage": ..., "children": n}
    stopped_by: int = 0  # the signal that stopped this command (and so the step), if one did
    worked: float | None = None  # its work's length by the monotonic clock (None: its stamps', P.Exited.worked_s)


def local_node(profile: Profile) -> NodeSpec:
    """This machine as a one-node local fleet sees it. GPU ids that are not integers
    (UUIDs, MIG names) give it no GPUs, said on stderr, as an agent offers none then
    (fleet.node.agentargs.offered_gpus): a step that asks for none still runs."""
    cores = tuple(c for c in probe.usable_cores() if c not in profile.held_back_cores)
    try:
        gpus = probe.node_gpus(profile.gpu_var, profile.gpus_per_node)
    except ValueError as e:
        print(f"fleet step: using no GPUs: {e}", file=sys.stderr, flush=True)
        gpus = ()
    return NodeSpec(NODE, cores, gpus, probe.node_memory())


def place(spec, node: NodeSpec) -> Start:
    """The Start decision the scheduler makes for this step alone on `node`."""
    sched = Scheduler()
    sched.handle(NodeJoined(node), 0.0)
    decisions = sched.handle(Submitted((spec,), {spec.id: ()}), 0.0)
    for d in decisions:
        if isinstance(d, Start):
            return d
    why = next((d.reason for d in decisions if isinstance(d, (Unrunnable, Wait))), "it does not fit")
    raise StepError(f"step '{spec.id}' cannot run on this machine ({len(node.cores)} usable cores): {why}")


def fleet_id() -> str:
    """This run's name in FLEET_ID and in its records, told apart from real fleets'."""
    return f"step-{socket.gethostname()}-{os.getpid()}"


def prepare(profile: Profile, spec, run_dir: Path, fid: str) -> Launch:
    """The Launch a fleet would send for the step's first attempt on this machine."""
    try:
        return launching.launch(profile, spec, place(spec, local_node(profile)), run_dir, fid)
    except launching.CannotLaunch as e:
        raise StepError(f"step '{spec.id}': {e}") from None


def unfinished_deps(run_dir: Path, suite, deps) -> list[str]:
    """The step's dependencies that have no success on record here."""
    return [d for d in deps if not records.is_done(run_dir, suite.step(d))]


def run(launch: Launch, imports_from: Path | None = None) -> Ran:
    """Run the step in the foreground and wait for it, held to its timeout and memory;
    Ctrl-C goes to the step (this process ignores it meanwhile, as a shell does), and a
    SIGTERM or SIGHUP to this process is passed on to it (fleet.control.foreground). A
    call step imports its module from `imports_from` first (default: this directory).
    Its work's length is the monotonic clock's (fleet.node.exits.worked), not its stamps'."""
    report: dict = {}
    ran = _run(launch, imports_from, report)
    return dataclasses.replace(ran, worked=exits.worked(report))


def _run(launch: Launch, imports_from: Path | None, report: dict) -> Ran:
    orphans.become_subreaper()  # what the step starts stays below us, to be stopped with it
    searchpaths.make_absolute()  # PYTHONPATH=src, as a fleet's agent started here has it (in steps/<id> too)
    with foreground.Memory(launch) as memory:
        status, got, stop = (_call(launch, memory, imports_from) if launch.kind == "call"
                             else _command(launch, memory))
        report.update(got)  # (run's, for the work's length)
        stop = memory.judged(stop, report.get("error") or "", status)
    now = time.time()
    start, end = report.get("work_start") or now, report.get("work_end") or now
    if stop.outcome:
        return Ran(stop.status(), stop.outcome, stop.reason(launch), start, end, stopped_by=stop.signal)
    if status == 0:
        missing = child.unproduced(launch)
        if missing:
            print(f"fleet: {missing}", file=sys.stderr, flush=True)
            return Ran(1, S.FAILED, missing, start, end, report.get("control") or {})
        return Ran(0, S.SUCCEEDED, "", start, end, report.get("control") or {})
    if status < 0:
        name = signal.Signals(-status).name
        return Ran(128 - status, S.TERMINATED, f"killed by {name}", start, end)
    outcome = protocol.outcome(launch, status, report)  # failed, or what the step asked for (wait, next, ...)
    reason = report.get("error") or f"exit status {status}"
    if outcome == S.BROKEN:  # "broken: why" (fleet.Broken), "broken (exit status 5)": the word once
        reason = reason[8:] if reason.startswith("broken: ") else reason[8:-1] if reason.startswith("broken (") else reason
    return Ran(status, outcome, reason, start, end, report.get("control") or {})


@contextlib.contextmanager
def _interrupts_to_the_step():
    """Ignore Ctrl-C and Ctrl-\\ here while the step (in our process group) takes them.
    Set only once the step exists: an ignored signal stays ignored across exec."""
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGQUIT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _call(launch: Launch, memory: foreground.Memory, imports_from: Path | None) -> tuple[int, dict, foreground.Stop]:
    """Fork once; the child is set up as a zygote's child is, on our terminal, its
    modules found first in `imports_from` as the fleet's zygotes find them there."""
    r, w = os.pipe()
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child ends in os._exit)
        os.close(r)
        _import_path(imports_from)
        child.run_call(launch, w, parent=parent, foreground=True)
    os.close(w)
    with _interrupts_to_the_step():
        st, stop = foreground.hold(pid, launch, memory)
    # Read after the end, without blocking: a process the step forked may still hold
    # the pipe open. Two small records: the pipe's buffer held them meanwhile.
    os.set_blocking(r, False)
    data = b""
    try:
        while chunk := os.read(r, 65536):
            data += chunk
    except BlockingIOError:
        pass
    finally:
        os.close(r)
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(data)
    report: dict = {}
    for rec in unpacker:
        report.update(rec)
    return os.waitstatus_to_exitcode(st), report, stop


def _import_path(imports_from: Path | None) -> None:
    """(In the step's child) sys.path as a zygote of the fleet has it: the directory its
    agents started in first, and not this command's own directory, which `python -m
    fleet` put there (a module found only here would not be found by the fleet's step)."""
    if imports_from is None:
        interpreter.user_path()  # modules in this directory, as a fleet's zygote started here finds them
        return
    try:
        here = os.getcwd()
    except OSError:
        here = None
    if here is not None and Path(here) != imports_from:
        sys.path[:] = [p for p in sys.path if p not in ("", here)]
    if str(imports_from) not in sys.path:
        sys.path.insert(0, str(imports_from))


def _command(launch: Launch, memory: foreground.Memory) -> tuple[int, dict, foreground.Stop]:
    try:
        sp = command.spawn(launch, foreground=True)
    except command.NotStarted as e:  # (spawn said why on our stderr)
        return 127, {"error": f"cannot start the command: {e}"}, foreground.Stop()
    with _interrupts_to_the_step():
        st, stop = foreground.hold(sp.popen.pid, launch, memory)
    sp.popen.returncode = os.waitstatus_to_exitcode(st)  # (reaped here: Popen must not wait for it)
    return sp.popen.returncode, {**sp.report, "work_end": time.time()}, stop


def record(run_dir: Path, spec, deps, fid: str, ran: Ran) -> None:
    """Write what a fleet writes for this attempt: its attempt record, and a done
    marker for a success (against the deps' markers now) or a final record otherwise."""
    rec = records.read_done(run_dir, spec.id)
    store.submitted(run_dir, spec.id, deps, rec)
    rerun = "forced" if rec is not None and rec.get("outcome") == S.SUCCEEDED else ""
    work_s = work_seconds(ran.work_start, ran.work_end, ran.worked)
    store.record_attempt(run_dir, spec.id, fid, 1, {
        "outcome": ran.outcome, "node": NODE, "reason": ran.reason, "work_s": work_s,
        "started_at": ran.work_start, "ended_at": ran.work_end, "spec": records.spec_hash(spec),
        "rerun": rerun, "submission": None, "by": attempts.BY_FLEET_STEP})  # (no log: a stopped step says so)
    # Its outcome in a sealed journal of its own first: a fleet alone in the run directory
    # takes markers from the journals (fleet.control.journalmarks), and learns of this one so.
    header = {"fleet": fid, "host": socket.gethostname(), "pid": os.getpid(), "shared": False}
    t = time.time()
    if ran.outcome == S.SUCCEEDED:
        path, rec = store.done_record(run_dir, spec, {"attempt": 1, "node": NODE, "work_s": work_s,
                                                      "ended_at": ran.work_end, "fleet": fid})
        journal.write_sealed(run_dir, header, [{"k": "done", "step": spec.id, "rec": rec, "t": t}])
        store.makedirs(os.path.dirname(path))
        store._replace(path, rec)
        store.unlink_replaced(path)  # a final.json of a failure before (one command, one step: no look saved)
    else:
        path, rec, drop = store.final_record(run_dir, spec, ran.outcome, {"reason": ran.reason, "attempt": 1,
                                                                         "fleet": fid, "at": t})
        journal.write_sealed(run_dir, header, [{"k": "final", "step": spec.id, "rec": rec, "drop": drop, "t": t}])
        store.makedirs(os.path.dirname(path))
        store._replace(path, rec)
        if drop:
            store.unlink_done(os.path.dirname(path), drop)


GOES_ON = {S.NEXT: "asked for its next stage {stage!r}", S.WAIT: "asked to wait for its children",
           S.RESTART: "asked to restart in a fresh work directory"}


def told(step_id: str, ran: Ran, keep: bool) -> list[str]:
    """fleet step's lines on how the step ended, and what `--record` kept of it."""
    if ran.outcome in GOES_ON:  # a fleet would run it again: no attempt used, so none recorded
        lines = [f"{step_id} {GOES_ON[ran.outcome].format(stage=ran.control.get('stage', ''))}: "
                 "fleet step runs one stage; run the suite to go on" + (" (not recorded)" if keep else "")]
    else:
        kept = " (recorded)" if recorded(ran) else " (not recorded: fleet step was stopped)"
        lines = [f"{step_id} {ran.outcome}" + (f": {one_line(ran.reason)}" if ran.reason else "") + (kept if keep else "")]
    n = ran.control.get("children", 0)
    if n:
        lines.append(f"{step_id} submitted {n} {'child' if n == 1 else 'children'}: "
                     "fleet step does not run them; run the suite")
    return lines


def recorded(ran: Ran) -> bool:
    """Whether --record records this end: not one a fleet would go on from (no attempt
    used), nor this command's own stop (a fleet stopped so records no attempt either)."""
    return ran.outcome not in GOES_ON and not ran.stopped_by


def children_in(path: str) -> int:
    """How many steps the files in a submit directory submit (unreadable ones: none)."""
    import json
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    n = 0
    for name in os.listdir(path) if os.path.isdir(path) else ():
        if name.startswith((".", "ht.tmp")):
            continue
        try:
            with open(os.path.join(path, name), "rb") as f:
                raw = json.load(f) if name.endswith(".json") else tomllib.load(f)
            n += len(raw.get("steps") or ())
        except (OSError, ValueError, AttributeError, TypeError):
            continue
    return n


def step(suite, graph, step_id: str, run_dir: Path, keep: bool = False) -> int:
    """`fleet step`: run one step of a checked suite in the foreground; its exit status
    (StepError if it cannot run here). fleet's own lines go to stderr, so that stdout
    is the step's alone."""
    from fleet.control.client import RunDirError, RunDirFull, fleet_run_dir, usable_run_dir
    from fleet.site.profiles import load
    try:
        spec = suite.step(step_id)
    except KeyError:
        spec = None
    if spec is None:
        parent = parent_in(suite.steps, step_id)
        raise StepError(not_a_suite_step(step_id, parent.id, suite.name) if parent is not None
                        else f"suite '{suite.name}' has no step '{step_id}'")
    say = lambda text: print(f"fleet step: {text}", file=sys.stderr, flush=True)  # noqa: E731
    try:
        # Made 0700, as fleet run makes it. Recording writes what a fleet there reads (markers,
        # journals), so a directory others can write is refused then, as fleet run refuses it;
        # otherwise only the step's own files go there.
        (fleet_run_dir if keep else usable_run_dir)(run_dir)
    except RunDirError as e:
        say(str(e))
        return 4 if isinstance(e, RunDirFull) else 2
    fid = fleet_id()
    launch = prepare(load("local"), spec, run_dir, fid)
    for d in unfinished_deps(run_dir, suite, graph.deps[step_id]):
        say(f"dependency '{d}' has not succeeded in {run_dir}; running '{step_id}' anyway")
    imports = importdir.of_fleet_in(run_dir) if launch.kind == "call" else None
    say(f"{step_id} on cores {','.join(map(str, launch.cores)) or 'unpinned'} in {launch.workdir}"
        + (f", its module imported from {imports.path} ({imports.why})" if imports else "")
        + ("" if keep else " (nothing recorded; --record to record it)"))
    # What it submits and its next stage go to a directory of our own, not its .fleet directory:
    # fleet step runs no children and no next stage, and leaves no such file for a fleet to find.
    protocol.scratch = tempfile.mkdtemp(prefix="fleet-step-")
    try:
        if launch.protocol:
            launch = dataclasses.replace(launch, env={**launch.env, "FLEET_SUBMIT_DIR": protocol.submit_dir(launch),
                                                      "FLEET_NEXT_STAGE": protocol.next_stage_file(launch)})
        ran = run(launch, imports.path if imports else None)
        ran = dataclasses.replace(ran, control={**ran.control, "children": children_in(protocol.submit_dir(launch))})
    finally:
        shutil.rmtree(protocol.scratch, ignore_errors=True)
        protocol.scratch = None
    if keep and recorded(ran):
        record(run_dir, spec, graph.deps[step_id], fid, ran)
    for line in told(step_id, ran, keep):
        say(line)
    return ran.status
