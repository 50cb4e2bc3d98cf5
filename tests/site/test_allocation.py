"""The allocation, read from the job's environment: hostlist expressions, PBS node
files, Slurm/PBS/no batch system, clear errors — and proof that neither reading it nor
starting a fleet on it asks the batch system anything but, once at the start, when the
job ends (its commands are replaced by stubs that leave a mark and fail)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fleet.site.allocation import (Allocation, AllocationError, Answer, AtStart, at_start, end_time, expand_hostlist,
                                   from_environment, read_nodefile, refusal)

REPO = Path(__file__).resolve().parents[2]
BATCH_COMMANDS = ("sbatch", "squeue", "scontrol", "sinfo", "sacct", "salloc", "scancel",
                  "qstat", "qsub", "pbsnodes", "qmgr")


# --- hostlist expressions ----------------------------------------------------------------------

@pytest.mark.parametrize("expr, nodes", [
    ("nid[001-003,007]", ["nid001", "nid002", "nid003", "nid007"]),
    ("nid001", ["nid001"]),
    ("node[1-2]", ["node1", "node2"]),
    ("nid[008-010]", ["nid008", "nid009", "nid010"]),
    ("nid[001-002],gpu[10-11]", ["nid001", "nid002", "gpu10", "gpu11"]),
    ("login1,nid[01-02],bigmem", ["login1", "nid01", "nid02", "bigmem"]),
    ("x1000c0s[0-1]b0n[0-1]", ["x1000c0s0b0n0", "x1000c0s0b0n1", "x1000c0s1b0n0", "x1000c0s1b0n1"]),
    ("n[1-2]-ib", ["n1-ib", "n2-ib"]),
])
def test_a_hostlist_expression_expands_to_its_nodes_in_order(expr, nodes):
    assert expand_hostlist(expr) == nodes


@pytest.mark.parametrize("expr", ["nid[001-", "nid[3-1]", "nid[a-c]"])
def test_a_malformed_hostlist_is_an_error_quoting_it(expr):
    with pytest.raises(AllocationError) as e:
        expand_hostlist(expr)
    assert f"cannot read the hostlist {expr!r}" in str(e.value)


# --- PBS node files ----------------------------------------------------------------------------

def test_a_pbs_node_file_gives_each_node_once_in_order_of_first_mention(tmp_path):
    f = tmp_path / "nodefile"
    f.write_text("x3\nx3\nx3\nx1\nx1\n\nx2  \nx3\n  x1\nx2\n")
    assert read_nodefile(f) == ["x3", "x1", "x2"]


def test_an_empty_pbs_node_file_has_no_nodes(tmp_path):
    (tmp_path / "nodefile").write_text("\n")
    assert read_nodefile(tmp_path / "nodefile") == []


def test_a_missing_pbs_node_file_is_an_error_naming_it(tmp_path):
    with pytest.raises(AllocationError, match=rf"cannot read the node file {tmp_path / 'absent'}"):
        read_nodefile(tmp_path / "absent")


# --- from the environment ----------------------------------------------------------------------

def test_a_slurm_job_is_read_from_its_job_id_and_nodelist():
    env = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "nid[001-003,007]", "SLURM_NODELIST": "ignored[1-9]"}
    assert from_environment(env) == Allocation("slurm", "4242", ("nid001", "nid002", "nid003", "nid007"))


def test_an_older_slurm_that_sets_only_slurm_nodelist_is_read_too():
    env = {"SLURM_JOB_ID": "7", "SLURM_NODELIST": "node[1-2]"}
    assert from_environment(env) == Allocation("slurm", "7", ("node1", "node2"))


def test_a_slurm_job_id_without_a_nodelist_is_an_error_asking_if_this_is_inside_the_job():
    with pytest.raises(AllocationError, match="SLURM_JOB_ID is set but SLURM_JOB_NODELIST is not"):
        from_environment({"SLURM_JOB_ID": "7"})


def test_a_bad_slurm_nodelist_is_an_error_quoting_it():
    with pytest.raises(AllocationError, match=r"cannot read the hostlist 'nid\[001-'"):
        from_environment({"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "nid[001-"})


def test_a_pbs_job_is_read_from_its_node_file(tmp_path):
    f = tmp_path / "aurora.nodes"
    f.write_text("x4102c1s0b0n0.hsn.cm.aurora.alcf.anl.gov\n" * 3 + "x4102c1s1b0n0.hsn.cm.aurora.alcf.anl.gov\n" * 3)
    env = {"PBS_JOBID": "123.aurora-pbs-0001", "PBS_NODEFILE": str(f)}
    assert from_environment(env) == Allocation("pbs", "123.aurora-pbs-0001", (
        "x4102c1s0b0n0.hsn.cm.aurora.alcf.anl.gov", "x4102c1s1b0n0.hsn.cm.aurora.alcf.anl.gov"))


def test_a_pbs_job_without_a_node_file_is_an_error():
    with pytest.raises(AllocationError, match="PBS_JOBID is set but PBS_NODEFILE is not"):
        from_environment({"PBS_JOBID": "123"})


def test_a_pbs_node_file_that_is_gone_is_an_error_naming_it(tmp_path):
    with pytest.raises(AllocationError, match="cannot read the node file"):
        from_environment({"PBS_JOBID": "123", "PBS_NODEFILE": str(tmp_path / "gone")})


def test_an_empty_pbs_node_file_is_an_error_naming_it_not_outside_a_batch_job(tmp_path):
    # Before 2026-12-07 it gave no nodes, and fleet up said "this is not inside a batch job".
    (tmp_path / "nf").write_text("\n")
    with pytest.raises(AllocationError, match=r"PBS_JOBID is set but the node file .*nf \(PBS_NODEFILE\) lists no node"):
        from_environment({"PBS_JOBID": "123", "PBS_NODEFILE": str(tmp_path / "nf")})


@pytest.mark.parametrize("env", [{}, {"SLURM_JOB_ID": ""}, {"PBS_JOBID": ""}, {"HOME": "/root", "SLURM_CONF": "/etc/slurm/slurm.conf"}])
def test_outside_a_batch_job_the_allocation_is_none_with_no_nodes(env):
    assert from_environment(env) == Allocation("none", "", ())


def test_slurm_wins_when_both_batch_systems_seem_present(tmp_path):
    (tmp_path / "nf").write_text("p1\n")
    env = {"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "s1", "PBS_JOBID": "2", "PBS_NODEFILE": str(tmp_path / "nf")}
    assert from_environment(env).system == "slurm"


def test_with_no_mapping_given_the_process_environment_is_read(monkeypatch):
    for k in list(os.environ):
        if k.startswith(("SLURM_", "PBS_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("SLURM_JOB_ID", "99")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "c[1-2]")
    assert from_environment() == Allocation("slurm", "99", ("c1", "c2"))


# --- the batch system is never asked -----------------------------------------------------------

def _stub(path: Path, marks: Path) -> None:
    path.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        printf '%s\\n' "$0 $*" >> {marks}/{path.name}
        echo "{path.name}: this test's stub: the batch system must not be asked" >&2
        exit 1
        """))
    path.chmod(0o755)


