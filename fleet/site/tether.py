"""A batch launcher (srun, PALS mpiexec) that dies with the coordinator that started it.

The agents under srun or mpiexec are children of the batch system's daemons, not of
the coordinator: they die with the launcher's step, and the step ends when its srun
or mpiexec gets SIGTERM. Nothing else ties the launcher to the coordinator: one whose
coordinator was killed with -9 was adopted by init and kept its agents running until
they heard nothing from the coordinator for 3/4 of the heartbeat timeout (or their
join timeout, 120 s, if not joined yet).

So the launcher is started through a tiny Python wrapper that asks the kernel for
SIGTERM when its parent dies (PR_SET_PDEATHSIG, kept across exec of a binary that is
not setuid), checks that its parent is still the coordinator (else it died before we
asked: the launcher is not started), and execs the launcher in its own place: same
pid, same process group. Why not a `preexec_fn` doing the same in the forked child:
the coordinator has threads (its worker, the journal's syncer, libzmq's I/O threads)
and Python documents preexec_fn as unsafe with threads (the child may deadlock before
exec, in a lock another thread held at the fork). The wrapper costs one interpreter
start (-I -S: no site, no user paths; ~20 ms) once per fleet, not per step.

The death signal comes when the THREAD that started the wrapper ends, not the process:
the launcher must be started from the coordinator's main thread (Coordinator.serve).
"""

from __future__ import annotations

import os
import signal
import sys

PR_SET_PDEATHSIG = 1

# Run as `python -I -S -c CODE PARENT_PID LAUNCHER ARGS...`: nothing of fleet's is
# imported (with -I neither PYTHONPATH nor the current directory is on sys.path).
CODE = f"""\
import ctypes, os, sys
parent, argv = int(sys.argv[1]), sys.argv[2:]
prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
if prctl is not None:
    prctl({PR_SET_PDEATHSIG}, *(ctypes.c_ulong(v) for v in ({int(signal.SIGTERM)}, 0, 0, 0)))
if os.getppid() != parent:
    sys.exit(f"fleet: not starting {{argv[0]}}: the coordinator (pid {{parent}}) that started it is gone")
try:
    os.execvp(argv[0], argv)
except OSError as e:
    sys.stderr.write(f"fleet: cannot start {{argv[0]}}: {{e.strerror or e}}\\n")
    sys.exit(127)
"""


def tethered(argv: list[str]) -> list[str]:
    """The command line that runs `argv` as a process that gets SIGTERM when this one (its
    parent: start it from this process's main thread) dies, even by SIGKILL."""
    return [sys.executable, "-I", "-S", "-c", CODE, str(os.getpid()), *argv]
