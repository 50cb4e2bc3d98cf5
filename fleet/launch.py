"""How agents are started: one per node, through a launcher.

`local` runs the agents as processes on this machine, splitting its cores into
disjoint pretend nodes. Batch-system launchers (srun, PALS mpiexec) implement the
same small interface.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Protocol


class Launcher(Protocol):
    def start(self, endpoint: str, nodes: int, preload: tuple[str, ...], env: dict[str, str]) -> None:
        """Start one agent per node, each told to join the coordinator at endpoint,
        with `env` added to its environment (never its command line: keys travel there)."""

    def failed(self) -> str | None:
        """Why agents cannot all join (an agent process died first), or None."""

    def note_failure(self, reason: str) -> None:
        """An agent reported that it could not start."""

    def stop(self) -> None:
        """Make sure every agent process is gone (after they were asked to shut down)."""


def split_cores(cores: list[int], parts: int) -> list[list[int]]:
    """Disjoint, contiguous groups of cores, as even as possible."""
    if parts < 1 or parts > len(cores):
        raise ValueError(f"cannot split {len(cores)} core(s) into {parts} pretend node(s)")
    size, extra = divmod(len(cores), parts)
    out, i = [], 0
    for p in range(parts):
        n = size + (1 if p < extra else 0)
        out.append(cores[i:i + n])
        i += n
    return out


class LocalLauncher:
    """Agents as local processes, each its own process group, dying with us."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.procs: list[subprocess.Popen] = []
        self._failure: str | None = None

    def start(self, endpoint: str, nodes: int, preload: tuple[str, ...], env: dict[str, str]) -> None:
        from .node.probe import node_memory, usable_cores
        groups = split_cores(usable_cores(), nodes)
        memory = node_memory() // nodes
        logs = self.run_dir / "agents"
        logs.mkdir(parents=True, exist_ok=True)
        width = len(str(nodes))
        for i, cores in enumerate(groups, 1):
            name = f"node{i:0{width}d}"
            argv = [sys.executable, "-m", "fleet.node.agent", "--connect", endpoint, "--node", name,
                    "--cores", ",".join(map(str, cores)), "--memory", str(memory),
                    "--preload", ",".join(preload)]
            with open(logs / f"{name}.log", "ab") as out:
                self.procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                                   start_new_session=True, env={**os.environ, **env}))

    def failed(self) -> str | None:
        if self._failure:
            return self._failure
        for p in self.procs:
            if p.poll() is not None:
                return f"agent process {p.pid} exited with status {p.returncode} before the fleet was up"
        return None

    def note_failure(self, reason: str) -> None:
        self._failure = self._failure or reason

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


def launcher_for(name: str, run_dir: Path) -> Launcher:
    if name == "local":
        return LocalLauncher(run_dir)
    raise ValueError(f"unknown launcher {name!r} (known: local)")
