"""How agents are started: one per node, through a launcher.

`local` runs the agents as processes on this machine, splitting its cores into
disjoint pretend nodes. Batch-system launchers (srun, PALS mpiexec) implement the
same small interface.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Protocol

from fleet.site.tether import tethered
from fleet.wire import interpreter, logtag, owndirs, ownfiles


class Launcher(Protocol):
    # Why its nodes offer no GPUs, where it read their GPU ids itself and could not ("":
    # it could, or each agent reads its own and says why in its log): for fit problems.
    gpus_unread: str

    def start(self, endpoint: str, nodes: int, preload: tuple[str, ...], env: dict[str, str]) -> None:
        """Start one agent per node, each told to join the coordinator at endpoint,
        with `env` added to its environment (never its command line: keys travel there)."""

    def failed(self) -> str | None:
        """Why agents cannot all join (an agent process died first), or None."""

    def note_failure(self, reason: str) -> None:
        """An agent reported that it could not start."""

    def ended(self) -> bool:
        """Whether every process it started has exited (no agent can join any more)."""

    def names(self) -> tuple[str, ...]:
        """The nodes it started agents on, by the names they join with (where known)."""

    def output(self) -> str:
        """Where the agents' output goes, said for a person."""

    def stop(self) -> None:
        """Make sure every agent process is gone (after they were asked to shut down)."""


def split_cores(cores: list[int], parts: int) -> list[list[int]]:
    """Disjoint, contiguous groups of cores, as even as possible."""
    if parts < 1 or parts > len(cores):
        raise ValueError(f"cannot split {len(cores)} core(s) into {parts} pretend node(s)")
    return split_evenly(cores, parts)


def split_evenly(ids: list[int], parts: int) -> list[list[int]]:
    """`ids` in `parts` disjoint, contiguous groups, as even as possible, the larger
    first; with fewer ids than parts, the last groups are empty."""
    size, extra = divmod(len(ids), parts)
    out, i = [], 0
    for p in range(parts):
        n = size + (1 if p < extra else 0)
        out.append(ids[i:i + n])
        i += n
    return out


def local_names(nodes: int) -> list[str]:
    """The names of a local fleet's pretend nodes: node1.., zero-padded to one width."""
    width = len(str(nodes))
    return [f"node{i:0{width}d}" for i in range(1, nodes + 1)]


def local_split(nodes: int, hold_back: tuple[int, ...] = ()) -> tuple[list[list[int]], int]:
    """This machine as a local fleet of `nodes` pretend nodes has it: each node's cores
    (the usable ones but `hold_back`) and memory; ValueError if there are too few cores."""
    from fleet.node.probe import node_memory, usable_cores
    return split_cores([c for c in usable_cores() if c not in hold_back], nodes), node_memory() // nodes


def local_gpus(nodes: int, gpu_var: str = "", gpus_per_node: int = 0) -> tuple[list[list[int]], str]:
    """This machine's GPUs (fleet.node.probe.node_gpus, as a machine profile's `gpu_var`
    and `gpus_per_node` say) split between a local fleet's `nodes` pretend nodes as its
    cores are, each on exactly one, so that steps on two pretend nodes never share a GPU
    (with fewer GPUs than pretend nodes, the last have none); and why none are offered
    ("" if the ids could be read)."""
    from fleet.node.probe import node_gpus
    try:
        gpus = list(node_gpus(gpu_var, gpus_per_node))
    except ValueError as e:
        return [[] for _ in range(nodes)], str(e)
    return split_evenly(gpus, nodes), ""


def local_nodes(nodes: int, hold_back: tuple[int, ...] = (), gpu_var: str = "",
                gpus_per_node: int = 0) -> tuple[list, str]:
    """The nodes (fleet.core.resources.NodeSpec) a local fleet of `nodes` pretend nodes
    will have once its agents join, known before it starts (`fleet run`'s checks of a
    suite for its embedded fleet): its launcher's split of cores, memory and GPUs; and
    why they have no GPUs if the machine's ids could not be read ("" otherwise), for a
    step's GPU problem to say."""
    from fleet.core.resources import NodeSpec
    groups, memory = local_split(nodes, hold_back)
    gpus, unread = local_gpus(nodes, gpu_var, gpus_per_node)
    return [NodeSpec(name, tuple(cores), tuple(g), memory)
            for name, cores, g in zip(local_names(nodes), groups, gpus)], unread


