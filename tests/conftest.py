import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

# tests/ mirrors fleet/ (core, wire, node, site, control, report); the helpers the
# tests share live in tests/harness, the step functions fleets run in tests/.
sys.path.insert(0, str(Path(__file__).resolve().parent / "harness"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

PR_SET_CHILD_SUBREAPER = 36


def pytest_configure(config):
    config.addinivalue_line("markers", "xdist_group(name): run on one pytest-xdist worker with its group")
    # Started in the background by a shell without job control (`.ci/run &`), this process
    # and every process it starts would ignore SIGINT (an ignored signal stays ignored
    # across exec), and the Ctrl-C tests would wait for nothing. A handler is reset to the
    # default at exec: the fleets the tests start take Ctrl-C as from a terminal.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # A fleet started by `fleet up` outlives the command that started it; where this
    # machine's init does not reap orphans, the tests adopt them instead, so that
    # a process that really exited is not mistaken for one left behind.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


# The README's test command runs three pytest-xdist workers (`-n 3 --dist loadgroup`), on
# 2-core machines too: most tests wait on real processes more than they compute, so a
# third overlaps those waits (README says what it saved).
# The site's tests share one real Slurm (its two nodes, its job queue, its time limits)
# and the MPI launcher: they stay on one worker, in order.
SERIAL_DIRS = ("site", "cluster")


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups
def pytest_collection_modifyitems(config, items):
    tests = Path(__file__).resolve().parent
    for item in items:
        try:
            top = Path(item.path).resolve().relative_to(tests).parts[0]
        except ValueError:
            continue
        if top in SERIAL_DIRS:
            item.add_marker(pytest.mark.xdist_group("cluster"))


@pytest.fixture
def background():
    """Background `fleet` commands (append each Popen): killed by process group if a
    test leaves them running."""
    procs: list[subprocess.Popen] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate(timeout=30)