@pytest.fixture
def batch_stubs(tmp_path, monkeypatch):
    """Failing stubs named like the batch system's commands, first on PATH. Each leaves a
    file in `marks` naming how it was called. Returns (bin dir, marks dir, environment)."""
    bindir, marks = tmp_path / "stub-bin", tmp_path / "marks"
    bindir.mkdir()
    marks.mkdir()
    for name in BATCH_COMMANDS:
        _stub(bindir / name, marks)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_", "FLEET_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return bindir, marks, env


def called(marks: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(marks.iterdir())}


def assert_coordinator_gone(run_dir: Path, timeout: float = 10.0) -> None:
    """The coordinator `fleet up` started (its pid is in the event stream) has exited."""
    import psutil
    ev = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    [pid] = [e["pid"] for e in ev if e["kind"] == "fleet_starting"]
    deadline = time.monotonic() + timeout
    while True:
        try:
            alive = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            alive = False
        if not alive:
            return
        assert time.monotonic() < deadline, f"the coordinator {pid} outlived fleet up"
        time.sleep(0.05)


@pytest.fixture
def no_subprocesses(monkeypatch):
    """Any attempt to start a process, by any route Python offers, fails the test."""
    def refuse(*a, **k):
        raise AssertionError(f"a process was started: {a[:1]}")
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    for name in ("system", "posix_spawn", "posix_spawnp", "execv", "execve", "execvp", "execvpe", "fork"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, refuse)