class LocalLauncher:
    """Agents as local processes, each its own process group, dying with us."""

    def __init__(self, run_dir: Path, hold_back: tuple[int, ...] = (), gpu_var: str = "", gpus_per_node: int = 0):
        self.run_dir = Path(run_dir)
        self.hold_back = hold_back
        self.gpu_var, self.gpus_per_node = gpu_var, gpus_per_node  # (a machine profile's: local_gpus)
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []  # each agent's log, as procs
        self._failure: str | None = None
        self.gpus_unread = ""

    def start(self, endpoint: str, nodes: int, preload: tuple[str, ...], env: dict[str, str]) -> None:
        groups, memory = local_split(nodes, self.hold_back)
        gpus, unread = local_gpus(nodes, self.gpu_var, self.gpus_per_node)
        self.gpus_unread = unread
        logs = self.run_dir / "agents"
        owndirs.makedirs(logs)
        for name, cores, own_gpus in zip(local_names(nodes), groups, gpus):
            argv = [*interpreter.module("fleet.node.agent"), "--connect", endpoint, "--node", name,
                    "--cores", ",".join(map(str, cores)), "--memory", str(memory),
                    "--gpus=" + ",".join(map(str, own_gpus)), "--preload", ",".join(preload),
                    # (we are its parent: gone before it could ask to die with us, it stops at once)
                    "--parent-pid", str(os.getpid())]
            self.logs.append(logs / f"{name}.log")
            with ownfiles.open(self.logs[-1], "ab") as out:
                if unread:
                    out.write(f"{logtag.tag(env.get(logtag.ENV, ''))}fleet agent {name}: offering no GPUs: "
                              f"{unread}\n".encode())
                    out.flush()
                self.procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                                   start_new_session=True, env={**os.environ, **env}))

    def failed(self) -> str | None:
        if self._failure:
            return self._failure
        for p, log in zip(self.procs, self.logs):
            if p.poll() is not None:
                # (empty: it could not write even its first line there, a full disk's mark)
                empty = f" (its log {log} is empty)" if _empty(log) else f"; see {log}"
                return f"agent process {p.pid} exited with status {p.returncode} before the fleet was up{empty}"
        return None

    def note_failure(self, reason: str) -> None:
        self._failure = self._failure or reason

    def ended(self) -> bool:
        return all(p.poll() is not None for p in self.procs)

    def names(self) -> tuple[str, ...]:
        return tuple(local_names(len(self.procs)))

    def output(self) -> str:
        return f"{self.run_dir / 'agents'}/<node>.log"

    def stop(self) -> None:
        deadline = time.monotonic() + 5.0
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()


def _empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except OSError:
        return False


def agent_argv(endpoint: str, preload: tuple[str, ...], hold_back: tuple[int, ...], *extra: str,
               machine: str = "") -> list[str]:
    """An agent's command line (`machine`: the profile holding `hold_back` back, for its log)."""
    return [*interpreter.module("fleet.node.agent"), "--connect", endpoint, "--preload", ",".join(preload),
            "--hold-back", ",".join(map(str, hold_back)), *(["--machine", machine] if machine else []), *extra]


