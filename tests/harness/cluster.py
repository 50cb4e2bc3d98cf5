"""Helpers for tests that need a real Slurm or a real MPI.

The set-up scripts are tests/cluster/slurm-up.sh (a local Slurm with fake nodes
node1..nodeN, all this machine, so every path is shared) and tests/cluster/mpi-up.sh
(MPICH and mpi4py from PyPI). .ci/run starts both before the tests; elsewhere the
tests that need them skip, with the reason given by `slurm_available()` /
`mpi_available()`:

    from cluster import requires_slurm, requires_mpi, sbatch_wait

    @requires_slurm
    @requires_mpi
    def test_mpi_step_on_two_nodes(tmp_path):
        rc, out = sbatch_wait(script, timeout=120)
        assert rc == 0, out

Nothing here initialises MPI in the test process: mpi4py is only imported in a child.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import textwrap
import time
from pathlib import Path

import psutil
import pytest

HERE = Path(__file__).resolve().parent
CLUSTER_SCRIPTS = HERE.parent / "cluster"
SLURM_UP = CLUSTER_SCRIPTS / "slurm-up.sh"
MPI_UP = CLUSTER_SCRIPTS / "mpi-up.sh"

# Job states after which a job will not run again (JobState= of `scontrol show job`).
TERMINAL_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
    "PREEMPTED", "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED",
})

_SLURM_HINT = "start it with: sudo bash tests/cluster/slurm-up.sh"
_MPI_HINT = "install it with: bash tests/cluster/mpi-up.sh"


def _run(argv, timeout=10.0):
    """Run a short command; (returncode, stdout+stderr). Never raises."""
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=timeout)
        return p.returncode, p.stdout
    except FileNotFoundError as e:
        return 127, str(e)
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]} did not answer within {timeout:g} s"


# -- Slurm -------------------------------------------------------------------------


def slurm_available(min_nodes: int = 2) -> str | None:
    """None when a Slurm with at least `min_nodes` idle nodes can run jobs here,
    else why not (a sentence fit for a skip reason)."""
    for prog in ("sinfo", "sbatch", "srun", "scontrol", "scancel"):
        if shutil.which(prog) is None:
            return f"Slurm not available: no {prog} on PATH ({_SLURM_HINT})"
    rc, out = _run(["scontrol", "ping"])
    if rc != 0 or "UP" not in out:
        first = (out.strip().splitlines() or ["no answer"])[0][:200]
        return f"Slurm not available: slurmctld does not answer `scontrol ping` ({first}; {_SLURM_HINT})"
    rc, out = _run(["sinfo", "-h", "-N", "-o", "%N %t"])
    if rc != 0:
        return f"Slurm not available: sinfo failed: {out.strip()[:200]}"
    states: dict[str, str] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2:
            states[parts[0]] = parts[1]
    idle = sorted(n for n, s in states.items() if s == "idle")
    if len(idle) < min_nodes:
        seen = ", ".join(f"{n}={s}" for n, s in sorted(states.items())) or "no nodes"
        return f"Slurm not available: {len(idle)} idle node(s), need {min_nodes} ({seen}; {_SLURM_HINT})"
    return None


@functools.lru_cache(maxsize=None)
def _slurm_reason_cached(min_nodes: int = 2) -> str | None:
    return slurm_available(min_nodes)


# -- MPI ---------------------------------------------------------------------------


def mpiexec_path() -> str | None:
    """The Hydra mpiexec of the mpich wheel in this Python's environment, else the one on PATH."""
    cand = Path(sysconfig.get_path("scripts")) / "mpiexec"
    if cand.is_file() and os.access(cand, os.X_OK):
        return str(cand)
    return shutil.which("mpiexec")


