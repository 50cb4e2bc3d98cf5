"""Rendering an MPI step's launcher command from its placement.

Pure functions: a placement (nodes, core ids, GPUs) and a rank shape in, an argv plus
the environment and files the launcher needs out. Ranks are laid out node by node in
placement order, each rank on `threads` consecutive cores of its node's list.

Launchers bind by *local* rank with one list for every node (srun's map_cpu/mask_cpu,
PALS's --cpu-bind list:, Hydra's -bind-to user:). When every node gets the same list,
that is what we render. When nodes differ (the scheduler gave node1 cores 0-1 and node2
cores 2-3), one list cannot say it, so each rank is started through `taskset -c`
instead: MPMD sections for Hydra, and for srun and PALS (which holds hosts, ranks per
node, binding and environment once per application) a generated wrapper that picks the
rank's cores by SLURM_PROCID or PALS_RANKID and takes the command as its arguments.
Not srun's --multi-prog: its file is read by no shell, and changed or broke commands.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from types import MappingProxyType
from dataclasses import dataclass, field

from fleet.core.resources import Placement
from fleet.wire.execshell import EXEC_SHELL

class RenderError(ValueError):
    pass


@dataclass(frozen=True)
class Rendered:
    """What the step child runs: argv, extra environment, and files to write first
    (relative name -> content, written into the step's .fleet directory)."""

    argv: tuple[str, ...]
    env: dict = field(default_factory=dict, hash=False)
    files: dict = field(default_factory=dict, hash=False)


def layout(placement: Placement, threads: int) -> list[tuple[str, tuple[int, ...]]]:
    """(node, cores) of each rank, in rank order."""
    ranks = []
    for slot in placement:
        if len(slot.cores) % threads:
            raise RenderError(f"{len(slot.cores)} cores on {slot.node} is not a multiple of {threads} threads per rank")
        for i in range(0, len(slot.cores), threads):
            ranks.append((slot.node, tuple(slot.cores[i:i + threads])))
    return ranks


def _per_node_lists(placement: Placement, threads: int) -> list[list[tuple[int, ...]]]:
    return [[tuple(s.cores[i:i + threads]) for i in range(0, len(s.cores), threads)] for s in placement]


def _uniform(placement: Placement, threads: int) -> list[tuple[int, ...]] | None:
    """The one per-local-rank core list every node shares, or None if nodes differ."""
    lists = _per_node_lists(placement, threads)
    return lists[0] if all(x == lists[0] for x in lists) else None


def _mask(cores: tuple[int, ...]) -> str:
    return hex(sum(1 << c for c in cores))


def _cpus(cores: tuple[int, ...]) -> str:
    return ",".join(map(str, cores))


def gpu_env(placement: Placement, gpu_var: str) -> tuple[dict, list[str] | None]:
    """GPU visibility for the ranks: each rank sees the GPUs the step holds on its node.
    Returns (variables for every rank, None) when every node's list is the same, else
    ({}, one list per node) for the per-node forms below. An empty ZE_AFFINITY_MASK
    means every device, so a step given no GPUs is not "confined" by one."""
    if not gpu_var:
        return {}, None
    lists = [",".join(map(str, s.gpus)) for s in placement]
    if gpu_var == "ZE_AFFINITY_MASK" and not any(lists):
        return {}, None
    if all(x == lists[0] for x in lists):
        return {gpu_var: lists[0]}, None
    return {}, lists


def _mib(n: int) -> int:
    return -(-n // (1 << 20))  # rounded up: a limit must not be below the declaration


def memory_flags(placement: Placement) -> list[str]:
    """srun's memory limit for an MPI step (Slurm holds each node's ranks to it where it
    enforces memory): ``--mem`` of each node's share when every node holds the same;
    ``--mem-per-cpu`` when every node holds the same per core; else ``--mem`` of the
    largest share (srun takes one figure for every node). Nothing without a declaration."""
    mems = [s.memory for s in placement]
    if not any(mems):
        return []
    if len(set(mems)) == 1:
        return [f"--mem={_mib(mems[0])}M"]
    per_core = {_mib(s.memory // len(s.cores)) if s.cores else None for s in placement}
    if len(per_core) == 1 and None not in per_core and all(s.memory % len(s.cores) == 0 for s in placement):
        return [f"--mem-per-cpu={per_core.pop()}M"]
    return [f"--mem={_mib(max(mems))}M"]


# srun's memory options: one of them in the site's mpi_flags is the site's say, and fleet
# gives none of its own. Only these: --mem-bind (NUMA binding) is not a limit.
MEMORY_OPTIONS = ("--mem", "--mem-per-cpu", "--mem-per-gpu")


def sets_memory(flag: str) -> bool:
    """Whether `flag` is one of srun's memory limits (``--mem``, ``--mem=4G``, ``--mem-per-cpu=...``)."""
    return flag.split("=", 1)[0] in MEMORY_OPTIONS


# srun's say on a rank that fails: a KillOnBadExit of the site's (its slurm.conf) is only
# srun's default, and Slurm's own is 0, under which the other ranks of a step one rank left
# (an exit status, a signal) wait in their next collective until the step's timeout or the
# job's end. A step of ranks is one program: fleet ends it as Hydra does, unless the
# profile's mpi_flags say (-K / --kill-on-bad-exit, with or without a value).
KILL_ON_BAD_EXIT = "--kill-on-bad-exit=1"


def sets_kill_on_bad_exit(flag: str) -> bool:
    """Whether `flag` is srun's --kill-on-bad-exit (``-K``, ``-K0``, ``--kill-on-bad-exit=0``...)."""
    return flag.split("=", 1)[0] == "--kill-on-bad-exit" or (flag.startswith("-K") and not flag.startswith("--"))


def render_srun(placement: Placement, threads: int, command: list[str], flags: tuple[str, ...] = (),
                mpi: str = "pmi2", gpu_var: str = "", limit_memory: bool = True,
                fleet_dir: str = "{fleet}") -> Rendered:
    """srun inside the job: an overlapping step (the agents' step holds no cores, and
    several MPI steps share nodes), ranks placed per node through an arbitrary
    distribution, and bound to exactly the scheduler's cores. No --exact: Slurm's own
    choice of cores would conflict with the binding we ask for. A rank that fails ends the
    step (KILL_ON_BAD_EXIT, unless `flags` say). `limit_memory`: the
    step declared its memory (a share taken for want of a declaration is no limit);
    `fleet_dir`: where the files are written, named in the environment and the argv."""
    ranks = layout(placement, threads)
    nodes = [s.node for s in placement]
    # No -c either: an explicit --cpus-per-task implies --exact (Slurm 22.05 says so), and the
    # step then gets the CPUs Slurm picks, so binding to the scheduler's is refused.
    argv = ["srun", "--overlap", "-N", str(len(nodes)), "-n", str(len(ranks)),
            "-m", "arbitrary", f"--mpi={mpi}"]
    if not any(sets_kill_on_bad_exit(f) for f in flags):  # the site's own say wins
        argv.append(KILL_ON_BAD_EXIT)
    if limit_memory and not any(sets_memory(f) for f in flags):  # the site's own say wins
        argv += memory_flags(placement)
    files = {"hostfile": "".join(f"{node}\n" for node, _ in ranks)}
    genv, per_node = gpu_env(placement, gpu_var)
    env = {"SLURM_HOSTFILE": f"{fleet_dir}/hostfile", **genv}
    shared = _uniform(placement, threads)
    if shared is not None and per_node is None:
        if threads == 1:
            argv.append("--cpu-bind=verbose,map_cpu:" + ",".join(str(c[0]) for c in shared))
        else:
            argv.append("--cpu-bind=verbose,mask_cpu:" + ",".join(_mask(c) for c in shared))
        argv += [*flags, *command]
    else:
        # Not srun's --multi-prog: its file is no shell (a quote, a %t, a line break or
        # ~127 words in the command broke it or changed what ran), so each rank starts
        # through a script that takes the command as its arguments, untouched.
        files[SRUN_WRAPPER] = _srun_wrapper(placement, _per_node_lists(placement, threads), gpu_var, per_node)
        argv += ["--cpu-bind=none", *flags, *EXEC_SHELL, f"{fleet_dir}/{SRUN_WRAPPER}", *command]
    return Rendered(tuple(argv), env, files)


SRUN_WRAPPER = "srun-ranks.sh"

# How a rank wrapper ends: the rank's cores are the l-th group of its node's `cores`.
_PICK_AND_EXEC = ["i=0; c=",
                  'for x in $cores; do [ "$i" -eq "$l" ] && c=$x && break; i=$((i + 1)); done',
                  '[ -n "$c" ] || { echo "fleet: rank $r was not placed" >&2; exit 127; }',
                  'exec taskset -c "$c" "$@"', ""]


def _srun_wrapper(placement: Placement, lists: list, gpu_var: str, per_node: list | None) -> str:
    """The script every srun rank starts through when nodes' cores (or GPUs) differ.
    Rank r runs on line r of the hostfile (-m arbitrary), and ranks go node by node in
    placement order: a node's ranks are the SLURM_PROCIDs below its running count, its
    local rank r less the first. One line per node, not per rank: each rank reads all of it."""
    lines = ["# fleet: starts each srun rank on its own cores (and its node's GPUs); written for this launch",
             'r=${SLURM_PROCID:?"SLURM_PROCID is not set: not started by srun"}']
    first = 0
    for i, (slot, ranks) in enumerate(zip(placement, lists)):
        what = [f"l=$((r - {first}))", f"cores='{' '.join(_cpus(c) for c in ranks)}'"]
        what += [f"export {gpu_var}={per_node[i]}"] if per_node else []
        first += len(ranks)
        lines.append(f"{'if' if i == 0 else 'elif'} [ \"$r\" -lt {first} ]; then {'; '.join(what)}  # {slot.node}")
    lines += ['else echo "fleet: rank $r was not placed" >&2; exit 127', "fi", *_PICK_AND_EXEC]
    return "\n".join(lines)


def pals_order(placement: Placement, threads: int) -> Placement:
    """The placement in PALS's rank order: PALS puts ranks in blocks of --ppn over
    --hosts in the order given, so the nodes holding the most ranks come first (stable:
    an even placement keeps its order)."""
    return tuple(sorted(placement, key=lambda s: -(len(s.cores) // threads)))


def rank_layout(kind: str, placement: Placement, threads: int) -> list[tuple[str, tuple[int, ...]]]:
    """(node, cores) of each rank in the order the `kind` launcher numbers them."""
    return layout(pals_order(placement, threads) if kind == "pals" else placement, threads)


PALS_WRAPPER = "pals-ranks.sh"


def _pals_wrapper(placement: Placement, lists: list, ppn: int, gpu_var: str, per_node: list | None,
                  gpu_extra: Mapping[str, str] = MappingProxyType({})) -> str:
    """The script every rank starts through: its node is its PALS_RANKID // ppn (ranks
    go in blocks of ppn over --hosts), its cores the node's list at its local rank.
    One case per node, not per rank: each rank reads all of it. `gpu_extra` (how the GPU
    variable's numbers are read: the profile's) is exported for every rank too."""
    lines = ["# fleet: starts each PALS rank on its own node's cores (and GPUs); written for this launch",
             *(f"export {k}={shlex.quote(v)}" for k, v in sorted(gpu_extra.items())),
             'r=${PALS_RANKID:?"PALS_RANKID is not set: not started by PALS mpiexec"}',
             f"n=$((r / {ppn})); l=$((r % {ppn}))",
             'case "$n" in']
    for i, (slot, ranks) in enumerate(zip(placement, lists)):
        what = [f"cores='{' '.join(_cpus(c) for c in ranks)}'"] + ([f"export {gpu_var}={per_node[i]}"] if per_node else [])
        lines.append(f"{i}) {'; '.join(what)} ;;  # {slot.node}")
    lines += ['*) echo "fleet: rank $r was not placed" >&2; exit 127 ;;', "esac", *_PICK_AND_EXEC]
    return "\n".join(lines)


def render_pals(placement: Placement, threads: int, command: list[str], flags: tuple[str, ...] = (),
                gpu_var: str = "", fleet_dir: str = "{fleet}",
                gpu_extra: Mapping[str, str] = MappingProxyType({})) -> Rendered:
    """PALS mpiexec: --hosts, --ppn, --depth and --cpu-bind list:a,b:c,d when every node
    holds the same ranks on the same cores and GPUs. Otherwise one application still
    (PALS takes hosts, ppn, binding and environment once for all of it: an MPMD section
    carries only -n, --depth, --wdir, --umask and argv), unbound, each rank started
    through a wrapper (`fleet_dir`/pals-ranks.sh) that pins it with taskset and gives it
    its node's GPUs. Ranks land in blocks of ppn over the hosts, so every node but the
    last (by rank count) must hold the same number: RenderError otherwise."""
    layout(placement, threads)  # refuses cores that are not whole ranks, as srun and Hydra do
    shared = _uniform(placement, threads)
    genv, per_node = gpu_env(placement, gpu_var)
    if shared is not None and per_node is None:
        argv = ["mpiexec", "-n", str(len(shared) * len(placement)), "--ppn", str(len(shared)),
                "--hosts", ",".join(s.node for s in placement), "--depth", str(threads),
                "--cpu-bind", "list:" + ":".join(_cpus(c) for c in shared), *flags, *command]
        return Rendered(tuple(argv), genv)
    ordered = pals_order(placement, threads)
    if per_node:
        per_node = gpu_env(ordered, gpu_var)[1]
    lists = _per_node_lists(ordered, threads)
    counts = [len(x) for x in lists]
    ppn = counts[0]
    if any(c != ppn for c in counts[:-1]):
        raise RenderError(
            f"PALS mpiexec places ranks in blocks of --ppn over --hosts, and the step's placement has "
            f"{_ranks_per_node(ordered, counts)}: only the last node may hold fewer ranks than the others "
            f"(a limit of PALS launches; see 'MPI steps' in docs/operations.md)")
    argv = ["mpiexec", "-n", str(sum(counts)), "--ppn", str(ppn), "--hosts", ",".join(s.node for s in ordered),
            "--depth", str(threads), "--cpu-bind", "none", *flags,
            *EXEC_SHELL, f"{fleet_dir}/{PALS_WRAPPER}", *command]
    return Rendered(tuple(argv), genv, {PALS_WRAPPER: _pals_wrapper(ordered, lists, ppn, gpu_var, per_node, gpu_extra)})


def _ranks_per_node(placement: Placement, counts: list[int]) -> str:
    shown = ", ".join(f"{c} on {s.node}" for s, c in zip(placement[:6], counts))
    return f"ranks per node {shown}" + (f" and {len(counts) - 6} more nodes" if len(counts) > 6 else "")


# What every Hydra rank is started through: /dev/null as its stdin. Hydra passes its own
# stdin (a step's: /dev/null) to rank 0 only, and leaves the other ranks reading a stream
# that never ends, so a rank that read stdin held the step's cores until its timeout, for
# ever without one (srun gives every rank srun's). Hydra has no option for it; an exec of
# a shell a rank, at the rank's start, costs what no step would notice (fleet.wire.execshell:
# one that passes on the environment whole, Lmod's `module` function too).
HYDRA_RANK_STDIN = (*EXEC_SHELL, "-c", 'exec "$@" </dev/null', "fleet-rank")


def render_hydra(placement: Placement, threads: int, command: list[str], flags: tuple[str, ...] = (),
                 one_host: bool = False, gpu_var: str = "") -> Rendered:
    """MPICH's Hydra mpiexec. `one_host`: pretend nodes of a local fleet all live on
    this machine, so every rank is local and one -bind-to user: list covers them all.
    Every rank starts through HYDRA_RANK_STDIN, with /dev/null as its stdin."""
    ranks = layout(placement, threads)
    command = [*HYDRA_RANK_STDIN, *command]
    genv, per_node = gpu_env(placement, gpu_var)
    node_gpus = dict(zip((s.node for s in placement), per_node or ()))
    if one_host:
        user = "user:" + ",".join("+".join(map(str, cores)) for _, cores in ranks)
        if not per_node:
            return Rendered(("mpiexec", "-n", str(len(ranks)), "-bind-to", user, *flags, *command), genv)
        argv = ["mpiexec", "-bind-to", user, *flags]
        for r, (node, _) in enumerate(ranks):  # -env is per section: one section per rank
            argv += ([":"] if r else []) + ["-n", "1", "-env", gpu_var, node_gpus[node], *command]
        return Rendered(tuple(argv), genv)
    lists = _per_node_lists(placement, threads)
    hosts = ",".join(f"{s.node}:{len(x)}" for s, x in zip(placement, lists))
    shared = _uniform(placement, threads)
    if shared is not None and per_node is None:
        bind = "user:" + ",".join("+".join(map(str, c)) for c in shared)
        return Rendered(("mpiexec", "-hosts", hosts, "-n", str(len(ranks)), "-bind-to", bind, *flags, *command), genv)
    argv = ["mpiexec", "-hosts", hosts, *flags]
    for r, (node, cores) in enumerate(ranks):
        if r:
            argv.append(":")
        argv += ["-n", "1", *(["-env", gpu_var, node_gpus[node]] if per_node else []),
                 "taskset", "-c", _cpus(cores), *command]
    return Rendered(tuple(argv), genv)


def render(kind: str, placement: Placement, threads: int, command: list[str] | str,
           flags: tuple[str, ...] = (), one_host: bool = False, gpu_var: str = "",
           limit_memory: bool = True, fleet_dir: str = "{fleet}",
           gpu_extra: Mapping[str, str] = MappingProxyType({})) -> Rendered:
    """The launcher command for an MPI step (kind: srun, pals or hydra); `gpu_var` is the
    machine's GPU visibility variable, set for each rank to its node's GPUs. The command
    is passed on as it is: nothing in it is a placeholder. `limit_memory`: as for
    render_srun (the others take none); `fleet_dir`: where srun's and PALS's files go."""
    argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
    if kind == "srun":
        return render_srun(placement, threads, argv, flags, gpu_var=gpu_var, limit_memory=limit_memory,
                           fleet_dir=fleet_dir)
    if kind == "pals":
        return render_pals(placement, threads, argv, flags, gpu_var=gpu_var, fleet_dir=fleet_dir, gpu_extra=gpu_extra)
    if kind == "hydra":
        return render_hydra(placement, threads, argv, flags, one_host, gpu_var=gpu_var)
    raise RenderError(f"unknown MPI launcher {kind!r}")
