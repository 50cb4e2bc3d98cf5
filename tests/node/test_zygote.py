"""The zygote as the agent uses it: a real process on real pipes, forking real steps.

Call targets live in tests/steps.py ("steps:NAME"); tests/ goes on the zygote's
PYTHONPATH. Every zygote starts in its own session and is killed by process group
at teardown, with every step group it reported.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import psutil
import pytest

from fleet.node import probe
from fleet.node.child import placement_mismatch, step_environment
from fleet.wire.framing import FrameReader, frame_payload, write_message, write_payloads
from fleet.wire.messages import VERSION, Exited, Hello, Importing, Kill, Launch, Refused, Shutdown, Started, encode

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the zygote needs Linux")

TESTS = Path(__file__).resolve().parents[1]
TIMEOUT = 10.0
PR_SET_CHILD_SUBREAPER = 36
CORES = probe.usable_cores()
# An id no CPU here has: the kernel drops it from a mask, a genuine mismatch.
MISSING_CORE = max(os.sched_getaffinity(0)) + 1000


class ZygoteProcess:
    """A zygote on a pair of pipes, as an agent would start it."""

    def __init__(self, preload=("steps",), grace=0.3, affinity=None, env=None):
        req_r, self.req_w = os.pipe()
        self.resp_r, resp_w = os.pipe()
        environ = dict(os.environ)
        environ.pop("OMP_NUM_THREADS", None)  # so we can see the zygote set it
        environ["PYTHONPATH"] = os.pathsep.join(
            [str(TESTS)] + [p for p in [environ.get("PYTHONPATH")] if p])
        environ.update(env or {})
        argv = [sys.executable, "-m", "fleet.node.zygote", "--fd-in", str(req_r),
                "--fd-out", str(resp_w), "--grace", str(grace)]
        if preload:
            argv += ["--preload", ",".join(preload)]
        own = os.sched_getaffinity(0)
        try:
            if affinity is not None:
                os.sched_setaffinity(0, affinity)  # inherited by the zygote
            self.proc = subprocess.Popen(argv, pass_fds=(req_r, resp_w), env=environ,
                                         stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        finally:
            os.sched_setaffinity(0, own)
            os.close(req_r)
            os.close(resp_w)
        self.reader = FrameReader()
        self.inbox: list = []
        self.started: dict[str, Started] = {}
        self.importing: list[str] = []  # the preload modules it said it was importing
        self.eof = False

    def send(self, msg) -> None:
        write_message(self.req_w, msg)

    def send_together(self, *msgs) -> None:
        """Several messages in one write, read by the zygote in one turn (as an agent
        relays what one of its turns has for it)."""
        write_payloads(self.req_w, [encode(m) for m in msgs])

    def close_requests(self) -> None:
        if self.req_w is not None:
            os.close(self.req_w)
            self.req_w = None

    def next(self, timeout: float = TIMEOUT):
        """The next message from the zygote; EOFError when its pipe closes."""
        deadline = time.monotonic() + timeout
        while not self.inbox:
            if self.eof:
                raise EOFError("zygote closed its pipe")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no message from the zygote")
            ready, _, _ = select.select([self.resp_r], [], [], left)
            if ready:
                data = os.read(self.resp_r, 65536)
                if not data:
                    self.eof = True
                self.inbox += self.reader.feed(data)
        msg = self.inbox.pop(0)
        if isinstance(msg, Importing):  # (before its Hello: kept for the tests of those)
            self.importing.append(msg.module)
            return self.next(max(0.0, deadline - time.monotonic()))
        if isinstance(msg, Started):
            self.started[msg.step] = msg
        return msg

    def expect(self, cls, timeout: float = TIMEOUT):
        msg = self.next(timeout)
        assert isinstance(msg, cls), msg
        return msg

    def exited(self, step: str, timeout: float = TIMEOUT) -> Exited:
        """Messages until the Exited of ``step`` (others are kept for later)."""
        deadline = time.monotonic() + timeout
        skipped = []
        try:
            while True:
                msg = self.next(max(0.0, deadline - time.monotonic()))
                if isinstance(msg, Exited) and msg.step == step:
                    return msg
                if not isinstance(msg, Started):
                    skipped.append(msg)
        finally:
            self.inbox[:0] = skipped

    def wait(self, timeout: float = TIMEOUT) -> int:
        return self.proc.wait(timeout=timeout)

    def cleanup(self) -> None:
        self.close_requests()
        try:
            self.proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            pass
        groups = [self.proc.pid] + [s.pgid for s in self.started.values()]
        for pgid in groups:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass
        if self.proc.poll() is None:
            self.proc.wait(timeout=TIMEOUT)
        os.close(self.resp_r)


@pytest.fixture
def zygote(request):
    """Factory: start a zygote (and expect its Hello unless told otherwise)."""
    made: list[ZygoteProcess] = []

    def start(hello=True, **kw) -> ZygoteProcess:
        z = ZygoteProcess(**kw)
        made.append(z)
        if hello:
            z.expect(Hello)
        return z

    yield start
    for z in made:
        z.cleanup()


@pytest.fixture
def subreaper():
    """Make this process the reaper of orphaned grandchildren while a test runs, so
    they do not depend on (or pile up under) the container's init; tests reap them
    by pid."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    yield
    libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def launch(run_dir: Path, step: str, call: str = "steps:record", *, kind="call",
           command=None, cores=(), gpus=(), args=None, **kw) -> Launch:
    workdir = run_dir / "steps" / step
    return Launch(step=step, attempt=1, kind=kind, call=call if kind == "call" else "",
                  args=args or {}, command=command, cores=tuple(cores),
                  gpus=tuple(gpus), memory=1 << 20, workdir=str(workdir),
                  log=str(workdir / "log"), run_dir=str(run_dir),
                  decided_at=time.time(), **kw)


