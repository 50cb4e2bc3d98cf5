"""How a step asks to go on: httk's ht_steps protocol, on the node.

A call step raises one of the exceptions below (exported as ``fleet.WaitForChildren``,
``fleet.Next``, ``fleet.Restart``, ``fleet.Broken``); a command step with
``protocol = "steps"`` exits with httk's codes: 2 next stage (named in the file
``$FLEET_NEXT_STAGE``; with no stage named there, a failure), 3 wait for children, 4 restart, 5 broken. Without the protocol
every non-zero exit of a command is a plain failure (2 is too common to reinterpret).

The zygote turns either into the Exited outcome (fleet.core.states: wait, next,
restart, broken) with ``control`` saying the stage and whether children were
submitted; the coordinator collects those (fleet.control.children).

Import-light: the zygote and every step child import it.
"""

from __future__ import annotations

import os

from fleet.wire import owndirs

NEXT_CODE, WAIT_CODE, RESTART_CODE, BROKEN_CODE = 2, 3, 4, 5
CODES = {NEXT_CODE: "next", WAIT_CODE: "wait", RESTART_CODE: "restart", BROKEN_CODE: "broken"}
# Exit 2 with no stage named would run the same stage again at once, for ever.
NO_STAGE = "exit status 2 with no stage named in $FLEET_NEXT_STAGE (protocol \"steps\": 2 asks for that stage)"
# fleet.Next("") likewise: "" is the first stage, so the step would start over for ever.
NO_STAGE_CALL = "fleet.Next() with no stage named (\"\" is the first stage: the step would start over there, for ever)"
# A stage is a name (data belongs in files): it rides a child's end record, one write
# below PIPE_BUF into the zygote's report pipe (fleet.node.childreport), and the
# environment ($FLEET_STAGE) of every later run. Before 2026-12-06 none was refused,
# and a stage over the pipe's buffer (~1 MiB) left the step blocked in its write for good.
STAGE_MAX = 1024  # bytes, UTF-8
SUBMIT_DIR = "submit"  # under the step's .fleet directory: $FLEET_SUBMIT_DIR
NEXT_STAGE = "next-stage"  # likewise: $FLEET_NEXT_STAGE
# `fleet step` (fleet.control.onestep): a temporary directory that holds what a step
# submits and its next stage instead of its .fleet directory (None: the .fleet directory).
scratch: str | None = None


class Control(Exception):
    """Base of the exceptions a call step raises to go on (never a failure)."""

    outcome = ""
    code = 1

    def words(self) -> str:
        return self.outcome


class WaitForChildren(Control):
    """Release this step's resources until every step it submitted (``ctx.submit``) has
    ended; it then runs again with ``ctx.phase`` one higher and ``ctx.children``."""

    outcome, code = "wait", WAIT_CODE

    def words(self) -> str:
        return "waiting for its children"


class Next(Control):
    """Run this step again at ``stage`` (``ctx.stage``), its resources released meanwhile."""

    outcome, code = "next", NEXT_CODE

    def __init__(self, stage: str):
        stage = str(stage)
        problem = NO_STAGE_CALL if not stage.strip() else stage_problem(stage, "fleet.Next()")
        if problem:  # raised where the step asks: its traceback names the line
            raise ValueError(problem)
        super().__init__(stage)
        self.stage = stage

    def words(self) -> str:
        return f"next stage {self.stage!r}"


class Restart(Control):
    """Run this step again from scratch, in a fresh work directory (the old one is kept
    as ``steps/<id>/attempt-<n>``)."""

    outcome, code = "restart", RESTART_CODE

    def words(self) -> str:
        return "restart in a fresh work directory"


class Broken(Control):
    """End this step without success and without retries: it cannot succeed."""

    outcome, code = "broken", BROKEN_CODE

    def __init__(self, reason: str = "broken"):
        super().__init__(reason)
        self.reason = str(reason)

    def words(self) -> str:
        return f"broken: {self.reason}"


def stage_problem(stage: str, who: str, size: int | None = None) -> str | None:
    """Why ``stage`` cannot be asked for (by ``who``), else None: longer than
    STAGE_MAX bytes (``size``: its length when only its start was read)."""
    size = len(stage.encode("utf-8", "surrogatepass")) if size is None else size
    if size <= STAGE_MAX:
        return None
    return (f"{who} was given a stage of {size:,} bytes ({stage[:40]!r}...): a stage is a name of at most "
            f"{STAGE_MAX} bytes; data for the next stage belongs in files in the step's work directory")


def fleet_dir(launch) -> str:
    """The step's .fleet directory (fleet.wire.records' layout, without importing it)."""
    return os.path.join(launch.run_dir, "steps", *launch.step.split("/"), ".fleet")


def submit_dir(launch) -> str:
    return submit_dir_of(launch.run_dir, launch.step)


def submit_dir_of(run_dir: str, step: str) -> str:
    """$FLEET_SUBMIT_DIR, where ``ctx.submit`` writes too."""
    return os.path.join(scratch or os.path.join(run_dir, "steps", *step.split("/"), ".fleet"), SUBMIT_DIR)


def next_stage_file(launch) -> str:
    """$FLEET_NEXT_STAGE."""
    return os.path.join(scratch or fleet_dir(launch), NEXT_STAGE)


def submitted_files(path: str, pid: int | None = None) -> int:
    """How many children files wait in a submit directory (half-written ones, named
    .* or ht.tmp*, never count and are never read); with ``pid``, only those that
    process wrote (ctx.submit names its files a<attempt>-r<restarts>-p<phase>-<pid>-<n>)."""
    mark = f"-{pid}-" if pid is not None else ""
    try:
        return sum(1 for n in os.listdir(path) if not n.startswith((".", "ht.tmp")) and mark in n)
    except OSError:
        return 0


