"""What keeps a coordinator from starting here, found before anything starts.

`fleet up` (and `fleet run`'s embedded fleet) used to start the coordinator and learn
from its exit that it could not run: a machine profile whose launcher needs a batch
job, outside one; a local fleet split into more pretend nodes than there are cores
(a traceback from the coordinator); an address to advertise that does not resolve.
By then a coordinator had run and written its log in the run directory. The same
checks the coordinator makes (fleet.control.coordinator_cli) are made here first,
among them that the launcher suits the batch job (a PALS profile in a Slurm job,
from 2026-12-07: its agents failed after the coordinator had started), with the flag or setting that is wrong named, so that nothing starts. One more the
coordinator cannot make, as it is not told: a --nodes given in a batch job that is not
the job's node count (the coordinator takes every node of the job, and ignored it).
After them, the batch job is asked once (asked_job) whether it is live and when it ends.
"""

from __future__ import annotations


def problem(profile, nodes: int | None, advertise: str | None,
            elsewhere: str = "give --local for a fleet on this machine", own_cores: int = 0) -> str | None:
    """Why a fleet of `profile` (fleet.site.profiles.Profile) with `nodes` pretend nodes
    (a local fleet's --nodes; None: not given, 1) advertising `advertise`, its coordinator
    keeping `own_cores` cores (--coordinator-cores), cannot start here, or None
    (`elsewhere`: how to have a local fleet instead, as the command at hand takes it)."""
    from fleet.control.coordinator_cli import addresses
    from fleet.core.units import counted
    from fleet.site.allocation import AllocationError, from_environment
    local = profile.launcher == "local"
    if local and own_cores:
        return (f"--coordinator-cores {own_cores}: only in a batch job (a local fleet's coordinator shares this "
                f"machine's cores with its pretend nodes)")
    if local:
        why = _local_split(profile, nodes or 1)
        if why:
            return why
    else:
        try:
            alloc = from_environment()
        except AllocationError as e:
            return f"machine {profile.name}: {e}"
        in_job = len(alloc.nodes)
        if not in_job:
            how = {"slurm": "Slurm's srun", "pals": "PALS mpiexec"}.get(profile.launcher, profile.launcher)
            return (f"machine {profile.name} starts its agents with {how}, but this is not inside a batch job "
                    f"({elsewhere})")
        if why := wrong_job(profile, alloc):
            return why
        if nodes is not None and nodes != in_job:
            # (it was ignored: the fleet came up on every node of the job without a word)
            return (f"--nodes {nodes}: a fleet on machine {profile.name} runs on every node of the batch job, "
                    f"which has {counted(in_job, 'node')}; ask the batch system for the nodes you want and leave --nodes out "
                    f"(--nodes splits this machine into pretend nodes for a local fleet: {elsewhere})")
        if own_cores:
            from fleet.node.probe import usable_cores
            from fleet.site.owncores import pick
            try:
                pick(own_cores, usable_cores(), profile.held_back_cores)
            except ValueError as e:
                return str(e)
    try:
        addresses("", advertise or profile.advertise, local)
    except ValueError as e:
        return str(e)
    return None


_JOB_OF = {"slurm": ("slurm", "Slurm's srun", "a Slurm job"), "pals": ("pbs", "PALS mpiexec", "a PBS job")}


def wrong_job(profile, alloc) -> str | None:
    """Why `profile`'s launcher cannot start agents in the batch job `alloc`
    (fleet.site.allocation.Allocation), or None: srun wants a Slurm job, PALS mpiexec a
    PBS one. (A PALS profile in a Slurm job started a coordinator, whose agents then
    failed with Hydra's "unrecognized argument depth", the mpiexec on PATH being MPICH's.)"""
    want = _JOB_OF.get(profile.launcher)
    if want is None or alloc.system == want[0]:
        return None
    other = {v[0]: k for k, v in _JOB_OF.items()}.get(alloc.system)
    this = {"slurm": "a Slurm job", "pbs": "a PBS job"}.get(alloc.system, f"a {alloc.system} job")
    return (f"machine {profile.name} ({profile.path}) starts its agents with {want[1]}, which needs {want[2]}, but "
            f"this is {this} ({alloc.job_id})" + (f": give --machine {other}, or a profile with launcher = "
                                                  f"\"{other}\"" if other else ""))


def _local_split(profile, nodes: int) -> str | None:
    """Why this machine's cores, less those `profile` holds back, cannot be split into
    `nodes` pretend nodes, or None. The profile is blamed when it leaves no core (it was
    "--nodes 1: cannot split 0 core(s)", when --nodes was not even given)."""
    from fleet.node.probe import usable_cores
    from fleet.site.launch import local_split
    held = profile.held_back_cores
    usable = usable_cores()
    if held and not [c for c in usable if c not in held]:
        from fleet.core.units import counted
        return (f"machine {profile.name} ({profile.path}) holds back cores {sorted(held)}: this machine has none "
                f"left (all {counted(len(usable), 'usable core')} of it held back): hold back fewer in its "
                f"held_back_cores")
    try:
        local_split(nodes, held)
    except ValueError as e:
        return f"--nodes {nodes}: {e}" + (f" (machine {profile.name} holds back cores {sorted(held)})" if held else "")
    return None


def embedded(nodes: int | None, advertise: str | None, own_cores: int = 0) -> str | None:
    """As `problem`, for the fleet `fleet run` starts itself: this environment's machine
    profile (fleet.site.profiles.detect: $FLEET_MACHINE, else the batch job's)."""
    from fleet.site.profiles import ProfileError, detect, detected_by, load
    chosen = detected_by()
    try:
        profile = load(detect())
    except ProfileError as e:
        return f"{chosen}: {e}"
    return problem(profile, nodes, advertise, f"the machine is {chosen}; without it fleet run starts a local fleet",
                   own_cores)


def asked_job(end_given: bool) -> tuple[str | None, list[str]]:
    """The batch job this process runs in, asked once as a fleet is to start here
    (fleet.site.allocation.at_start): why it cannot (the environment names a job that
    has ended: an salloc shell's variables after its job, which the fleet would record
    as its own, and another fleet then trust as ended; or the end read from the job is
    already past, unless `end_given`: --end, --walltime), or None; and the coordinator's
    options that pass the answer on (--end, --end-from), so that it does not ask again.
    Nothing is asked outside a batch job, nor in one whose environment cannot be read
    (`problem` says why, for a launcher that needs it)."""
    from fleet.site.allocation import AllocationError, AtStart, at_start, from_environment, refusal
    try:
        alloc = from_environment()
    except AllocationError:
        return None, []
    if alloc.system == "none":
        return None, []
    at = at_start(alloc)
    if end_given:  # (only whether the job is live: the end is the one given)
        return refusal(alloc, AtStart(None, at.source, at.gone)) or None, []
    return refusal(alloc, at) or None, (["--end", repr(at.end)] if at.end is not None else []) + ["--end-from", at.source]
