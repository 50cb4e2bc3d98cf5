"""The agents' batch launcher (srun, PALS mpiexec) dies with the coordinator that started
it, even one killed with -9 (fleet.site.tether), here with a stand-in srun: the real
Slurm's is tests/site/test_slurm_coordinator_killed.py. A launcher whose starter is gone
before the wrapper asked is not started; one that cannot be found is said so in
launcher.log and by failed()."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from fleetharness import REPO, completed, wait_for

from fleet.site.launch import SlurmLauncher
from fleet.site.tether import CODE

STAND_IN = """#!{python}
import os, signal, sys, time
def term(*_):
    open({mark!r} + ".tmp", "w").write("SIGTERM")
    os.rename({mark!r} + ".tmp", {mark!r})  # (whole, or not there: the test reads it once it exists)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
open({pidfile!r} + ".tmp", "w").write(str(os.getpid()))
os.rename({pidfile!r} + ".tmp", {pidfile!r})
time.sleep(60)
"""

COORDINATOR = """
import os, sys, time
from pathlib import Path
from fleet.site.launch import SlurmLauncher
launcher = SlurmLauncher(Path(sys.argv[1]), ("n1",))
launcher.start("tcp://127.0.0.1:1", 1, (), {"PATH": sys.argv[2]})
time.sleep(60)
"""


def _stand_in(tmp_path: Path) -> tuple[Path, Path, Path]:
    bindir, mark, pidfile = tmp_path / "bin", tmp_path / "mark", tmp_path / "srun.pid"
    bindir.mkdir()
    (bindir / "srun").write_text(STAND_IN.format(python=sys.executable, mark=str(mark), pidfile=str(pidfile)))
    (bindir / "srun").chmod(0o755)
    return bindir, mark, pidfile


def test_the_agents_srun_gets_sigterm_when_the_coordinator_that_started_it_is_killed_with_minus_9(tmp_path):
    bindir, mark, pidfile = _stand_in(tmp_path)
    coord = subprocess.Popen([sys.executable, "-c", COORDINATOR, str(tmp_path),
                              f"{bindir}{os.pathsep}{os.environ['PATH']}"],
                             env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)
    srun = None
    try:
        wait_for(pidfile.exists, 30, "the stand-in srun to start")
        srun = int(pidfile.read_text())
        assert psutil.Process(srun).ppid() == coord.pid  # (the wrapper exec'd it in its own place)
        os.kill(coord.pid, signal.SIGKILL)
        coord.wait(timeout=30)
        wait_for(mark.exists, 20, "the stand-in srun to get SIGTERM")  # (its own end is 60 s away)
        assert mark.read_text() == "SIGTERM"
    finally:
        if coord.poll() is None:
            coord.kill()
            coord.wait(timeout=30)
        if srun is not None:
            try:
                os.killpg(srun, signal.SIGKILL)  # (its own session, made by the launcher)
            except ProcessLookupError:
                pass


def test_a_launcher_whose_starter_is_gone_before_the_wrapper_asked_is_not_started(tmp_path):
    # (pid 1 is never the wrapper's parent here: as if the coordinator had died and the
    # wrapper been adopted before it asked for its death signal)
    r = completed([sys.executable, "-I", "-S", "-c", CODE, "1", "touch", str(tmp_path / "started")], timeout=30)
    assert r.returncode == 1
    assert r.stderr.decode().strip() == "fleet: not starting touch: the coordinator (pid 1) that started it is gone"
    assert not (tmp_path / "started").exists()


def test_an_agents_launcher_not_on_path_is_said_so_in_its_log_and_by_failed(tmp_path):
    launcher = SlurmLauncher(tmp_path, ("n1",))
    launcher.start("tcp://127.0.0.1:1", 1, (), {"PATH": str(tmp_path / "nothing")})
    try:
        wait_for(launcher.ended, 30, "the wrapper to exit")
    finally:
        launcher.stop()
    log = tmp_path / "agents" / "launcher.log"
    assert log.read_text() == "fleet: cannot start srun: No such file or directory\n"
    assert launcher.failed() == f"srun exited with status 127 before every agent joined; see {log}"


def test_the_tether_s_wrapper_imports_nothing_from_the_directory_it_starts_in(tmp_path):
    # (-I: a json.py or ctypes.py in the job's directory is not the standard library's)
    (tmp_path / "ctypes.py").write_text("raise SystemExit('the wrong ctypes')\n")
    r = completed([sys.executable, "-I", "-S", "-c", CODE, str(os.getpid()), "true"], timeout=30, cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stderr == b""