def clear_submitted(path: str) -> None:
    """Remove the children files of the step's earlier runs, before its first submission
    in this run. Each was taken in when its run ended (the coordinator reads them before
    the step can run again); one a fleet that stopped first never read belongs to a run
    that starts over and submits again. Left, it would bring back children the suite no
    longer has, or be counted as this run's."""
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return
    for n in names:
        try:
            os.unlink(os.path.join(path, n))
        except (FileNotFoundError, IsADirectoryError):
            pass


def count_submitted(launch, report: dict) -> None:
    """The children files a step that ended without saying so left, in
    ``report["control"]["submitted"]`` (for the coordinator to take in: however a step
    ends, fleet.control.children): a call step that left no end record (os._exit, a
    crash, a signal) and a command with protocol = "steps" killed by a signal. Only
    these look: a call step's end record counts its own (ctx.submit), so one that ends
    normally costs no listdir, submitting or not; a command without the protocol has no
    $FLEET_SUBMIT_DIR; one with it that exits is counted by :func:`outcome`.

    A call step's directory is emptied at its first submission in a run, not as it
    starts: only files its own process wrote say it submitted (else they are an earlier
    run's, taken in then)."""
    if launch.kind == "call":
        if report.get("phase") == "end" or report.get("pid") is None:  # (no begin record: it never ran)
            return
        n = submitted_files(submit_dir(launch), report["pid"])
    elif launch.protocol == "steps":
        n = submitted_files(submit_dir(launch))
    else:
        return
    if n:
        ctl = report.get("control")
        report["control"] = dict(ctl if isinstance(ctl, dict) else {}, submitted=n)


def outcome(launch, rc: int, report: dict) -> str:
    """The outcome of a step that exited with status ``rc`` (the zygote's, at reaping);
    sets ``report["control"]`` and ``report["error"]`` for one that asked to go on."""
    ctl = report.get("control")
    if launch.kind == "call":
        if isinstance(ctl, dict) and ctl.get("outcome") in CODES.values():
            return ctl["outcome"]
        count_submitted(launch, report)  # (one that left no end record)
        return "succeeded" if rc == 0 else "failed"
    if launch.protocol != "steps":
        return "succeeded" if rc == 0 else "failed"
    control: dict = {}
    n = submitted_files(submit_dir(launch))
    if n:
        control["submitted"] = n
    what = CODES.get(rc)
    if what == "next":
        control["stage"], problem = _stage_named(launch)
        if problem:
            report["error"] = problem
            report["control"] = control
            return "failed"
        report["error"] = f"next stage {control['stage']!r}"
    elif what is not None:
        report["error"] = {"wait": "waiting for its children", "restart": "restart in a fresh work directory",
                           "broken": "broken (exit status 5)"}[what]
    report["control"] = control
    return what or ("succeeded" if rc == 0 else "failed")


def _stage_named(launch) -> tuple[str, str | None]:
    """(stage, problem) of $FLEET_NEXT_STAGE as a command left it: a problem if it names
    none (ls, argparse, a shell's usage error: 2 by accident, not a stage) or one longer
    than STAGE_MAX (then the stage is ""). Only so much of the file is read."""
    try:
        with open(next_stage_file(launch), "rb") as f:
            data = f.read(4 * STAGE_MAX + 4096)  # (room for spaces around the longest stage)
            size = os.fstat(f.fileno()).st_size if f.read(1) else None
    except OSError:
        return "", NO_STAGE
    stage = data.decode("utf-8", "backslashreplace").strip()
    problem = stage_problem(stage, "$FLEET_NEXT_STAGE (exit status 2)", size)
    if problem:
        return "", problem
    return stage, (None if stage else NO_STAGE)


def fresh_workdir(launch) -> None:
    """Before the first run after a restart: move what the work directory holds to
    ``steps/<id>/attempt-<n>`` (n: the restart's number), keeping the step's own
    records (.fleet, log), earlier attempt-* directories and its children's
    directories (those with a .fleet). Done once per restart: a retry finds it done.

    Only a work directory that is the step's own (steps/<id>, or inside it) is moved:
    one elsewhere ("." the run directory, one other steps share) holds what is not the
    step's to move (before 2026-12-06 the run directory's own files went, and `fleet
    status` found no fleet). Then nothing moves, and the step's log says so (note)."""
    step_dir = os.path.dirname(fleet_dir(launch))
    if not _inside(os.path.realpath(launch.workdir), os.path.realpath(step_dir)):
        global note
        note = (f"fleet: restart {launch.restarts}: nothing was moved aside: the work directory {launch.workdir} "
                f"is not the step's own ({step_dir}), so it runs again in it as it is\n")
        return
    keep = os.path.join(step_dir, f"attempt-{launch.restarts}")
    if os.path.exists(keep) or not os.path.isdir(launch.workdir):
        return
    os.mkdir(keep, owndirs.MODE)  # (in the step's own directory, which exists)
    for name in os.listdir(launch.workdir):
        path = os.path.join(launch.workdir, name)
        if name in (".fleet", "log") or name.startswith("attempt-") or os.path.isdir(os.path.join(path, ".fleet")):
            continue
        os.rename(path, os.path.join(keep, name))


def _inside(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


note = ""  # a line for the step's log, after its attempt's header (fresh_workdir)


def take_note() -> str:
    """The line fresh_workdir left for the log ("" if none), once."""
    global note
    out, note = note, ""
    return out
