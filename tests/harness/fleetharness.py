"""Running the real `fleet` command in tests: real processes, each in its own process
group with a timeout, and a look at the process table afterwards."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(REPO), e.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    e.pop("FLEET_RUN_DIR", None)
    return e


def fleet_command(bindir: Path) -> Path:
    """A `fleet` in bindir that is this test's interpreter's (`-m fleet`), for scripts that
    call `fleet` from PATH (job scripts: a Slurm job inherits PATH); bindir is made."""
    bindir.mkdir(parents=True, exist_ok=True)
    cmd = bindir / "fleet"
    cmd.write_text(f'#!/bin/sh\nexec {sys.executable} -m fleet "$@"\n')
    cmd.chmod(0o755)
    return cmd


def fleet(*args: str, cwd: Path, timeout: float = 90.0, check: bool = False,
          environ: dict | None = None) -> subprocess.CompletedProcess:
    """Run `fleet ARGS` to completion in its own process group; kill the group on timeout
    (`environ`: more environment)."""
    return python("-m", "fleet", *args, cwd=cwd, timeout=timeout, check=check, environ=environ)


def python(*args: str, cwd: Path, timeout: float = 90.0, check: bool = False,
           environ: dict | None = None) -> subprocess.CompletedProcess:
    """Run `python ARGS` (this interpreter, the tests' environment and `environ`) to
    completion in its own process group; kill the group on timeout."""
    p = subprocess.Popen([sys.executable, *args], cwd=cwd, env={**env(), **(environ or {})},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate(timeout=30)  # (bounded: a process outside the group may hold the pipes)
        raise AssertionError(f"{' '.join(args)} timed out\nstdout:\n{out}\nstderr:\n{err}")
    cp = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    if check and cp.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {cp.returncode}\nstdout:\n{out}\nstderr:\n{err}")
    return cp


def completed(argv, timeout: float, **popen) -> subprocess.CompletedProcess:
    """argv run to its end in its own process group, the group killed if it overruns or
    the wait is interrupted (then whatever it printed is returned, with its status)."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, **popen)
    out = err = None
    try:
        out, err = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate(timeout=30)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def spawn(*args: str, cwd: Path, environ: dict | None = None) -> subprocess.Popen:
    """Start `fleet ARGS` in the background in its own process group (`environ`: more environment)."""
    return subprocess.Popen([sys.executable, "-m", "fleet", *args], cwd=cwd, env={**env(), **(environ or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def events(run_dir: Path) -> list[dict]:
    path = run_dir / "events.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def exits(run_dir: Path, step: str) -> list[dict]:
    """The `exit` records of `step` in run_dir's events.jsonl, in order."""
    return [e for e in events(run_dir) if e["kind"] == "exit" and e["step"] == step]


def run_named(tmp_path: Path, body: str, name: str, timeout: float = 120.0):
    """`fleet run` of a suite named `name` (its run directory tmp_path/name) whose steps are
    `body`: (the completed process, the run directory)."""
    suite = write_suite(tmp_path / f"{name}.toml", f'[suite]\nname = "{name}"\nrun_dir = "{name}"\n' + body)
    return fleet("run", str(suite), cwd=tmp_path, timeout=timeout), tmp_path / name


def records(run_dir: Path) -> list:
    """The run's events as typed records (fleet.wire.events): a test that reads a field
    by attribute breaks when the field is renamed."""
    from fleet.wire.events import read_records
    path = run_dir / "events.jsonl"
    return list(read_records(path)) if path.exists() else []


def sessions(run_dir: Path) -> list[list]:
    """The run's events cut at each fleet_starting (fleets that ran one after another)."""
    from fleet.wire.events import FleetStarting
    out: list[list] = []
    for e in records(run_dir):
        if isinstance(e, FleetStarting) or not out:
            out.append([])
        out[-1].append(e)
    return out


def wait_for(pred, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def fleets_that_started(run_dir: Path) -> list[str]:
    """The fleets that started a step on run_dir, in the order of their first start."""
    return list(dict.fromkeys(e["fleet"] for e in events(run_dir) if e["kind"] == "started"))


def two_fleets_gated(run_dir: Path, gate: Path, first, second, first_starts: int = 1, timeout: float = 90.0):
    """Two fleets on run_dir at once, whatever the load: `first()` starts the first (a
    Popen), whose steps wait for the file `gate`; once it has started `first_starts`
    steps, `second()` starts the second; once that one has started a step too, the gate
    is made. Returns (first, second). Ungated, a loaded machine's first fleet could end
    or claim every step before the second came up: the second would find nothing of its
    own, and a test of the two sharing the run directory would prove nothing."""
    one = first()
    wait_for(lambda: sum(e["kind"] == "started" for e in events(run_dir)) >= first_starts, 60,
             "the first fleet to start steps")
    two = second()
    wait_for(lambda: len(fleets_that_started(run_dir)) >= 2, timeout, "the second fleet to start a step")
    gate.touch()
    return one, two


def fleet_pids(run_dir: Path) -> set[int]:
    """Every pid the run recorded: coordinator, agents, zygotes, steps."""
    pids = set()
    for e in events(run_dir):
        if e["kind"] == "fleet_starting":
            pids.add(e["pid"])
        elif e["kind"] == "node_joined":
            pids.update((e["pid"], e["zygote_pid"]))
        elif e["kind"] == "zygote_restarted":  # (a node's new zygote: fleet.node.rezygote)
            pids.add(e["zygote_pid"])
        elif e["kind"] == "started":
            pids.add(e["pid"])
    return pids


def living(pids: set[int]) -> list[str]:
    """Those of pids still in the process table, zombies included (they count)."""
    out = []
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)  # an orphan adopted by this test process (see conftest)
        except ChildProcessError:
            pass
        try:
            p = psutil.Process(pid)
            out.append(f"{pid} {p.status()} {' '.join(p.cmdline()[:6])}")
        except psutil.NoSuchProcess:
            pass
    return out


def tagged(tag: str) -> list[str]:
    """Processes whose command line carries tag (command steps are tagged with the run dir)."""
    out = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
        except psutil.Error:
            continue
        if tag in cmd and p.pid != os.getpid():
            out.append(f"{p.pid} {p.info['status']} {cmd[:120]}")
    return out


def assert_nothing_left(run_dir: Path, tag: str | None = None, timeout: float = 15.0) -> None:
    pids = fleet_pids(run_dir)
    assert pids, "the run recorded no pids: the test would prove nothing"
    deadline = time.monotonic() + timeout
    while True:
        left = living(pids) + (tagged(tag) if tag else [])
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not left, "processes outlived the fleet:\n" + "\n".join(left)
    assert_no_loop_error(run_dir)


# What the coordinator's loop logs when acting on its own decisions raised: a bug of
# fleet's (the loop counts it and goes on), never the fault of a step or a peer.
LOOP_ERROR = "acting failed (further failures"


def assert_no_loop_error(run_dir: Path) -> None:
    """The coordinator's log (when there is one) shows no exception caught in its loop."""
    log = Path(run_dir) / "coordinator.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    at = text.find(LOOP_ERROR)
    assert at < 0, "the coordinator's loop caught an exception:\n" + text[at:at + 3000]


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str = "32m", inodes: int | None = None):
    """A real file system that runs out soon: a tmpfs of `size` bytes (and `inodes`
    files) mounted at path, unmounted after (skips where a test may not mount one)."""
    import pytest
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    path.mkdir()
    opts = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True, text=True,
                       timeout=30)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def write_suite(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def interruptible_steps(flag: Path) -> str:
    """Suite steps that run until `flag` exists (the tests of a job ended under the fleet):
    `shell`, which exits 143 on SIGTERM (as a script that traps it); `call`, a Python call
    SIGTERM kills; `queued`, a command; and `after`, which needs `shell`."""
    return f"""
[[steps]]
id = "shell"
command = "trap 'exit 143' TERM; test -e {flag} || (sleep 120 & wait $!)"
[[steps]]
id = "call"
call = "fleet_steps:wait_for_file"
args = {{ path = "{flag}", timeout = 120 }}
[[steps]]
id = "queued"
command = "test -e {flag} || sleep 120"
[[steps]]
id = "after"
command = "true"
deps = ["shell"]
"""


def finish(p: subprocess.Popen, timeout: float = 90) -> tuple[int, str, str]:
    """Wait for a background `fleet` command; kill its group and fail if it overruns."""
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate(timeout=30)  # (bounded: a process outside the group may hold the pipes)
        raise AssertionError(f"{p.args} timed out\nstdout:\n{out}\nstderr:\n{err}")
    return p.returncode, out, err


def control_scale(work: Path, agents: int, steps: int, timeout: float = 150.0, args: tuple = (),
                  environ: dict | None = None) -> subprocess.CompletedProcess:
    """Run the control-plane load generator (benchmarks/control_scale.py: a real
    coordinator, simulated agents) at a small size in `work`, in its own process group
    (`args`: more of its options; `environ`: more environment, FLEET_SIM_WINDOW...)."""
    argv = [sys.executable, str(REPO / "benchmarks" / "control_scale.py"), "--agents", str(agents),
            "--steps", str(steps), "--idle", "1", "--timeout", "90", "--work", str(work), *args]
    p = subprocess.Popen(argv, env={**env(), **(environ or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate(timeout=30)  # (bounded: a process outside the group may hold the pipes)
        raise AssertionError(f"the load generator run timed out\nstdout:\n{out}\nstderr:\n{err}")
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def script_json(script: str, *args: str, timeout: float = 120) -> dict:
    """Run a Python script in a process of its own (its own session, a timeout) and
    return the JSON it prints: for tests of process-wide state (gc, switch interval)."""
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                         timeout=timeout, start_new_session=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def cgroup1_unwritable() -> str | None:
    """Why this process may not make a v1 memory cgroup (the steps' memory limits), or
    None if it may."""
    from fleet.node import memlimit
    got = memlimit.choose("cgroup1", tag=f"fleet-test.{os.getpid()}")
    memlimit.release(got)
    return None if got.kind == memlimit.CGROUP1 else got.why


def three_steps(first: str, command: str) -> str:
    """A suite of `first` (running `command`), a step "after" that depends on it, and an
    independent step "ok" that writes out.txt."""
    return (f'[[steps]]\nid = "{first}"\ncommand = "{command}"\n\n'
            f'[[steps]]\nid = "after"\ncommand = "true"\ndeps = ["{first}"]\n\n'
            f'[[steps]]\nid = "ok"\ncommand = "echo ok > out.txt"\n')


@contextlib.contextmanager
def coordinator_with(patch: str, tmp_path: Path, run_dir: Path):
    """A real coordinator process for a fleet of one local node in run_dir, `patch`
    (Python that changes fleet: a fault injected) run in it first; up when this yields
    it; taken down (`fleet down`, then SIGKILL to its group) after."""
    run_dir.mkdir(mode=0o700, exist_ok=True)
    code = f"{patch}\nimport sys\nfrom fleet.control.coordinator_cli import main\nsys.exit(main(sys.argv[1:]))\n"
    argv = [sys.executable, "-P", "-c", code, "--run-dir", str(run_dir), "--nodes", "1", "--machine", "local",
            "--join-timeout", "60"]
    with open(run_dir / "coordinator.log", "ab") as log:
        coordinator = subprocess.Popen(argv, cwd=tmp_path, env=env(), stdout=subprocess.DEVNULL, stderr=log,
                                       start_new_session=True)
    try:
        wait_for(lambda: (run_dir / "fleet.json").exists() or coordinator.poll() is not None, 60, "the fleet to be up")
        assert coordinator.poll() is None, (run_dir / "coordinator.log").read_text()
        yield coordinator
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        try:
            coordinator.wait(timeout=30)
        finally:
            if coordinator.poll() is None:
                os.killpg(coordinator.pid, signal.SIGKILL)
                coordinator.wait(timeout=30)


def sigterm_like_the_batch_system(run_dir: Path, gap: float, fleet_first: bool = False) -> None:
    """SIGTERM to every step of the run (its process group), and `gap` s later (or before,
    with `fleet_first`: as Slurm's pid order may have it) to every agent and zygote: a job
    ended under the fleet (scancel, a time limit with no warning)."""
    ev = events(run_dir)
    steps = [("group", e["pid"]) for e in ev if e["kind"] == "started"]
    fleet = [("pid", pid) for e in ev if e["kind"] == "node_joined" for pid in (e["pid"], e["zygote_pid"])]
    for i, batch in enumerate((fleet, steps) if fleet_first else (steps, fleet)):
        if i:
            time.sleep(gap)
        for how, pid in batch:
            try:
                (os.killpg if how == "group" else os.kill)(pid, signal.SIGTERM)
            except ProcessLookupError:
                # Gone already: a zygote its agent, signalled first, stopped and reaped before
                # this process (preempted on a loaded machine) sent the next kill (seen once in
                # a CI rehearsal). A batch system's signals are not simultaneous either.
                pass