def read_json_when_there(path: Path, timeout: float = TIMEOUT) -> dict:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.005)
    return json.loads(path.read_text())


def log_of(run_dir: Path, step: str) -> str:
    return (run_dir / "steps" / step / "log").read_text()


def assert_nothing_left(pids, pgids, grandchildren=(), timeout: float = TIMEOUT) -> None:
    """No process with one of ``pids`` (the zygote's own children) exists, not even
    as a zombie, and nothing is left of ``grandchildren`` or in one of ``pgids``.
    Zombie grandchildren handed to us as subreaper are reaped here: that is init's
    job, not the zygote's."""
    pids, pgids = set(pids), set(pgids)
    watched = pids | set(grandchildren)
    deadline = time.monotonic() + timeout
    while True:
        left = []
        for proc in psutil.process_iter(["pid", "ppid", "status"]):
            try:
                pgid = os.getpgid(proc.pid)
            except OSError:
                continue
            if proc.pid not in watched and pgid not in pgids:
                continue
            if (proc.pid not in pids and proc.info["status"] == psutil.STATUS_ZOMBIE
                    and proc.info["ppid"] == os.getpid()):
                os.waitpid(proc.pid, os.WNOHANG)
                continue
            left.append((proc.pid, pgid, proc.info["status"]))
        if not left:
            return
        assert time.monotonic() < deadline, f"left behind: {left}"
        time.sleep(0.01)


def zombie_children(pid: int) -> list[int]:
    return [c.pid for c in psutil.Process(pid).children()
            if c.status() == psutil.STATUS_ZOMBIE]


# -- start-up -------------------------------------------------------------------


def test_the_zygote_says_hello_with_one_thread_and_its_preloaded_modules(zygote):
    z = zygote(hello=False)
    hello = z.expect(Hello)
    assert hello.pid == z.proc.pid
    assert hello.threads == 1
    assert hello.preload == ("steps",)
    assert 0 <= hello.import_s < TIMEOUT
    assert z.importing == ["steps"]  # said before it imported it, for an agent to name a crash


def test_a_preload_that_starts_a_thread_makes_the_zygote_refuse_and_exit_3(zygote):
    z = zygote(hello=False, preload=("steps", "preload_starts_thread"))
    refused = z.expect(Refused)
    assert "2 threads" in refused.reason
    assert "preload_starts_thread" in refused.reason
    assert z.wait() == 3


def test_a_preload_that_fails_to_import_makes_the_zygote_refuse(zygote):
    z = zygote(hello=False, preload=("no_such_module_for_fleet",))
    refused = z.expect(Refused)
    assert "no_such_module_for_fleet" in refused.reason
    assert z.wait() == 3


# -- call steps -------------------------------------------------------------------