def test_the_stubs_really_stand_in_for_the_batch_system_and_mark_their_calls(batch_stubs):
    # So that "no marks" below means "not called", not "the stubs do not work".
    _, marks, env = batch_stubs
    for name in ("scontrol", "qstat"):
        p = subprocess.run([name, "show", "hostnames"], env=env, capture_output=True, text=True, timeout=10)
        assert p.returncode == 1 and "must not be asked" in p.stderr
    assert set(called(marks)) == {"scontrol", "qstat"}
    assert "show hostnames" in called(marks)["scontrol"]


def test_reading_a_slurm_or_pbs_allocation_calls_no_batch_command_and_starts_no_process(
        batch_stubs, no_subprocesses, tmp_path):
    _, marks, _ = batch_stubs
    assert from_environment({"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "nid[001-003,007],login[1-2]"}).nodes == (
        "nid001", "nid002", "nid003", "nid007", "login1", "login2")
    (tmp_path / "nf").write_text("a\nb\na\n")
    assert from_environment({"PBS_JOBID": "6", "PBS_NODEFILE": str(tmp_path / "nf")}).nodes == ("a", "b")
    with pytest.raises(AllocationError):
        from_environment({"SLURM_JOB_ID": "5"})
    assert called(marks) == {}


def _run(argv, env, cwd, timeout=60.0):
    """Run to completion in its own process group; kill the group on timeout."""
    p = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"{argv} timed out\nstdout:\n{out}\nstderr:\n{err}")
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # anything it left in its group
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def test_fleet_validate_inside_a_slurm_job_calls_no_batch_command(batch_stubs, tmp_path):
    _, marks, env = batch_stubs
    env.update(SLURM_JOB_ID="5", SLURM_JOB_NODELIST="nid[001-002]")
    suite = tmp_path / "s.toml"
    suite.write_text('[suite]\nname = "v"\n[[steps]]\nid = "a"\ncommand = "true"\n'
                     '[[steps]]\nid = "m"\nmpi = true\nranks = 4\ncommand = ["model"]\n')
    r = _run([sys.executable, "-m", "fleet", "validate", str(suite), "--nodes", "2", "--cores-per-node", "2"],
             env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "is valid: 2 steps" in r.stdout
    assert called(marks) == {}


def _agent_launcher_stub(bindir: Path, name: str, record: Path) -> None:
    """The agents' launcher (srun or mpiexec) replaced by one that records its argv as
    JSON and fails, so that the coordinator reads the allocation, renders the launch,
    and stops without any agent."""
    (bindir / name).write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import json, sys
        with open({str(record)!r}, "a") as f:
            f.write(json.dumps(sys.argv[1:]) + "\\n")
        sys.exit(1)
        """))
    (bindir / name).chmod(0o755)


def test_fleet_up_in_a_slurm_job_reads_the_nodes_from_the_environment_and_asks_slurm_only_its_state_and_end_once(
        batch_stubs, tmp_path):
    bindir, marks, env = batch_stubs
    record = tmp_path / "srun.argv"
    _agent_launcher_stub(bindir, "srun", record)
    env.update(SLURM_JOB_ID="4242", SLURM_JOB_NODELIST="nid[001-002,007]", SLURMD_NODENAME="nid001")
    run_dir = tmp_path / "run"
    t0 = time.monotonic()
    r = _run([sys.executable, "-m", "fleet", "up", "--run-dir", str(run_dir), "--timeout", "40"], env, tmp_path)
    assert r.returncode != 0
    assert time.monotonic() - t0 < 30, "the failed agent launcher should stop fleet up at once"
    assert "srun exited with status 1 before every agent joined" in r.stderr, r.stderr
    [argv] = [json.loads(line) for line in record.read_text().splitlines()]
    assert argv[:10] == ["--overlap", "--mpi=none", "--cpu-bind=none", "--kill-on-bad-exit=0", "--export=ALL",
                        "-N", "3", "-n", "3", "--ntasks-per-node=1"]
    i = argv.index("--node-from")
    assert argv[i:i + 2] == ["--node-from", "slurm"] and argv[-4:-2] == ["--gpu-var", "CUDA_VISIBLE_DEVICES"], argv
    assert called(marks) == {"squeue": f"{bindir}/squeue -h -j 4242 -t all -o %T %e\n"}
    ev = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["nodes"] for e in ev if e["kind"] == "fleet_starting"] == [3]
    assert_coordinator_gone(run_dir)


def test_fleet_up_in_a_pbs_job_starts_agents_on_the_de_duplicated_node_file_and_asks_pbs_only_its_job_once(
        batch_stubs, tmp_path):
    bindir, marks, env = batch_stubs
    record = tmp_path / "mpiexec.argv"
    _agent_launcher_stub(bindir, "mpiexec", record)
    (tmp_path / "nodes").write_text("x2\nx2\nx1\nx1\nx2\n")
    env.update(PBS_JOBID="77.pbs", PBS_NODEFILE=str(tmp_path / "nodes"))
    r = _run([sys.executable, "-m", "fleet", "up", "--machine", "aurora", "--run-dir", str(tmp_path / "run"),
              "--timeout", "40"], env, tmp_path)
    assert r.returncode != 0
    assert "mpiexec exited with status 1 before every agent joined" in r.stderr, r.stderr
    [argv] = [json.loads(line) for line in record.read_text().splitlines()]
    assert argv[:6] == ["-n", "2", "--ppn", "1", "--hosts", "x2,x1"]
    assert argv[argv.index("--hold-back") + 1] == "0,52"
    i = argv.index("--node-from")
    assert argv[i:i + 4] == ["--node-from", "rank", "--node-list", "x2,x1"], argv
    assert called(marks) == {"qstat": f"{bindir}/qstat -f 77.pbs\n"}
    assert_coordinator_gone(tmp_path / "run")


def test_a_batch_machine_outside_a_batch_job_is_refused_before_anything_starts(batch_stubs, tmp_path):
    bindir, marks, env = batch_stubs
    record = tmp_path / "srun.argv"
    _agent_launcher_stub(bindir, "srun", record)
    r = _run([sys.executable, "-m", "fleet.control.coordinator", "--run-dir", str(tmp_path / "run"), "--machine", "slurm"],
             env, tmp_path)
    assert r.returncode == 2
    assert "machine slurm starts agents with slurm, but this is not inside a batch job" in r.stderr
    assert not record.exists()
    assert called(marks) == {}


# --- when the job ends: once, at the start ------------------------------------------------------

def test_fleet_up_with_an_end_given_or_slurms_end_in_the_environment_asks_slurm_only_whether_the_job_is_live(
        batch_stubs, tmp_path):
    # (before 2026-12-07 nothing was asked: an ended job's variables were taken for a live job)
    bindir, marks, env = batch_stubs
    _agent_launcher_stub(bindir, "srun", tmp_path / "srun.argv")
    env.update(SLURM_JOB_ID="4242", SLURM_JOB_NODELIST="nid001", SLURMD_NODENAME="nid001")
    for n, (extra, more_env) in enumerate(((["--walltime", "2h"], {}),
                                           ([], {"SLURM_JOB_END_TIME": str(int(time.time()) + 600)}))):
        run_dir = tmp_path / f"run{len(extra)}"
        r = _run([sys.executable, "-m", "fleet", "up", "--run-dir", str(run_dir), "--timeout", "40", *extra],
                 {**env, **more_env}, tmp_path)
        assert r.returncode != 0 and "srun exited with status 1" in r.stderr, r.stderr
        # Once per fleet up (the stub fails: not known whether the job is live, so it starts)
        assert called(marks) == {"squeue": f"{bindir}/squeue -h -j 4242 -t all -o %T %e\n" * (n + 1)}
        assert_coordinator_gone(run_dir)
    assert "(SLURM_JOB_END_TIME); drain point" in (tmp_path / "run0" / "coordinator.log").read_text()
    assert "(given); drain point" in (tmp_path / "run2" / "coordinator.log").read_text()


def _said(out: str, rc: int = 0, err: str = ""):
    return lambda argv: Answer(rc, out, err)


def test_slurms_state_and_end_come_from_one_squeue_query_else_the_end_from_the_environment():
    slurm = Allocation("slurm", "5", ("n1",))
    asked = []

    def query(argv):
        asked.append(argv)
        return Answer(0, "RUNNING 2030-01-02T03:04:05\n")
    end, source = end_time(slurm, {"SLURM_JOB_END_TIME": "1900000000"}, query)
    assert asked == [["squeue", "-h", "-j", "5", "-t", "all", "-o", "%T %e"]] and source == "squeue -j 5"
    assert time.localtime(end)[:6] == (2030, 1, 2, 3, 4, 5)  # (Slurm's: a time limit changed since is in it)
    # The query failed: the environment's end; none there either: no end (and no drain).
    assert at_start(slurm, {"SLURM_JOB_END_TIME": "1900000000"}, lambda argv: None) == AtStart(
        1900000000.0, "SLURM_JOB_END_TIME")
    assert at_start(slurm, {}, _said("RUNNING N/A\n")) == AtStart(None, "Slurm gave no end time")
    assert at_start(slurm, {}, _said("", 1, "slurm_load_jobs error: Socket timed out\n")).gone == ""
    assert at_start(slurm, {}, lambda argv: None).end is None


@pytest.mark.parametrize("answer, gone", [
    (Answer(0, "COMPLETED 2026-12-07T12:12:50\n"), "that has ended (COMPLETED)"),
    (Answer(0, "CANCELLED 2026-12-07T12:12:50\n"), "that has ended (CANCELLED)"),
    (Answer(0, ""), "that squeue no longer lists"),
    (Answer(1, "", "slurm_load_jobs error: Invalid job id specified\n"),
     "that Slurm does not know (slurm_load_jobs error: Invalid job id specified)"),
])
def test_a_slurm_job_that_squeue_says_has_ended_or_does_not_know_is_refused_naming_the_variable(answer, gone):
    slurm = Allocation("slurm", "1363", ("n1",))
    at = at_start(slurm, {}, lambda argv: answer)
    assert at.gone == gone
    why = refusal(slurm, at)
    assert why.startswith(f"SLURM_JOB_ID=1363 names a Slurm job {gone}: variables left from an old job") and \
        "unset the SLURM_* variables" in why


@pytest.mark.parametrize("state", ["RUNNING", "COMPLETING", "SUSPENDED"])
def test_a_live_slurm_job_is_not_refused(state):
    slurm = Allocation("slurm", "5", ("n1",))
    assert refusal(slurm, at_start(slurm, {}, _said(f"{state} 2030-01-02T03:04:05\n"))) == ""


def test_a_job_end_already_past_is_refused_naming_where_it_came_from():
    slurm = Allocation("slurm", "5", ("n1",))
    at = at_start(slurm, {"SLURM_JOB_END_TIME": "1000"}, lambda argv: None)
    why = refusal(slurm, at, now=4600.0)
    assert "(SLURM_JOB_END_TIME), is already past" in why and "start nothing" in why
    assert refusal(slurm, at, now=999.0) == ""


def test_pbs_end_is_the_jobs_start_plus_its_walltime_from_one_qstat():
    pbs = Allocation("pbs", "7.pbs", ("n1",))
    out = ("Job Id: 7.pbs\n    job_state = R\n    stime = Wed Jan  2 03:04:05 2030\n"
           "    Resource_List.walltime = 01:30:00\n")
    at = at_start(pbs, {}, _said(out))
    assert at.source == "qstat -f 7.pbs" and time.localtime(at.end - 5400)[:6] == (2030, 1, 2, 3, 4, 5)
    assert at.gone == ""
    # Without qstat's answer, a walltime in the environment counts from now.
    assert end_time(pbs, {"PBS_WALLTIME": "60"}, lambda argv: None, now=100.0) == (160.0, "PBS walltime from now")
    assert end_time(pbs, {}, lambda argv: None)[0] is None
    assert end_time(Allocation("none", "", ()), {}) == (None, "not a batch job")


@pytest.mark.parametrize("answer, gone", [
    (Answer(0, "Job Id: 7.pbs\n    job_state = F\n"), "that has ended (job_state F: finished)"),
    (Answer(153, "", "qstat: Unknown Job Id 7.pbs\n"), "that PBS does not know (qstat: Unknown Job Id 7.pbs)"),
    (Answer(35, "", "qstat: 7.pbs Job has finished, use -x or -H to obtain historical job information\n"),
     "that has ended (qstat: 7.pbs Job has finished, use -x or -H to obtain historical job information)"),
])
def test_a_pbs_job_that_qstat_says_has_finished_or_does_not_know_is_refused_naming_the_variable(answer, gone):
    pbs = Allocation("pbs", "7.pbs", ("n1",))
    why = refusal(pbs, at_start(pbs, {}, lambda argv: answer))
    assert why.startswith(f"PBS_JOBID=7.pbs names a PBS job {gone}: ") and "unset the PBS_* variables" in why


def test_a_job_end_from_the_environment_already_past_is_refused_by_fleet_up_and_fleet_run_naming_it(
        batch_stubs, tmp_path):
    # (before 2026-12-07 the fleet came up drained: fleet run started nothing and exited 3,
    # which a job script that resubmits itself takes for "resubmit")
    _, _, env = batch_stubs  # (squeue fails, as an unreachable controller: whether the job is live is not known)
    env.update(SLURM_JOB_ID="4242", SLURM_JOB_NODELIST="nid001", SLURM_JOB_END_TIME=str(int(time.time()) - 3600))
    suite = tmp_path / "s.toml"
    suite.write_text('[suite]\nname = "past"\n[[steps]]\nid = "a"\ncommand = "true"\n')
    for argv in (["up", "--local"], ["run", str(suite)]):
        run_dir = tmp_path / argv[0]
        r = _run([sys.executable, "-m", "fleet", *argv, "--run-dir", str(run_dir), "--timeout", "40"],
                 {**env, "FLEET_MACHINE": "local"}, tmp_path)
        try:
            assert r.returncode == 2, (r.stdout, r.stderr)
            assert re.search(r"the job's end, \S+ \(SLURM_JOB_END_TIME\), is already past", r.stderr), r.stderr
            assert "nothing was started" in r.stderr and not (run_dir / "coordinator.log").exists()
        finally:
            if (run_dir / "fleet.json").exists():  # (the code before the fix: a fleet up)
                _run([sys.executable, "-m", "fleet", "down", "--run-dir", str(run_dir)], env, tmp_path)
    # Given a later end, the job's is not looked at.
    r = _run([sys.executable, "-m", "fleet", "up", "--local", "--run-dir", str(tmp_path / "given"), "--timeout",
              "40", "--walltime", "1h"], env, tmp_path)
    assert r.returncode == 0, r.stderr
    _run([sys.executable, "-m", "fleet", "down", "--run-dir", str(tmp_path / "given")], env, tmp_path)


HET = {"SLURM_JOB_ID": "1366", "SLURM_HET_SIZE": "2", "SLURM_JOB_NODELIST_HET_GROUP_0": "node1",
       "SLURM_JOB_NODELIST_HET_GROUP_1": "node2", "SLURM_NODELIST_HET_GROUP_0": "node1"}  # (as salloc -N1 : -N1 sets them)


def test_a_heterogeneous_slurm_job_is_refused_as_not_supported_not_as_outside_the_job():
    # (before 2026-12-07: "SLURM_JOB_ID is set but SLURM_JOB_NODELIST is not: is this running inside the job?")
    with pytest.raises(AllocationError) as e:
        from_environment(HET)
    assert str(e.value).startswith("SLURM_JOB_ID=1366 is a heterogeneous Slurm job (SLURM_JOB_NODELIST_HET_GROUP_0, "
                                   "SLURM_JOB_NODELIST_HET_GROUP_1): not supported")
    assert "inside the job" not in str(e.value)


def test_a_heterogeneous_sbatch_job_is_refused_though_slurm_sets_its_first_components_nodelist():
    # sbatch sets SLURM_JOB_NODELIST to the first component's nodes: a fleet came up there,
    # the other components idle, nothing said (found on the real Slurm on 2026-12-07).
    with pytest.raises(AllocationError, match=r"^SLURM_JOB_ID=1366 is a heterogeneous Slurm job .*not supported"):
        from_environment({**HET, "SLURM_JOB_NODELIST": "node1", "SLURM_NODELIST": "node1"})
    with pytest.raises(AllocationError, match=r"heterogeneous Slurm job \(SLURM_HET_SIZE\)"):
        from_environment({"SLURM_JOB_ID": "7", "SLURM_HET_SIZE": "2", "SLURM_JOB_NODELIST": "node1"})


def test_fleet_up_in_a_real_heterogeneous_sbatch_job_says_it_is_not_supported(tmp_path):
    from cluster import skip_unless_slurm
    skip_unless_slurm(2)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_", "FLEET_"))}
    env["PYTHONPATH"] = str(REPO)
    script = tmp_path / "het.sh"
    script.write_text(f"#!/bin/bash\n{sys.executable} -m fleet up --run-dir {tmp_path / 'run'} --timeout 40\n")
    out = tmp_path / "het.out"
    name = f"fleet-het-{os.getpid()}"
    try:
        r = _run(["sbatch", "--wait", "-o", str(out), "-N1", "-t", "2", "-J", name, ":", "-N1", str(script)],
                 env, tmp_path, timeout=150)
    finally:
        subprocess.run(["scancel", "--name", name], timeout=30, capture_output=True)
    if "Unable to allocate resources" in r.stderr or not out.exists():
        pytest.skip(f"Slurm busy or the job did not run: {r.stderr.strip()}")
    text = out.read_text()
    assert "is a heterogeneous Slurm job (SLURM_JOB_NODELIST_HET_GROUP_0, " in text, text
    assert "nothing was started" in text and r.returncode != 0, (r.returncode, text)
    assert not (tmp_path / "run" / "fleet.json").exists()


def test_fleet_up_in_a_real_heterogeneous_slurm_job_says_it_is_not_supported(tmp_path):
    from cluster import skip_unless_slurm
    skip_unless_slurm(2)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_", "FLEET_"))}
    env["PYTHONPATH"] = str(REPO)
    r = _run(["salloc", "-I60", "-N1", "-t", "2", "-J", "fleet-het", ":", "-N1", sys.executable, "-m", "fleet", "up",
              "--run-dir", str(tmp_path / "run"), "--timeout", "40"], env, tmp_path, timeout=120)
    if "Unable to allocate resources" in r.stderr:
        pytest.skip(f"Slurm busy: {r.stderr.strip().splitlines()[-1]}")
    assert "is a heterogeneous Slurm job (SLURM_JOB_NODELIST_HET_GROUP_0, " in r.stderr, r.stderr
    assert "nothing was started" in r.stderr and r.returncode == 2, r.stderr
