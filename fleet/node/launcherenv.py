"""The environment an agent inherits from the launcher step that started it (srun,
mpiexec): what must not reach the steps it starts."""

from __future__ import annotations

import os

# Variables a step started from inside an agent's own srun/mpiexec step would inherit,
# and which change or break an MPI step it launches (PMI_* makes MPI_Init fail;
# SLURM_CPU_BIND/DISTRIBUTION/NTASKS* silently change binding and layout).
LEAKED_PREFIXES = ("PMI_", "PMIX_", "SLURM_STEP_", "SLURM_CPU_BIND", "PALS_", "MPIR_", "HYDRA_", "OMPI_")
LEAKED_NAMES = frozenset({
    "SLURM_DISTRIBUTION", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NNODES", "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE", "SLURM_STEPID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
    "SLURM_GTIDS", "SLURM_SRUN_COMM_HOST", "SLURM_SRUN_COMM_PORT", "SLURM_STEP_LAUNCHER_PORT",
    "SLURM_LAUNCH_NODE_IPADDR", "SLURM_MPI_TYPE", "SLURM_CPUS_PER_TASK", "SLURM_UMASK",
    "SLURM_PRIO_PROCESS", "SLURM_TOPOLOGY_ADDR", "SLURM_TOPOLOGY_ADDR_PATTERN", "SLURM_TASK_PID",
    "SLURM_CPUS_ON_NODE", "SLURM_EXPORT_ENV",
})


def is_leaked(name: str) -> bool:
    """True for variables of the launcher step the agent itself runs in."""
    return name in LEAKED_NAMES or name.startswith(LEAKED_PREFIXES)


def clean_environment(env=os.environ) -> None:
    """Drop what the launcher step that started the agent set for its own tasks: a step
    inheriting PMI_* cannot initialise MPI, and SLURM_CPU_BIND, SLURM_DISTRIBUTION or
    SLURM_NTASKS* would silently change how an MPI step's srun binds and lays out ranks."""
    for name in [n for n in env if is_leaked(n)]:
        del env[name]
