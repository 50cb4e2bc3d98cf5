"""Turning a Start decision into what records it and what an agent runs: the `start`
record and the Launch message, with an MPI step's launcher command rendered for the
machine (fleet.site.mpi) and the files it reads written into the step's .fleet
directory. A node's window (fleet.core.window) is acted on here too: a Queue is a
launch that waits on the node for its predecessor (Launch.after, recorded `queued`),
a Begin only a `start` record, an Unqueued an `unqueued` one; a Dropped report (the
node dropped a queued launch) ends the step through the scheduler."""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from pathlib import Path

from fleet.control import eventlines
from fleet.core import launchsize
from fleet.core import states as S
from fleet.core.scheduler import Begin, Queue, Start, StepExited, Unqueued
from fleet.site import mpi
from fleet.site.profiles import Profile
from fleet.wire import events
from fleet.wire.framesize import TooBig
from fleet.wire import messages as P
from fleet.wire import owndirs, ownfiles, records


# The bytes of children's outcomes a Launch carries at most (ctx.children): past them,
# only those that did not succeed, as many as fit, and how many were left out
# (ctx.children_omitted). Less where the step's own fields leave less of the 1 MiB
# message (fleet.core.launchsize). Until 2026-12-07 the cap was 10,000 children, over
# 1 MiB with ids of ~100 characters: the parent of 4,500 children with ids of 240 failed
# after they all succeeded ("the Launch for node1 is 1,183,814 bytes"), and every retry.
CHILDREN_BYTES = 512 * 1024
# The decisions the coordinator's _start takes (Begin and Unqueued are only recorded).
DECIDED = (Start, Queue, Begin, Unqueued)


class CannotLaunch(Exception):
    """The step cannot be launched as decided (its reason is the message)."""


# What a step's launch fails with, its text the step's reason: it cannot be made, or it
# is too big to send (the coordinator's check, for what validation cannot see).
REFUSED = (CannotLaunch, TooBig)


# The decisions that start an attempt (a Begin or an Unqueued only records one).
STARTS = (Start, Queue)


def bug(transport, e: Exception, what: str = "launch") -> str:
    """(Called in an except block) a launch (or the start before it: claiming the step,
    making its records) that failed for a reason fleet did not foresee: logged once with
    its traceback, counted, and said as the step's reason. The step fails (retried as any
    failure) rather than stay running with no process, the run never ending."""
    transport.error("launching")
    return f"fleet could not {what} it: {type(e).__name__}: {e}"


def failed(now: float, d, node: str, why: str) -> events.Exit:
    """The `exit` record of a step that could not be launched (`why`)."""
    return events.Exit(t=now, step=d.step, attempt=d.attempt, node=node, outcome=S.FAILED, reason=why)


def start_records(now: float, d, adopted) -> list:
    """What a decided launch records: an adopted claim, then `start` (`queued` for a Queue)."""
    out = [] if adopted is None else [events.Adopted(t=now, step=d.step, attempt=d.attempt, previous=adopted)]
    if isinstance(d, Queue):
        return out + [events.Queued(t=now, step=d.step, attempt=d.attempt, node=d.placement[0].node, after=d.after)]
    return out + [start_record(now, d)]


def write_start(log, now: float, d, adopted) -> None:
    """Record a decided launch (start_records), the common `start` encoded directly
    (fleet.control.eventlines)."""
    if adopted is not None:
        for rec in start_records(now, d, adopted):
            log.write(rec)
    elif type(d) is Queue:
        log.write_encoded((eventlines.queued(log.fleet, now, d),))
    else:
        log.write_encoded((eventlines.start(log.fleet, now, d),))