def mpi_available() -> str | None:
    """None when mpi4py loads an MPI library and an mpiexec exists, else why not.
    MPI is loaded in a child process only (importing mpi4py.MPI initialises MPI)."""
    try:
        import importlib.util
        if importlib.util.find_spec("mpi4py") is None:
            return f"MPI not available: mpi4py is not installed in {sys.prefix} ({_MPI_HINT})"
    except (ImportError, ValueError) as e:
        return f"MPI not available: mpi4py: {e} ({_MPI_HINT})"
    if mpiexec_path() is None:
        return f"MPI not available: no mpiexec on PATH or in {sysconfig.get_path('scripts')} ({_MPI_HINT})"
    rc, out = _run([sys.executable, "-c",
                    "from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0])"],
                   timeout=30)
    if rc != 0:
        return f"MPI not available: mpi4py cannot load its MPI library: {out.strip()[-300:]}"
    return None


@functools.lru_cache(maxsize=None)
def _mpi_reason_cached() -> str | None:
    return mpi_available()


# -- pytest markers and in-test skips -------------------------------------------------
# The markers are skipif marks evaluated once, when this module is imported.

requires_slurm = pytest.mark.skipif(_slurm_reason_cached() is not None,
                                    reason=_slurm_reason_cached() or "Slurm available")
requires_mpi = pytest.mark.skipif(_mpi_reason_cached() is not None,
                                  reason=_mpi_reason_cached() or "MPI available")


# Node states an earlier test's job leaves for a while: allocated or completing, or
# planned for a job since gone (Slurm's backfill clears PLANNED on its next pass only).
PASSING_STATES = ("alloc", "comp", "mix", "plnd")


def skip_unless_slurm(min_nodes: int = 2, patience: float = 90.0) -> None:
    """Skip the running test (fresh check) when Slurm is not usable; nodes in a
    passing state (PASSING_STATES) are waited for, at most ``patience`` seconds."""
    deadline = time.monotonic() + patience
    reason = slurm_available(min_nodes)
    while reason and any(f"={s}" in reason for s in PASSING_STATES) and time.monotonic() < deadline:
        time.sleep(1.0)
        reason = slurm_available(min_nodes)
    if reason:
        pytest.skip(reason)


def skip_unless_mpi() -> None:
    reason = _mpi_reason_cached()
    if reason:
        pytest.skip(reason)


# -- batch jobs ------------------------------------------------------------------------


def _job_fields(jobid: str) -> dict[str, str] | None:
    """`scontrol show job -o ID` as a dict, or None when the job is unknown to slurmctld."""
    rc, out = _run(["scontrol", "show", "job", "-o", jobid], timeout=10)
    if rc != 0:
        return None
    fields: dict[str, str] = {}
    # key=value pairs separated by spaces; values may contain spaces only in a few
    # keys (Command/WorkDir/StdOut with spaces are not expected in tests).
    for m in re.finditer(r"(\w[\w:/]*)=(\S*)", out):
        fields.setdefault(m.group(1), m.group(2))
    return fields


def _returncode(fields: dict[str, str]) -> int:
    state = fields.get("JobState", "")
    code, _, sig = fields.get("ExitCode", "0:0").partition(":")
    code_i, sig_i = int(code or 0), int(sig or 0)
    if sig_i:
        return 128 + sig_i
    if code_i == 0 and state != "COMPLETED":
        return 1  # e.g. CANCELLED or TIMEOUT with ExitCode 0:0
    return code_i