@pytest.mark.parametrize("cores", [CORES[-1:], CORES], ids=["one core", "all cores"])
def test_a_call_step_runs_in_its_own_session_and_process_group_on_exactly_its_cores(
        zygote, tmp_path, cores):
    z = zygote()
    z.send(launch(tmp_path, "s", cores=cores, args={"x": [1, 2]}))
    started = z.expect(Started)
    exited = z.exited("s")
    rec = json.loads((tmp_path / "steps/s/record.json").read_text())
    assert rec["pid"] == rec["pgid"] == rec["sid"] == started.pid == started.pgid == exited.pid
    assert rec["ppid"] == z.proc.pid
    assert rec["affinity"] == sorted(cores)
    assert rec["cwd"] == str(tmp_path / "steps/s")
    assert (rec["id"], rec["attempt"], rec["args"]) == ("s", 1, {"x": [1, 2]})
    assert exited.outcome == "succeeded" and exited.returncode == 0
    assert exited.signal is None and exited.error is None
    assert exited.affinity == tuple(sorted(cores)) and exited.placement_ok
    assert zombie_children(z.proc.pid) == []


def test_a_call_steps_stdout_and_stderr_land_in_its_log(zygote, tmp_path):
    z = zygote()
    z.send(launch(tmp_path, "s", cores=CORES[:1]))
    assert z.exited("s").outcome == "succeeded"
    log = log_of(tmp_path, "s")
    assert "hello on stdout" in log and "hello on stderr" in log and "raw fd 1" in log


def test_a_call_step_gets_default_signals_its_gpus_its_env_and_its_own_thread_count(
        zygote, tmp_path):
    z = zygote()
    z.send(launch(tmp_path, "s", gpus=(2, 3), gpu_vars=("CUDA_VISIBLE_DEVICES",),
                  env={"FLEET_TEST_EXTRA": "yes", "CUDA_VISIBLE_DEVICES": "9"}))
    assert z.exited("s").outcome == "succeeded"
    rec = json.loads((tmp_path / "steps/s/record.json").read_text())
    assert rec["sigterm_default"] and rec["sigint_default"]
    assert rec["cuda"] == "2,3"  # the placement wins over the suite's env
    assert rec["extra"] == "yes"
    assert rec["omp_in_zygote"] == "1"  # the zygote pinned it before preloading
    # and the step has its own count: not pinned, so every core the zygote may use
    assert rec["omp_now"] == str(len(os.sched_getaffinity(0)))


def test_a_raising_function_fails_with_the_exception_named_in_error_and_a_traceback_in_the_log(
        zygote, tmp_path):
    z = zygote()
    z.send(launch(tmp_path, "s", "steps:boom"))
    exited = z.exited("s")
    assert exited.outcome == "failed" and exited.returncode == 1
    assert exited.error == "RuntimeError: boom from the step"
    log = log_of(tmp_path, "s")
    assert "Traceback" in log and "RuntimeError: boom from the step" in log


def test_a_missing_call_target_fails_with_the_import_error(zygote, tmp_path):
    z = zygote()
    z.send(launch(tmp_path, "s", "steps_that_do_not_exist:nothing"))
    exited = z.exited("s")
    assert exited.outcome == "failed"
    assert exited.error.startswith("ModuleNotFoundError")


def test_sys_exit_with_a_code_fails_with_that_code(zygote, tmp_path):
    z = zygote()
    z.send(launch(tmp_path, "s", "steps:exit_with", args={"code": 7}))
    exited = z.exited("s")
    assert (exited.outcome, exited.returncode, exited.signal) == ("failed", 7, None)


def test_a_step_that_sigkills_itself_is_terminated_with_signal_9(zygote, tmp_path):
    z = zygote()
    z.send(launch(tmp_path, "s", "steps:kill_self"))
    exited = z.exited("s")
    assert (exited.outcome, exited.returncode, exited.signal) == ("terminated", None, 9)
    assert "SIGKILL" in exited.error


