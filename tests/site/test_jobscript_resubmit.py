"""jobscripts/slurm-resubmit.sbatch, the real script, end to end: its first "job" runs
with bash outside Slurm (so that this test can signal its shell as Slurm's
`--signal=B:USR1@300` would), and the job it submits of itself when `fleet run` exits 3
runs under the real local Slurm (tests/cluster/slurm-up.sh) and finishes the suite.
In one case the first job is a real Slurm job too (`sbatch -N 2 -t 10`), its warning
sent by Slurm (`scancel --batch --signal=USR1`): there the batch shell's HOSTNAME is
the node's name, not the host's, and the job it submits must ask for its nodes, time
limit and partition (they were on sbatch's command line, in no copy of the script).

Slurm may send its warning up to a minute early, so in a short job it can come while
`fleet up` still runs: the script must neither die of it (bash's default action on
SIGUSR1) nor lose it; nor may it kill `fleet run` that has just started. The cases: the
warning while `fleet run` runs a step, while `fleet up` runs, and the moment `fleet run`
starts. The chain is held to two jobs (FLEET_MAX_JOBS=2), and every Slurm job
it starts carries a name of this test's own, by which it is cancelled if still there.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import textwrap
import time
import uuid
from pathlib import Path

import psutil
import pytest

from cluster import TERMINAL_STATES, _job_fields, _run, requires_slurm, stop_coordinators
from fleetharness import REPO, assert_nothing_left, env, events, fleet_command, living, wait_for

from fleet.wire import records

pytestmark = [requires_slurm]

SCRIPT = REPO / "jobscripts" / "slurm-resubmit.sbatch"
STEPS = ("quick", "sleepy", "after")
FIRST_JOB_TIMEOUT = 60.0    # bash running the script, until it exits; normally ~5 s
SECOND_JOB_TIMEOUT = 90.0   # the job it submitted, queueing included; normally ~5 s


class Chain:
    """One chain of jobs in `work`: the first is the script under bash (its own process
    group), the next ones Slurm jobs named `name`."""

    def __init__(self, work: Path):
        self.work, self.run_dir, self.suite = work, work / "run", work / "suite.toml"
        self.name = f"fleet-resubmit-test-{uuid.uuid4().hex[:10]}"
        self.out = work / "job1.out"
        self.bash: subprocess.Popen | None = None
        bindir = work / "bin"
        fleet_command(bindir)  # `fleet` on PATH is this test's interpreter (the Slurm job inherits PATH)
        # sleepy writes down the job it runs in and sleeps in the first (until the drain stops it).
        self.suite.write_text(textwrap.dedent(f"""
            [suite]
            name = "resubmit"
            [[steps]]
            id = "quick"
            command = "true"
            [[steps]]
            id = "sleepy"
            command = 'n=${{FLEET_JOB_NUMBER:-1}}; echo $n >> {work}/sleepy.jobs; [ $n -ge 2 ] || sleep 120'
            [[steps]]
            id = "after"
            command = "true"
            deps = ["sleepy"]
            """))
        e = {k: v for k, v in env().items() if not k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "FLEET_"))}
        e.update(PATH=f"{bindir}{os.pathsep}{e.get('PATH', '')}", FLEET_MAX_JOBS="2",
                 SBATCH_JOB_NAME=self.name)  # (sbatch's environment wins over the script's #SBATCH lines)
        self.env = e

    def start(self) -> subprocess.Popen:
        with open(self.out, "w") as out:
            self.bash = subprocess.Popen(["bash", str(SCRIPT), str(self.suite), str(self.run_dir)], cwd=self.work,
                                         env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        return self.bash

    def first_job_ends(self) -> int:
        try:
            return self.bash.wait(timeout=FIRST_JOB_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the script did not end within {FIRST_JOB_TIMEOUT:g} s\n{self.report()}") from None

    def submitted(self) -> str:
        """The id of the job the first one submitted (sbatch's line in its output), after
        its fleet went down: the next job may start at once and must find the run
        directory free (a local Slurm with idle nodes starts it within a second)."""
        text = self.out.read_text()
        m = re.search(r"^Submitted batch job (\d+)$", text, re.M)
        assert m, f"the script submitted no job\n{self.report()}"
        down = re.search(r"^fleet down: ", text, re.M)
        assert down and down.start() < m.start(), f"the next job was submitted before fleet down\n{self.report()}"
        return m[1]

    def second_job_ends(self, jobid: str) -> dict[str, str]:
        """The job's fields once it ended (polled with a deadline)."""
        return wait_for(lambda: (f := _job_fields(jobid)) and f.get("JobState") in TERMINAL_STATES and f,
                        SECOND_JOB_TIMEOUT, f"Slurm job {jobid} to end")

    def submit_first(self, *sbatch_args: str) -> str:
        """The first job as a real Slurm job (its output: fleet-JOBID.out); its id."""
        p = subprocess.run(["sbatch", "--parsable", *sbatch_args, str(SCRIPT), str(self.suite), str(self.run_dir)],
                           cwd=self.work, env=self.env, capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        jobid = p.stdout.strip().split(";")[0]
        self.out = self.work / f"fleet-{jobid}.out"
        return jobid

    def report(self) -> str:
        parts = [f"job 1 output:\n{_read(self.out)}"]
        parts += [f"{p.name}:\n{_read(p)}" for p in sorted(self.work.glob("fleet-*.out"))]
        return "\n".join(parts + [f"coordinator log (tail):\n{_read(self.run_dir / 'coordinator.log')[-3000:]}"])

    def clean_up(self) -> None:
        """Whatever is left: the Slurm jobs by name; bash's process group (a `fleet up` or
        `fleet run` may outlive a bash that died); then the coordinators of this run
        directory (SIGTERM: they stop their agents and steps), SIGKILL if they linger."""
        _run(["scancel", "--name", self.name], timeout=15)
        deadline = time.monotonic() + 30  # (no raising here: the test's own failure is the one to see)
        while time.monotonic() < deadline and _run(["squeue", "-h", "-n", self.name, "-o", "%i"])[1].strip():
            time.sleep(0.2)
        if self.bash is not None:
            try:
                os.killpg(self.bash.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.bash.wait(timeout=30)
        stop_coordinators(self.run_dir)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError as e:
        return f"({e})"


def first_fleet(run_dir: Path) -> list[dict]:
    """The first job's fleet's events (those before the second fleet's start)."""
    ev = events(run_dir)
    starts = [i for i, e in enumerate(ev) if e["kind"] == "fleet_starting"]
    return ev[:starts[1]] if len(starts) > 1 else ev


def assert_drained_by_the_warning(chain: Chain, code: int, interrupted: bool | None) -> None:
    """The first job: drained by the warning, exit 3, submitted the next (`interrupted`:
    whether quick succeeded and sleepy was interrupted, or nothing started; None: either)."""
    report = chain.report()
    assert code == 3, f"the script exited {code}\n{report}"
    ev = first_fleet(chain.run_dir)
    [drained] = [e for e in ev if e["kind"] == "drained"]
    assert drained["reason"] == "the batch system's warning signal (SIGUSR1)", report
    exits = {e["step"]: e["outcome"] for e in ev if e["kind"] == "exit"}
    if interrupted is None:
        assert set(exits.values()) <= {"succeeded", "interrupted"}, report
    else:
        assert exits == ({"quick": "succeeded", "sleepy": "interrupted"} if interrupted else {}), report
    assert [e["kind"] for e in ev if e["kind"] in ("not_started", "fleet_down")] == ["not_started", "fleet_down"]
    out = chain.out.read_text()
    assert "the batch system's warning came: the fleet drains (SIGUSR1 to its coordinator" in out, report
    assert "submitting job 2" in out, report
    # `fleet down` (the script's EXIT trap) left nothing of the first fleet.
    pids = {e["pid"] for e in ev if e["kind"] in ("fleet_starting", "started")}
    pids |= {p for e in ev if e["kind"] == "node_joined" for p in (e["pid"], e["zygote_pid"])}
    assert not living(pids), living(pids)


def assert_the_second_job_finished_the_suite(chain: Chain, jobid: str, sleepy_ran_in: list[str] | None,
                                            command: str | None = str(SCRIPT)) -> dict[str, str]:
    """Job `jobid`, the script submitted by itself, ran under Slurm and finished the suite
    (`sleepy_ran_in`: the jobs sleepy started in; None: in the second, maybe the first too;
    `command`: the script it ran, None: Slurm's copy of the first job's); its fields."""
    fields = chain.second_job_ends(jobid)
    report = chain.report()
    assert (fields["JobState"], fields.get("ExitCode")) == ("COMPLETED", "0:0"), f"{fields}\n{report}"
    assert command is None or fields.get("Command") == command, fields  # the script submitted itself
    assert f"(job {jobid}, 2 of at most 2, on " in _read(chain.work / f"fleet-{jobid}.out"), report
    for s in STEPS:  # each succeeded once; nothing counted a failed attempt or stops a rerun
        assert [a["outcome"] for a in records.attempts(chain.run_dir, s)] == ["succeeded"], (s, report)
        assert records.read_final(chain.run_dir, s) is None, s
    ev = events(chain.run_dir)
    assert not [e for e in ev if e["kind"] in ("retry", "blocked")], report
    jobs = _read(chain.work / "sleepy.jobs").split()
    assert jobs == sleepy_ran_in if sleepy_ran_in is not None else jobs in (["2"], ["1", "2"]), (jobs, report)
    assert_nothing_left(chain.run_dir)
    return fields


def test_the_warning_while_fleet_run_runs_drains_the_fleet_exits_3_and_the_next_job_finishes_the_suite(tmp_path):
    chain = Chain(tmp_path)
    try:
        bash = chain.start()
        wait_for(lambda: bash.poll() is not None or {("started", "sleepy"), ("exit", "quick")}
                 <= {(e["kind"], e.get("step")) for e in events(chain.run_dir)}, 30, "sleepy running, quick done")
        assert bash.poll() is None, chain.report()
        os.kill(bash.pid, signal.SIGUSR1)  # as Slurm's --signal=B:USR1@300 does
        assert_drained_by_the_warning(chain, chain.first_job_ends(), interrupted=True)
        assert_the_second_job_finished_the_suite(chain, chain.submitted(), ["1", "2"])
    finally:
        chain.clean_up()


def test_a_fleet_lost_while_fleet_run_runs_is_brought_up_again_in_the_same_job_and_finishes_the_suite(tmp_path):
    # The coordinator killed (as the OOM killer might): `fleet run` exits 5, and the
    # script brings a fleet up again in this allocation instead of ending the job.
    chain = Chain(tmp_path)
    chain.suite.write_text(chain.suite.read_text().replace(
        "[ $n -ge 2 ] || sleep 120", f"[ -e {tmp_path}/sleepy.once ] || {{ touch {tmp_path}/sleepy.once; sleep 120; }}"))
    try:
        bash = chain.start()
        wait_for(lambda: bash.poll() is not None or {("started", "sleepy"), ("exit", "quick")}
                 <= {(e["kind"], e.get("step")) for e in events(chain.run_dir)}, 30, "sleepy running, quick done")
        assert bash.poll() is None, chain.report()
        [first] = [e for e in events(chain.run_dir) if e["kind"] == "fleet_starting"]
        os.kill(first["pid"], signal.SIGKILL)
        code = chain.first_job_ends()
        report = chain.report()
        assert code == 0, f"the script exited {code}\n{report}"
        out = chain.out.read_text()
        assert "the fleet was lost (fleet run exited 5): bringing a fleet up again (1 of at most 2)" in out, report
        assert "Submitted batch job" not in out, report  # finished in this job: nothing resubmitted
        ev = events(chain.run_dir)
        assert len([e for e in ev if e["kind"] == "fleet_starting"]) == 2, report
        # sleepy was running when its fleet was lost: that attempt is `lost`, the next succeeded.
        got = {s: [a["outcome"] for a in records.attempts(chain.run_dir, s)] for s in STEPS}
        assert got == {"quick": ["succeeded"], "sleepy": ["lost", "succeeded"], "after": ["succeeded"]}, (got, report)
        assert [e["step"] for e in ev if e["kind"] == "skipped"] == ["quick"], report
        assert_nothing_left(chain.run_dir)
    finally:
        chain.clean_up()


@pytest.mark.parametrize("during", ["up", "run"])
def test_a_warning_that_comes_while_the_fleet_comes_up_is_not_fatal_and_drains_the_fleet_once_it_is_up(
        tmp_path, during):
    # "up": while `fleet up` runs (bash's default action on USR1 would kill the batch
    # shell); "run": the moment `fleet run` starts, before it catches the signal (its
    # default action would kill it, were the warning passed to it).
    chain = Chain(tmp_path)
    try:
        bash = chain.start()
        child = wait_for(lambda: bash.poll() is not None or _fleet_child(bash.pid, during), 20,
                         f"`fleet {during}` to start")
        assert bash.poll() is None, chain.report()
        os.kill(bash.pid, signal.SIGUSR1)
        if during == "up":  # (still running after the signal: it came during `fleet up`)
            assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE, "`fleet up` ended first"
        # (With "run", whether the submission reached the fleet before the drain is a race: either is right.)
        assert_drained_by_the_warning(chain, chain.first_job_ends(), interrupted=False if during == "up" else None)
        assert_the_second_job_finished_the_suite(chain, chain.submitted(), ["2"] if during == "up" else None)
    finally:
        chain.clean_up()


def test_under_slurm_slurms_warning_reaches_the_coordinator_and_the_next_job_asks_for_the_same_nodes_and_time(
        tmp_path):
    chain = Chain(tmp_path)
    # A user's SLURM_TIME_FORMAT (the job gets it with the rest of the environment) changes
    # how squeue prints times: the script's query of the time limit, and fleet up's of the
    # end, must read Slurm's standard format anyway.
    chain.env["SLURM_TIME_FORMAT"] = "relative"
    try:
        # Both nodes for 10 minutes: the drain point (5 minutes before the end) is far,
        # only Slurm's warning drains the fleet. Slurm may need to free the nodes first.
        first = chain.submit_first("-N", "2", "-t", "10")
        wait_for(lambda: {("started", "sleepy"), ("exit", "quick")} <= {(e["kind"], e.get("step"))
                                                                        for e in events(chain.run_dir)}
                 or (_job_fields(first) or {}).get("JobState") in TERMINAL_STATES,
                 FIRST_JOB_TIMEOUT + 60, "sleepy running, quick done, in the first Slurm job")
        before = _job_fields(first) or {}
        assert before.get("JobState") == "RUNNING", f"{before}\n{chain.report()}"
        code, out = _run(["scancel", "--batch", "--signal=USR1", first], timeout=15)  # as --signal=B:USR1@300 does
        assert code == 0, out
        ended = chain.second_job_ends(first)
        assert ended["JobState"] == "FAILED" and ended["ExitCode"] == "3:0", f"{ended}\n{chain.report()}"
        # The batch shell's HOSTNAME is the node's name (node1), the coordinator's host this
        # machine's: the warning went to the coordinator itself all the same.
        assert_drained_by_the_warning(chain, 3, interrupted=True)
        ends = [e for e in first_fleet(chain.run_dir) if e["kind"] == "allocation_end"]
        assert [e["source"] for e in ends] == [f"squeue -j {first}"], ends  # read despite SLURM_TIME_FORMAT
        second = chain.submitted()
        fields = assert_the_second_job_finished_the_suite(chain, second, ["1", "2"], command=None)
        same = ("NumNodes", "TimeLimit", "Partition", "JobName")
        assert {k: fields.get(k) for k in same} == {k: ended.get(k) for k in same}, (fields, ended)
        assert (fields["NumNodes"], fields["TimeLimit"]) == ("2", "00:10:00"), fields
    finally:
        chain.clean_up()


def _fleet_child(pid: int, command: str) -> psutil.Process | None:
    """The `fleet COMMAND` the script runs (a child of its bash), once there is one."""
    try:
        for p in psutil.Process(pid).children():
            cmd = p.cmdline()
            if command in cmd and any(a == "fleet" or a.endswith("/fleet") for a in cmd):
                return p
    except psutil.Error:
        pass
    return None


def test_in_a_job_shorter_than_the_drain_margin_a_fleet_lost_after_slurms_early_warning_is_brought_up_again(
        tmp_path):
    # A 3-minute job: Slurm sends --signal=B:USR1@300 at its start, and the fleet takes it
    # at its drain point (the job is shorter than the 5-min margin). Its coordinator is then
    # killed. Before 2026-12-07 the script restarted a lost fleet only if no warning had
    # come: this job ended there, FAILED 5:0, most of its time unused and no job submitted.
    chain = Chain(tmp_path)
    chain.suite.write_text(chain.suite.read_text().replace(
        "[ $n -ge 2 ] || sleep 120", f"[ -e {tmp_path}/sleepy.once ] || {{ touch {tmp_path}/sleepy.once; sleep 120; }}"))
    try:
        first = chain.submit_first("-N", "2", "-t", "3")
        warned = "the batch system's warning came: the fleet drains (SIGUSR1 to its coordinator"
        wait_for(lambda: ({("started", "sleepy"), ("exit", "quick")} <= {(e["kind"], e.get("step"))
                                                                         for e in events(chain.run_dir)}
                          and warned in _read(chain.out))
                 or (_job_fields(first) or {}).get("JobState") in TERMINAL_STATES,
                 FIRST_JOB_TIMEOUT + 60, "sleepy running, quick done and Slurm's warning taken, in the Slurm job")
        assert (_job_fields(first) or {}).get("JobState") == "RUNNING", chain.report()
        assert not [e for e in events(chain.run_dir) if e["kind"] == "drained"], chain.report()  # (deferred)
        [lost] = [e for e in events(chain.run_dir) if e["kind"] == "fleet_starting"]
        os.kill(lost["pid"], signal.SIGKILL)
        ended = chain.second_job_ends(first)
        report = chain.report()
        assert (ended["JobState"], ended["ExitCode"]) == ("COMPLETED", "0:0"), f"{ended}\n{report}"
        out = chain.out.read_text()
        assert "the fleet was lost (fleet run exited 5): bringing a fleet up again (1 of at most 2)" in out, report
        assert "Submitted batch job" not in out, report  # finished in this job
        got = {s: [a["outcome"] for a in records.attempts(chain.run_dir, s)] for s in STEPS}
        assert got == {"quick": ["succeeded"], "sleepy": ["lost", "succeeded"], "after": ["succeeded"]}, (got, report)
        assert_nothing_left(chain.run_dir)
    finally:
        chain.clean_up()