def sbatch_wait(script_path, timeout: float, *, sbatch_args=(), poll: float = 0.25,
                env=None, cwd=None) -> tuple[int | None, str]:
    """Submit `script_path` with `sbatch --parsable`, wait for the job with a deadline
    by polling `scontrol show job` (no squeue/sacct: no accounting here), and return
    (returncode, contents of the job's output file).

    returncode is the batch script's exit code (128+signal if killed by a signal,
    1 when cancelled or timed out with code 0), or None when `timeout` seconds
    passed: the job is then cancelled with scancel, and a line saying so is appended
    to the output. `sbatch_args` go before the script (e.g. ("-N", "2")); a job
    without -o writes slurm-%j.out in `cwd`.
    """
    script_path = str(script_path)
    argv = ["sbatch", "--parsable", *map(str, sbatch_args), script_path]
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=30, env=env, cwd=cwd)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()}")
    jobid = p.stdout.strip().split(";")[0]
    deadline = time.monotonic() + timeout
    fields: dict[str, str] | None = None
    stdout_path: str | None = None
    returncode: int | None = None
    note = ""
    finished = False
    try:
        while True:
            fields = _job_fields(jobid)
            if fields is not None:
                stdout_path = fields.get("StdOut") or stdout_path
                if fields.get("JobState") in TERMINAL_STATES:
                    returncode = _returncode(fields)
                    finished = True
                    break
            elif stdout_path is not None:
                # Record already purged (MinJobAge): it ended, with an unknown code.
                returncode, finished = 1, True
                note = f"[sbatch_wait] job {jobid} vanished from slurmctld; exit code unknown\n"
                break
            if time.monotonic() >= deadline:
                state = fields.get("JobState") if fields else "unknown"
                note = (f"[sbatch_wait] job {jobid} still {state} after {timeout:g} s: "
                        f"cancelled with scancel\n")
                break
            time.sleep(poll)
    finally:
        if not finished:  # deadline, or an exception (KeyboardInterrupt) while waiting
            _run(["scancel", jobid], timeout=10)
            end = time.monotonic() + 15
            while time.monotonic() < end:
                f = _job_fields(jobid)
                if f is None or f.get("JobState") in TERMINAL_STATES:
                    break
                time.sleep(0.25)
    if stdout_path is None:
        stdout_path = str(Path(cwd or os.getcwd()) / f"slurm-{jobid}.out")
    try:
        output = Path(stdout_path).read_text(errors="replace")
    except OSError as e:
        output = f"[sbatch_wait] cannot read job output {stdout_path}: {e}\n"
    return returncode, output + note


def fleet_job_script(work: Path, run_dir: Path, suite: Path, name: str, up_args: tuple = (),
                     up_s: int = 60, run_s: int = 120) -> Path:
    """A batch script for a real job: `fleet up` on run_dir (with up_args), `fleet run`
    of suite, `fleet down`, each bounded by `timeout` (up_s, run_s, 40 s) and each one's
    exit status appended to work/<name>.rcs ("up 0", "run 3", ...)."""
    tests = HERE.parent
    script = work / f"{name}.sh"
    up = " ".join(["--timeout", "40", *map(str, up_args)])
    script.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        cd {work}
        export PYTHONPATH={tests}:{tests.parent}${{PYTHONPATH:+:$PYTHONPATH}}
        unset FLEET_RUN_DIR FLEET_MACHINE FLEET_MACHINES
        PY={sys.executable}
        timeout -k 5 {up_s} $PY -m fleet up --run-dir {run_dir} {up}; echo "up $?" >> {name}.rcs
        timeout -k 5 {run_s} $PY -m fleet run {suite} --run-dir {run_dir}; echo "run $?" >> {name}.rcs
        timeout -k 5 40 $PY -m fleet down --run-dir {run_dir}; echo "down $?" >> {name}.rcs
        """))
    script.chmod(0o755)
    return script


def coordinators(run_dir) -> list[psutil.Process]:
    """The coordinators of `run_dir` still running on this machine (started by a job's
    `fleet up`, or outliving it)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "fleet.control.coordinator" in cmd and str(run_dir) in cmd:
            out.append(p)
    return out


def stop_coordinators(run_dir) -> None:
    """A test's clean-up: the coordinators of `run_dir` get SIGTERM (they stop their
    agents and steps), SIGKILL if they linger past 30 s."""
    left = coordinators(run_dir)
    for p in left:
        p.send_signal(signal.SIGTERM)
    for p in psutil.wait_procs(left, timeout=30)[1]:
        p.kill()