def test_exit_reports_carry_rusage_and_times_in_order(zygote, tmp_path):
    z = zygote()
    z.send(launch(tmp_path, "call", "steps:burn", cores=CORES[:1]))
    z.send(launch(tmp_path, "cmd", kind="command", command=["true"], cores=CORES[:1]))
    for step in ("call", "cmd"):
        e = z.exited(step)
        assert e.outcome == "succeeded"
        assert e.decided_at <= e.first_at <= e.work_start <= e.work_end <= e.ended_at
        assert e.maxrss_kb > 0 and e.utime >= 0 and e.stime >= 0
        if step == "call":
            assert e.utime + e.stime >= 0.04  # it burned 50 ms of CPU
            assert e.work_end - e.work_start >= 0.04


def test_a_core_the_node_does_not_have_is_reported_as_a_placement_mismatch(
        zygote, tmp_path):
    z = zygote()
    cores = (CORES[0], MISSING_CORE)
    z.send(launch(tmp_path, "call", cores=cores))
    z.send(launch(tmp_path, "cmd", kind="command", command=["true"], cores=cores))
    for step in ("call", "cmd"):
        exited = z.exited(step)
        assert exited.outcome == "succeeded"  # it runs, but the agent is told
        assert exited.placement_ok is False
        assert exited.affinity == (CORES[0],)
        assert "PLACEMENT MISMATCH" in log_of(tmp_path, step)


def test_the_placement_comparison_accepts_only_exactly_the_given_cores():
    assert placement_mismatch((0, 1), [1, 0]) is None
    assert placement_mismatch((), [0, 1]) is None  # not pinned
    assert "[0, 1]" in placement_mismatch((0, 1), [0])
    assert placement_mismatch((0,), [0, 1]) is not None


def test_step_environment_puts_the_agents_values_back_and_gpu_ids_last():
    env = step_environment({"OMP_NUM_THREADS": "1", "A": "a"},
                           {"OMP_NUM_THREADS": None, "MKL_NUM_THREADS": "4"},
                           {"B": "b"}, (0, 1), ("CUDA_VISIBLE_DEVICES", "ZE_AFFINITY_MASK"))
    assert env == {"A": "a", "B": "b", "MKL_NUM_THREADS": "4",
                   "CUDA_VISIBLE_DEVICES": "0,1", "ZE_AFFINITY_MASK": "0,1"}
    no_gpus = step_environment({"ZE_AFFINITY_MASK": "0"}, {}, {}, (),
                               ("CUDA_VISIBLE_DEVICES", "ZE_AFFINITY_MASK"))
    # Empty hides every CUDA device; an empty ZE mask would mean all of them.
    assert no_gpus == {"CUDA_VISIBLE_DEVICES": "", "ZE_AFFINITY_MASK": "0"}


# -- command steps ------------------------------------------------------------------


def test_a_command_step_given_as_argv_runs_on_its_cores_in_its_workdir(zygote, tmp_path):
    z = zygote()
    code = ("import os; print('cwd', os.getcwd()); "
            "print('cores', sorted(os.sched_getaffinity(0))); "
            "print('group', os.getpgid(0) == os.getpid() == os.getsid(0))")
    z.send(launch(tmp_path, "s", kind="command", command=[sys.executable, "-c", code],
                  cores=CORES[-1:]))
    started = z.expect(Started)
    exited = z.exited("s")
    assert exited.outcome == "succeeded" and exited.pid == started.pid == started.pgid
    assert exited.affinity == CORES[-1:] and exited.placement_ok
    log = log_of(tmp_path, "s")
    assert f"cwd {tmp_path / 'steps/s'}" in log
    assert f"cores {list(CORES[-1:])}" in log
    assert "group True" in log
    assert zombie_children(z.proc.pid) == []


def test_a_command_step_given_as_a_shell_string_runs_through_sh_with_its_cores_and_cwd(
        zygote, tmp_path):
    z = zygote()
    z.send(launch(tmp_path, "s", kind="command", cores=CORES[:1], gpus=(1,),
                  gpu_vars=("CUDA_VISIBLE_DEVICES",),
                  command="pwd; grep Cpus_allowed_list /proc/self/status; "
                          "echo gpus=$CUDA_VISIBLE_DEVICES omp=${OMP_NUM_THREADS-unset}; "
                          "echo to stderr >&2; exit 3"))
    exited = z.exited("s")
    assert (exited.outcome, exited.returncode) == ("failed", 3)
    assert exited.error == "exit status 3"
    header, *lines = log_of(tmp_path, "s").splitlines()
    assert header.startswith("==== fleet: step s attempt 1 ")
    assert lines[0] == str(tmp_path / "steps/s")
    assert lines[1].split() == ["Cpus_allowed_list:", str(CORES[0])]
    assert lines[2] == "gpus=1 omp=1"  # its one core's worth
    assert lines[3] == "to stderr"


