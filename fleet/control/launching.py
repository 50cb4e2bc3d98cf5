"""Turning a Start decision into what records it and what an agent runs: the `start`
record and the Launch message, with an MPI step's launcher command rendered for the
machine (fleet.site.mpi) and the files it reads written into the step's .fleet
directory."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

from fleet.core.scheduler import Start
from fleet.site import mpi
from fleet.site.profiles import Profile
from fleet.wire import events
from fleet.wire import messages as P
from fleet.wire import records


# Children whose outcomes a Launch carries (ctx.children); past this, only those that did
# not succeed (as many), and how many were left out (ctx.children_omitted).
CHILDREN_IN_LAUNCH = 10_000


class CannotLaunch(Exception):
    """The step cannot be launched as decided (its reason is the message)."""


def start_record(now: float, d: Start) -> events.Start:
    """The `start` record of a decision: the first node, and everything it holds."""
    return events.Start(t=now, step=d.step, attempt=d.attempt, node=d.placement[0].node,
                        cores=[c for s in d.placement for c in s.cores],
                        gpus=[g for s in d.placement for g in s.gpus],
                        memory=sum(s.memory for s in d.placement),
                        nodes=[s.node for s in d.placement],
                        placement=[dict(node=s.node, cores=list(s.cores), gpus=list(s.gpus), memory=s.memory)
                                   for s in d.placement])


def launch(profile: Profile, spec, d: Start, run_dir: Path, fleet_id: str = "") -> P.Launch:
    """The message that starts the step on its first node's agent; CannotLaunch if an
    MPI step's command cannot be rendered or its files written."""
    slot = d.placement[0]
    command = list(spec.command) if isinstance(spec.command, tuple) else spec.command
    cores = list(slot.cores)
    env = {"FLEET_STEP": d.step, "FLEET_ATTEMPT": str(d.attempt), "FLEET_RUN_DIR": str(run_dir),
           "FLEET_ID": fleet_id}
    if spec.mpi:
        try:
            command, cores = render_mpi(profile, spec, d, run_dir, command, env)
        except (mpi.RenderError, OSError) as e:
            raise CannotLaunch(f"cannot launch the MPI step: {e}") from e
    return P.Launch(
        step=d.step, attempt=d.attempt, kind="command" if spec.mpi else spec.kind, call=spec.call or "",
        args=dict(spec.args), command=command, cores=cores, gpus=list(slot.gpus), memory=slot.memory,
        workdir=str(records.workdir(run_dir, spec)), log=str(records.log_path(run_dir, d.step)),
        run_dir=str(run_dir), inputs=[str(run_dir / i) for i in spec.inputs],
        outputs=[str(run_dir / o) for o in spec.outputs],
        placement=[[s.node, list(s.cores), list(s.gpus), s.memory] for s in d.placement],
        decided_at=time.time(),
        # Every step is given its GPUs, none included (CUDA_VISIBLE_DEVICES="" hides them);
        # an MPI launcher's ranks get theirs, per node, from the rendered command instead.
        env=env, gpu_vars=[profile.gpu_var] if profile.gpu_var and not spec.mpi else [],
        threads=spec.threads if spec.mpi else 0, timeout=spec.timeout, grace=spec.grace,
        # A declared memory is a limit; a share taken for want of one is not. An MPI step's
        # ranks are its launcher's, and the launcher is given the limit (fleet.site.mpi).
        memory_limit=slot.memory if spec.memory is not None and not spec.mpi else 0,
        **resumed(spec, d, run_dir, env))


def resumed(spec, d: Start, run_dir: Path, env: dict) -> dict:
    """The Launch fields of a step that goes on (fleet.core.phases) or speaks httk's
    protocol; a command with protocol = "steps" learns them from its environment:
    FLEET_PHASE, FLEET_STAGE, FLEET_SUBMIT_DIR, FLEET_NEXT_STAGE."""
    r = d.resume
    out = {} if r is None else {"phase": r.phase, "stage": r.stage, "restarts": r.restarts,
                                "children": dict(r.children)}
    if r is not None and len(r.children) > CHILDREN_IN_LAUNCH:  # the Launch stays far below 1 MiB
        out["children"] = dict(itertools.islice(((k, v) for k, v in r.children if v != "succeeded"),
                                                CHILDREN_IN_LAUNCH))
        out["children_omitted"] = len(r.children) - len(out["children"])
    if spec.protocol:
        fleet_dir = records.step_dir(run_dir, d.step) / ".fleet"
        env.update(FLEET_PHASE=str(r.phase if r else 0), FLEET_STAGE=r.stage if r else "",
                   FLEET_SUBMIT_DIR=str(fleet_dir / "submit"), FLEET_NEXT_STAGE=str(fleet_dir / "next-stage"))
        out["protocol"] = spec.protocol
    return out


def render_mpi(profile: Profile, spec, d: Start, run_dir: Path, command, env: dict) -> tuple[list, list]:
    """The launcher command for an MPI step, with the files it reads written into
    the step's .fleet directory; returns (argv, cores the launcher process runs on)."""
    one_host = profile.launcher == "local"
    r = mpi.render(profile.mpi, d.placement, spec.threads, command, profile.mpi_flags, one_host,
                   gpu_var=profile.gpu_var)
    fleet_dir = records.step_dir(run_dir, d.step) / ".fleet"
    fleet_dir.mkdir(parents=True, exist_ok=True)
    for name, text in r.files.items():
        (fleet_dir / name).write_text(text)
    fill = lambda v: v.replace("{fleet}", str(fleet_dir))  # noqa: E731
    env.update({k: fill(v) for k, v in r.env.items()})
    # What each rank should have, for the rank-level probe (fleet.node.mpiprobe).
    env["FLEET_RANKS"] = ";".join(f"{node}:{','.join(map(str, c))}" for node, c in mpi.layout(d.placement, spec.threads))
    # A local fleet's pretend nodes share this machine: the launcher may use all the cores.
    cores = [c for s in d.placement for c in s.cores] if one_host else list(d.placement[0].cores)
    return [fill(a) for a in r.argv], cores