def recorded(log, d, now: float, taken_back: dict, refused: dict) -> bool:
    """Record a Begin (the step runs now: its `start` record) or an Unqueued (noted in
    `taken_back`, the recorder's); True if `d` was one of them (nothing else is done for it).
    A Begin of a step in `refused` (the claims' `elsewhere`) is no start and is not recorded:
    its Queue's claim was refused, so its launch never went to the node. The core promoted it
    because the step it was queued behind was refused too (a node starts at once a launch
    whose predecessor never came, so the core cannot tell); the step's own Elsewhere, fed
    when its claim was refused, follows and takes it back (the `elsewhere` record says so)."""
    if isinstance(d, Begin):
        if refused and d.step in refused:
            return True  # (an empty dict unless the run directory is shared: no cost alone)
        log.write_encoded((eventlines.start(log.fleet, now, d),))
    elif isinstance(d, Unqueued):
        log.write(events.Unqueued(t=now, step=d.step, attempt=d.attempt, reason=d.reason,
                                  may_have_started=d.may_have_started))
        taken_back[d.step] = d.attempt
    else:
        return False
    return True


def reported(coord, node: str, msg, now: float) -> bool:
    """An agent's report this module handles: True if it did (a Dropped; a Started or
    Exited of a step still queued, held: fleet.control.early), False for the
    coordinator's own handlers."""
    if isinstance(msg, (P.Started, P.Exited)):
        return coord.early.hold(coord.sched, node, msg, now)
    if not isinstance(msg, P.Dropped):
        return False
    if msg.stopped:
        if coord.stopping or not coord.drain.drained:
            return True  # its node stops: the loss (or the teardown) puts it back, not this report
        coord.drain.dropped.add(msg.step)  # never started, whatever the scheduler makes of it now
    try:
        view = coord.sched.view(msg.step)
    except KeyError:
        view = None
    if view is None or view.state != S.QUEUED or view.attempt != msg.attempt or view.placement[0].node != node:
        coord.transport.warn("stale dropped", f"dropped a stale report of {msg.step!r} attempt {msg.attempt} dropped")
    else:
        coord._feed(StepExited(msg.step, msg.attempt, S.CANCELLED, msg.reason or "cancelled before it started"), now)
    return True


def start_record(now: float, d) -> events.Start:
    """The `start` record of a decision: the first node, and everything it holds."""
    return events.Start(t=now, step=d.step, attempt=d.attempt, node=d.placement[0].node,
                        cores=[c for s in d.placement for c in s.cores],
                        gpus=[g for s in d.placement for g in s.gpus],
                        memory=sum(s.memory for s in d.placement),
                        nodes=[s.node for s in d.placement],
                        placement=[dict(node=s.node, cores=list(s.cores), gpus=list(s.gpus), memory=s.memory)
                                   for s in d.placement])