def test_a_command_that_cannot_be_found_fails_without_a_start(zygote, tmp_path):
    z = zygote()
    z.send(launch(tmp_path, "s", kind="command", command=["/no/such/program"]))
    msg = z.next()
    assert isinstance(msg, Exited) and msg.step == "s", msg
    assert msg.pid == 0 and msg.outcome == "failed"
    assert msg.error.startswith("FileNotFoundError")
    # and the zygote keeps serving
    z.send(launch(tmp_path, "t", kind="command", command=["true"]))
    assert z.exited("t").outcome == "succeeded"


# -- malformed requests ---------------------------------------------------------------


def test_a_launch_with_an_unknown_field_or_a_field_of_the_wrong_type_is_dropped_and_the_next_served(
        zygote, tmp_path, capfd):
    z = zygote()
    body = {"v": VERSION, "type": "launch", **launch(tmp_path, "odd").__dict__}  # as a map (sent by shape)
    os.write(z.req_w, frame_payload(msgpack.packb({**body, "colour": "red"})))
    os.write(z.req_w, frame_payload(msgpack.packb({**body, "cores": "0-3"})))
    z.send(launch(tmp_path, "s"))
    assert z.expect(Started).step == "s"
    assert z.exited("s").outcome == "succeeded"
    assert not (tmp_path / "steps/odd").exists()
    err = capfd.readouterr().err
    assert "dropped a malformed request: launch: unknown fields ['colour']" in err, err
    assert "dropped a malformed request: launch: field 'cores' is not a tuple" in err, err


# -- stopping steps and the zygote ----------------------------------------------------


def test_kill_terminates_a_running_step_and_everything_in_its_process_group(
        zygote, tmp_path, subreaper):
    z = zygote()
    z.send(launch(tmp_path, "s", "steps:sleep_with_grandchild"))
    started = z.expect(Started)
    pids = read_json_when_there(tmp_path / "steps/s/pids.json")
    z.send(Kill("s", 1, signal.SIGTERM))
    exited = z.exited("s")
    assert (exited.outcome, exited.signal, exited.returncode) == ("terminated", 15, None)
    assert exited.work_start <= exited.work_end <= exited.ended_at
    assert_nothing_left([started.pid], [started.pgid], [pids["grandchild"]])
    assert zombie_children(z.proc.pid) == []


def test_a_kill_for_an_unknown_step_is_ignored(zygote, tmp_path):
    z = zygote()
    z.send(Kill("nobody", 1, signal.SIGKILL))
    z.send(launch(tmp_path, "s", kind="command", command=["true"]))
    assert z.exited("s").outcome == "succeeded"


def _start_stubborn_steps(z: ZygoteProcess, run_dir: Path) -> list[int]:
    """A step with a grandchild, one that ignores SIGTERM and a shell command with a
    background job; returns the grandchild pids once all are running."""
    z.send(launch(run_dir, "gc", "steps:sleep_with_grandchild"))
    z.send(launch(run_dir, "stubborn", "steps:ignore_sigterm"))
    z.send(launch(run_dir, "cmd", kind="command", command="sleep 60 & echo $! > bg; wait"))
    for _ in range(3):
        z.expect(Started)
    grandchildren = [read_json_when_there(run_dir / "steps/gc/pids.json")["grandchild"]]
    read_json_when_there(run_dir / "steps/stubborn/pids.json")
    deadline = time.monotonic() + TIMEOUT
    bg = run_dir / "steps/cmd/bg"
    while not bg.exists() or not bg.read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.005)
    grandchildren.append(int(bg.read_text()))
    return grandchildren


def test_shutdown_stops_every_step_and_leaves_nothing_behind(zygote, tmp_path, subreaper):
    z = zygote(grace=0.3)
    grandchildren = _start_stubborn_steps(z, tmp_path)
    z.send(Shutdown(grace=0.3))
    outcomes = {}
    while len(outcomes) < 3:
        msg = z.next()
        if isinstance(msg, Exited):
            outcomes[msg.step] = (msg.outcome, msg.signal)
    # Stopped with their node, not ended by themselves (fleet.node.stopping.WITH_NODE).
    assert outcomes == {"gc": ("terminated", 15), "stubborn": ("terminated", 9),
                        "cmd": ("terminated", 15)}
    with pytest.raises(EOFError):
        z.next()
    assert z.wait() == 0
    started = z.started.values()
    assert_nothing_left([s.pid for s in started], [s.pgid for s in started],
                        grandchildren)


