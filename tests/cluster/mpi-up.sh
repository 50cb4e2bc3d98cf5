#!/usr/bin/env bash
# MPI for the tests: MPICH (its Hydra mpiexec and libmpi) and mpi4py from PyPI
# wheels, into the Python that runs the tests (python3 on PATH, or $PYTHON).
# Installs only if `import mpi4py` fails. Prints where mpiexec is.
set -euo pipefail
PY=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1
log() { echo "mpi-up: $*" >&2; }

if ! "$PY" -c "import mpi4py" >/dev/null 2>&1; then
  log "installing mpich mpi4py (PyPI wheels) into $("$PY" -c 'import sys; print(sys.prefix)')"
  "$PY" -m pip install -q mpich mpi4py || { log "FAILED: pip install mpich mpi4py"; exit 1; }
fi
# The mpich wheel puts mpiexec in the environment's scripts directory (which may be
# reached only through a pyenv shim, or not be on PATH): report that real path.
bindir=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
if [ -x "$bindir/mpiexec" ]; then mpiexec="$bindir/mpiexec"; else mpiexec=$(command -v mpiexec || true); fi
[ -n "$mpiexec" ] || { log "FAILED: no mpiexec on PATH nor in $bindir"; exit 1; }
"$PY" -c "from mpi4py import MPI; print('mpi-up: mpi4py', MPI.Get_library_version().splitlines()[0])" >&2 \
  || { log "FAILED: mpi4py does not load its MPI library"; exit 1; }
echo "$mpiexec"