class _BatchLauncher:
    """One launcher process (srun or mpiexec) that starts an agent on every node."""

    def __init__(self, run_dir: Path, nodes: tuple[str, ...], hold_back: tuple[int, ...] = (),
                 flags: tuple[str, ...] = (), own: tuple[str, ...] = (), gpus: tuple[str, ...] = (), machine: str = ""):
        self.run_dir = Path(run_dir)
        self.machine = machine  # the profile's name, for the agents' logs (fleet.node.heldback)
        self.nodes = nodes
        self.hold_back = hold_back
        self.flags = flags
        self.own = own  # the agents' arguments naming the coordinator's own cores (fleet.site.owncores)
        self.gpus = gpus  # the agents' arguments saying where their node's GPUs are read from (gpu_args)
        self.proc: subprocess.Popen | None = None
        self.program = ""  # the launcher (srun, mpiexec), for what is said of it
        self._failure: str | None = None
        self.gpus_unread = ""  # (each agent reads its node's GPUs: its log says why none)

    def argv(self, endpoint: str, preload: tuple[str, ...]) -> list[str]:
        raise NotImplementedError

    def start(self, endpoint: str, nodes: int, preload: tuple[str, ...], env: dict[str, str]) -> None:
        """(Called from the coordinator's main thread: the launcher dies with that thread.)"""
        logs = self.run_dir / "agents"
        owndirs.makedirs(logs)
        argv = self.argv(endpoint, preload)
        self.program = argv[0]
        with ownfiles.open(logs / "launcher.log", "ab") as out:
            # Tethered: a coordinator killed with -9 takes the launcher's step, and so every
            # agent, with it (fleet.site.tether; before 2026-12-07 they ran on).
            self.proc = subprocess.Popen(tethered(argv), stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=out, start_new_session=True, env={**os.environ, **env})

    def failed(self) -> str | None:
        if self._failure:
            return self._failure
        if self.proc is not None and self.proc.poll() is not None:
            return (f"{self.program} exited with status {self.proc.returncode} before every agent joined; "
                    f"see {self.run_dir / 'agents' / 'launcher.log'}")
        return None

    def note_failure(self, reason: str) -> None:
        self._failure = self._failure or reason

    def ended(self) -> bool:
        return self.proc is None or self.proc.poll() is not None

    def names(self) -> tuple[str, ...]:
        return tuple(self.nodes)

    def output(self) -> str:
        return str(self.run_dir / "agents" / "launcher.log")

    def stop(self) -> None:
        if self.proc is None:
            return
        for sig, wait in ((None, 10.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            if sig is not None:
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    pass
            try:
                self.proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue


class SlurmLauncher(_BatchLauncher):
    """srun, one task per node, as an overlapping step: the agents hold none of the
    job's cores or memory, so MPI steps' own srun calls are never blocked by them.
    No --exact (the agent must see all of the job's cores on its node) and no MPI
    plugin (its PMI variables would leak into every step). --export=ALL: a job submitted
    with `sbatch --export=NONE` (or a site's SLURM_EXPORT_ENV=NONE) has SLURM_EXPORT_ENV=NONE
    in its script's environment, and srun would start the agents with none: no keys to
    join with, no PATH or PYTHONPATH, nothing of the job script's for the steps. On the
    command line rather than by dropping the variable from srun's environment: it wins
    over whatever the environment says (SLURM_EXPORT_ENV, and any other way a site sets
    it), and the launcher's log shows it. A profile's agent_flags come after it, so a
    site that means otherwise can still say so. (The agents drop SLURM_EXPORT_ENV from
    their own environment: fleet.node.launcherenv, so the steps' srun exports all too.)"""

    def argv(self, endpoint, preload):
        n = str(len(self.nodes))
        return ["srun", "--overlap", "--mpi=none", "--cpu-bind=none", "--kill-on-bad-exit=0", "--export=ALL",
                "-N", n, "-n", n, "--ntasks-per-node=1", *self.flags,
                *agent_argv(endpoint, preload, self.hold_back, "--node-from", "slurm", *self.own, *self.gpus,
                            machine=self.machine)]


class PalsLauncher(_BatchLauncher):
    """PALS mpiexec, one rank per node of the PBS node file; each agent finds its
    node's name from its rank in that list. Unbound (`--cpu-bind none`, as srun's
    --cpu-bind=none): without it PALS binds by PALS_CPU_BIND / PALS_DEPTH, which job
    scripts export, and an agent bound to one core offers only that core."""

    def argv(self, endpoint, preload):
        n = str(len(self.nodes))
        return ["mpiexec", "-n", n, "--ppn", "1", "--hosts", ",".join(self.nodes),
                "--depth", "1", "--cpu-bind", "none", *self.flags,
                *agent_argv(endpoint, preload, self.hold_back, "--node-from", "rank",
                            "--node-list", ",".join(self.nodes), *self.own, *self.gpus, machine=self.machine)]


def gpu_args(profile) -> tuple[str, ...]:
    """The agent's arguments that have it read its node's GPUs as the machine profile
    says (fleet.node.probe.node_gpus): its `gpu_var` first, then its `gpus_per_node`."""
    return ("--gpu-var", profile.gpu_var, "--gpus-per-node", str(profile.gpus_per_node))


def launcher_for(profile, run_dir: Path, nodes: tuple[str, ...] = (), own: tuple[str, ...] = ()) -> Launcher:
    """The launcher a machine profile names (`nodes`: the allocation's, for batch systems;
    `own`: the agents' arguments naming the cores the coordinator keeps, fleet.site.owncores)."""
    if profile.launcher == "local":
        return LocalLauncher(run_dir, profile.held_back_cores, profile.gpu_var, profile.gpus_per_node)
    if profile.launcher == "slurm":
        return SlurmLauncher(run_dir, nodes, profile.held_back_cores, profile.agent_flags, own, gpu_args(profile),
                             profile.name)
    if profile.launcher == "pals":
        return PalsLauncher(run_dir, nodes, profile.held_back_cores, profile.agent_flags, own, gpu_args(profile),
                            profile.name)
    raise ValueError(f"unknown launcher {profile.launcher!r}")