def test_end_of_file_on_the_request_pipe_stops_every_step_and_leaves_nothing_behind(
        zygote, tmp_path, subreaper):
    z = zygote(grace=0.3)
    grandchildren = _start_stubborn_steps(z, tmp_path)
    z.close_requests()  # what the agent's death looks like from here
    assert z.wait() == 0
    started = z.started.values()
    assert_nothing_left([s.pid for s in started], [s.pgid for s in started],
                        grandchildren)


AGENT = """
import os, subprocess, sys, time
from fleet.wire.framing import read_message, write_message
from fleet.wire.messages import Hello, Launch
req_r, req_w = os.pipe(); resp_r, resp_w = os.pipe()
z = subprocess.Popen([sys.executable, "-m", "fleet.node.zygote", "--fd-in", str(req_r),
                      "--fd-out", str(resp_w), "--grace", "0.3", "--preload", "steps"],
                     pass_fds=(req_r, resp_w))
while not isinstance(read_message(resp_r), Hello):
    pass
wd = sys.argv[1]
write_message(req_w, Launch("s", 1, "call", "steps:sleep_with_grandchild", {}, None,
                            (), (), 0, wd, wd + "/log", wd))
started = read_message(resp_r)
print(z.pid, started.pid, flush=True)
time.sleep(60)
"""


def test_a_zygote_whose_agent_is_killed_stops_its_steps_and_exits(tmp_path, subreaper):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(TESTS)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    agent = subprocess.Popen([sys.executable, "-c", AGENT, str(tmp_path / "s")],
                             stdout=subprocess.PIPE, text=True, env=env,
                             start_new_session=True)
    try:
        ready, _, _ = select.select([agent.stdout], [], [], TIMEOUT)
        assert ready, "the agent never started its step"
        zygote_pid, step_pid = map(int, agent.stdout.readline().split())
        grandchild = read_json_when_there(tmp_path / "s/pids.json")["grandchild"]
        agent.kill()
        agent.wait(timeout=TIMEOUT)
        # The zygote is orphaned to us (the subreaper); it must finish on its own.
        deadline = time.monotonic() + TIMEOUT
        while os.waitpid(zygote_pid, os.WNOHANG)[0] == 0:
            assert time.monotonic() < deadline, "the zygote outlived its agent"
            time.sleep(0.01)
        assert_nothing_left([zygote_pid, step_pid], [step_pid], [grandchild])
    finally:
        try:
            os.killpg(agent.pid, signal.SIGKILL)
        except OSError:
            pass
        agent.wait(timeout=TIMEOUT)
        agent.stdout.close()


# -- what the node has --------------------------------------------------------------


def test_usable_cores_are_allowed_cpus_one_per_physical_core():
    cores = probe.usable_cores()
    assert cores and list(cores) == sorted(set(cores))
    assert set(cores) <= os.sched_getaffinity(0)


def test_node_memory_is_positive_and_at_most_what_meminfo_says_is_available():
    with open("/proc/meminfo") as f:
        total = next(int(l.split()[1]) * 1024 for l in f if l.startswith("MemTotal:"))
    assert 0 < probe.node_memory() <= total


def test_visible_gpus_come_from_the_first_variable_that_is_set():
    env = {"ROCR_VISIBLE_DEVICES": "2,3", "ZE_AFFINITY_MASK": "0"}
    assert probe.visible_gpus(environ=env) == (2, 3)
    assert probe.visible_gpus(environ={}) == ()
    assert probe.visible_gpus(environ={"CUDA_VISIBLE_DEVICES": ""}) == ()
    assert probe.visible_gpus(environ={"CUDA_VISIBLE_DEVICES": "1,-1,2"}) == (1,)
    with pytest.raises(ValueError, match="ZE_AFFINITY_MASK"):
        probe.visible_gpus(environ={"ZE_AFFINITY_MASK": "0.1"})