def launch(profile: Profile, spec, d: Start, run_dir: Path, fleet_id: str = "", hold: float = 0.0,
           ahead: float = 0.0) -> P.Launch:
    """The message that starts the step on its first node's agent; CannotLaunch if an
    MPI step's command cannot be rendered or its files written. `hold`: how long its
    node may hold its reports (fleet.node.outbox); `ahead`: how far its node's wall clock
    is ahead of ours (fleet.control.nodeclock), so that its decision time is on that clock."""
    slot = d.placement[0]
    rd = _str(run_dir)
    command = list(spec.command) if isinstance(spec.command, tuple) else spec.command
    cores = list(slot.cores)
    env = dict(spec.env) if spec.env else {}  # the step's own, then fleet's (the suite may not set FLEET_*)
    if env and profile.gpu_var:
        # The GPU variable is the placement's, set after env (docs/suite-reference.md): a
        # value of the suite's would otherwise stand where fleet sets none (a ZE_AFFINITY_MASK
        # step without GPUs, whose empty mask would mean every device), for a step or its ranks.
        env.pop(profile.gpu_var, None)
    extra = profile.gpu_env  # (ZE_FLAT_DEVICE_HIERARCHY: how the mask's numbers are read)
    if extra:
        env.update(extra)
    env.update(FLEET_STEP=d.step, FLEET_ATTEMPT=str(d.attempt), FLEET_RUN_DIR=rd, FLEET_ID=fleet_id)
    if spec.mpi:
        try:
            command, cores = render_mpi(profile, spec, d, run_dir, command, env)
        except (mpi.RenderError, OSError) as e:
            raise CannotLaunch(f"cannot launch the MPI step {d.step}: {e}") from e
    # The Launch as its __dict__, every field in the class's order, without the frozen
    # dataclass's __init__ (object.__setattr__ per field: ~9 us of the loop per step)
    # nor a dict of defaults updated with keywords: the same message, equal, encoded to
    # the same bytes (tests/control/test_launching_fields.py).
    fields = {
        "step": d.step, "attempt": d.attempt, "kind": "command" if spec.mpi else spec.kind, "call": spec.call or "",
        "args": dict(spec.args), "command": command, "cores": cores, "gpus": list(slot.gpus), "memory": slot.memory,
        "workdir": _workdir(rd, spec.workdir), "log": _log(rd, d.step), "run_dir": rd,
        "inputs": [str(run_dir / i) for i in spec.inputs] if spec.inputs else [],
        "outputs": [str(run_dir / o) for o in spec.outputs] if spec.outputs else [],
        "placement": ([[slot.node, list(slot.cores), list(slot.gpus), slot.memory]] if len(d.placement) == 1
                      else [[s.node, list(s.cores), list(s.gpus), s.memory] for s in d.placement]),
        # (on its node's clock: its startup, work_start - decided_at, is measured there on one clock)
        "decided_at": time.time() + ahead,
        # Every step is given its GPUs, none included (CUDA_VISIBLE_DEVICES="" hides them);
        # an MPI launcher's ranks get theirs, per node, from the rendered command instead.
        "env": env, "gpu_vars": [profile.gpu_var] if profile.gpu_var and not spec.mpi else [],
        "threads": spec.threads if spec.mpi else 0, "timeout": spec.timeout, "grace": spec.grace,
        "phase": 0, "stage": "", "restarts": 0, "children": {}, "children_omitted": 0, "protocol": "",
        # A declared memory is a limit; a share taken for want of one is not. An MPI step's
        # ranks are its launcher's, and the launcher is given the limit (fleet.site.mpi).
        "memory_limit": slot.memory if spec.memory is not None and not spec.mpi else 0,
        "after": getattr(d, "after", ""), "hold": hold}
    if d.resume is not None or spec.protocol:
        fields.update(resumed(spec, d, run_dir, env))
    msg = object.__new__(P.Launch)
    object.__setattr__(msg, "__dict__", fields)
    return msg


def _launch(**fields) -> P.Launch:
    """A Launch of these fields (the rest their defaults) without the frozen __init__
    (benchmarks/step_jobs.py and step_records.py time it against the constructor)."""
    msg = object.__new__(P.Launch)
    values = {f: (d() if callable(d) else d) for f, d in _DEFAULTS.items()}
    values.update(fields)
    object.__setattr__(msg, "__dict__", values)
    return msg


_DEFAULTS = {f.name: (f.default if f.default is not dataclasses.MISSING else
                      f.default_factory if f.default_factory is not dataclasses.MISSING else None)
             for f in dataclasses.fields(P.Launch)}


# A step's paths as strings without pathlib per step (a step id is a clean relative
# path: fleet.core.units.check_id), the same strings records.log_path/workdir make.
# Keyed by the run directory's str, made once per Path object (hashing a Path is not cheap).
_strs: dict[int, tuple[Path, str]] = {}


def _str(run_dir: Path) -> str:
    hit = _strs.get(id(run_dir))
    if hit is None or hit[0] is not run_dir:
        if len(_strs) > 64:  # a fleet has one run directory (or a few shards'): never many
            _strs.clear()
        hit = _strs[id(run_dir)] = (run_dir, str(run_dir))
    return hit[1]


def _workdir(run_dir: str, workdir: str) -> str:
    # A clean relative path (an array's steps/<id> each) joined as text: what pathlib
    # gives for it, without a cache miss and two Paths per step.
    if (workdir and workdir[0] not in "./" and workdir[-1] != "/" and "//" not in workdir
            and "/." not in workdir and run_dir[-1:] != "/"):
        return run_dir + "/" + workdir
    return _workdir_path(run_dir, workdir)


def _log(run_dir: str, step: str) -> str:
    # os.path.join(run_dir, "steps", step, "log") for a clean relative step id, as text.
    return (run_dir if run_dir[-1:] != "/" else run_dir[:-1]) + "/steps/" + step + "/log"


@functools.lru_cache(maxsize=1024)
def _workdir_path(run_dir: str, workdir: str) -> str:
    return str(Path(workdir) if os.path.isabs(workdir) else Path(run_dir) / workdir)


def resumed(spec, d: Start, run_dir: Path, env: dict) -> dict:
    """The Launch fields of a step that goes on (fleet.core.phases) or speaks httk's
    protocol; a command with protocol = "steps" learns them from its environment:
    FLEET_PHASE, FLEET_STAGE, FLEET_SUBMIT_DIR, FLEET_NEXT_STAGE."""
    r = d.resume
    out = {} if r is None else {"phase": r.phase, "stage": r.stage, "restarts": r.restarts,
                                "children": dict(r.children)}
    if r is not None and r.children:
        out["children"], out["children_omitted"] = outcomes(spec, r.children)
    if spec.protocol:
        fleet_dir = records.step_dir(run_dir, d.step) / ".fleet"
        env.update(FLEET_PHASE=str(r.phase if r else 0), FLEET_STAGE=r.stage if r else "",
                   FLEET_SUBMIT_DIR=str(fleet_dir / "submit"), FLEET_NEXT_STAGE=str(fleet_dir / "next-stage"))
        out["protocol"] = spec.protocol
    return out


def outcomes(spec, children: tuple) -> tuple[dict, int]:
    """The children's outcomes (id, outcome) a Launch of `spec` carries as ctx.children,
    and how many it leaves out (ctx.children_omitted): every one if they fit in
    CHILDREN_BYTES (less what the step's own fields take past 1 MiB less fleet's part),
    else those that did not succeed, in order, as many as fit."""
    # msgpack's bytes at most (ids are ASCII: fleet.core.units.check_id), headers at their largest.
    need = sum(len(k) + len(v) + 10 for k, v in children)
    room = min(CHILDREN_BYTES, launchsize.STEP_PART - launchsize.own_part(spec))
    if need <= room:
        return dict(children), 0
    kept = {}
    for k, v in children:
        if v != "succeeded":
            room -= len(k) + len(v) + 10
            if room < 0:
                break
            kept[k] = v
    return kept, len(children) - len(kept)


def render_mpi(profile: Profile, spec, d: Start, run_dir: Path, command, env: dict) -> tuple[list, list]:
    """The launcher command for an MPI step, with the files it reads written into
    the step's .fleet directory; returns (argv, cores the launcher process runs on)."""
    one_host = profile.launcher == "local"
    fleet_dir = records.step_dir(run_dir, d.step) / ".fleet"
    # Only a declared memory is a limit (as for any step: launch's memory_limit); the
    # files' directory is given, not filled in afterwards, so the command reaches the
    # ranks as written (a "{fleet}" in it is the user's).
    r = mpi.render(profile.mpi, d.placement, spec.threads, command, profile.mpi_flags, one_host,
                   gpu_var=profile.gpu_var, limit_memory=spec.memory is not None, fleet_dir=str(fleet_dir),
                   gpu_extra=profile.gpu_env)
    owndirs.makedirs(fleet_dir)
    for name, text in r.files.items():
        ownfiles.write_text(fleet_dir / name, text)
    env.update(r.env)
    # What each rank should have, for the rank-level probe (fleet.node.mpiprobe), in the
    # launcher's rank order (PALS's is by ranks per node).
    env["FLEET_RANKS"] = ";".join(f"{node}:{','.join(map(str, c))}"
                                 for node, c in mpi.rank_layout(profile.mpi, d.placement, spec.threads))
    # A local fleet's pretend nodes share this machine: the launcher may use all the cores.
    cores = [c for s in d.placement for c in s.cores] if one_host else list(d.placement[0].cores)
    return list(r.argv), cores
