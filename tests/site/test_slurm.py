"""fleet inside a real Slurm batch job on two (fake) nodes, with real MPI.

One job (sbatch, waited on with a deadline) runs `fleet up` (agents through srun),
a suite of Python call steps and MPI steps (fleet.node.mpiprobe, through srun) and
`fleet down`; then it holds until this test has looked at the process table and the
job's steps, so that what `fleet down` left behind is seen before Slurm's own clean-up
at the end of the job could hide it. A second, shorter job runs a machine profile that
holds back core 0. All fake nodes are this machine: paths are shared and every
process of every node is in this process table.
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from cluster import requires_mpi, requires_slurm, sbatch_wait
from fleetharness import REPO, TESTS, assert_nothing_left, events, fleet_pids

pytestmark = [requires_slurm, requires_mpi]

JOB_TIMEOUT = 120.0     # the whole job, queueing included; normally ~5 s
HOLD_TIMEOUT = 30.0     # how long a job waits for the test to look before it ends anyway
DOWN_GRACE = 2.0        # seconds after `fleet down` returns for its processes to be gone
PROBE = [sys.executable, "-m", "fleet.node.mpiprobe"]


def _run(argv, timeout=10.0) -> str:
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        return p.stdout
    except (subprocess.TimeoutExpired, FileNotFoundError) as e:
        return f"[{argv[0]} failed: {e}]"


def _job_steps(jobid: str) -> list[str]:
    """Ids of the job's steps other than its batch and extern steps, per squeue."""
    out = _run(["squeue", "-h", "-s", "-j", jobid, "-o", "%i"])
    return [s for s in out.split() if s.startswith(f"{jobid}.") and s.split(".", 1)[1] not in ("batch", "extern")]


def _stepds(jobid: str) -> list[str]:
    """Live slurmstepd processes of the job's steps other than batch and extern."""
    out = []
    pat = re.compile(rf"slurmstepd: \[{re.escape(jobid)}\.(\d+)\]")
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
        except psutil.Error:
            continue
        if pat.search(cmd) and p.info["status"] != psutil.STATUS_ZOMBIE:
            out.append(f"{p.pid} {cmd}")
    return out


def run_job(work: Path, suite: str, up_args: str = "", extra_env: str = "", after_up: str = "") -> SimpleNamespace:
    """Submit a job running fleet up / run / down on `suite` in `work` (`after_up`: shell
    run between up and run); while it holds after `fleet down`, record what is left of
    the fleet and of the job's steps."""
    run_dir = work / "run"
    (work / "suite.toml").write_text(textwrap.dedent(suite))
    script = work / "job.sh"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        # No set -e: every command's status is recorded and the job always holds.
        cd {work}
        echo "$SLURM_JOB_ID" > jobid
        export PYTHONPATH={TESTS}:{REPO}${{PYTHONPATH:+:$PYTHONPATH}}
        unset FLEET_RUN_DIR FLEET_MACHINE FLEET_MACHINES
        {extra_env}
        PY={sys.executable}
        timeout -k 5 60 $PY -m fleet up --run-dir {run_dir} --timeout 40 {up_args}; echo "up $?" >> rcs
        {after_up}
        timeout -k 5 60 $PY -m fleet run suite.toml --run-dir {run_dir}; echo "run $?" >> rcs
        timeout -k 5 40 $PY -m fleet down --run-dir {run_dir}; echo "down $?" >> rcs
        touch downed
        for i in $(seq {int(HOLD_TIMEOUT * 10)}); do [ -e release ] && break; sleep 0.1; done
        grep -qv ' 0$' rcs && exit 1
        exit 0
        """))
    script.chmod(0o755)
    out = SimpleNamespace(work=work, run_dir=run_dir, jobid=None, left_after_down=None, steps_after_down=None,
                          stepds_after_down=None, scontrol_steps="")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        job = pool.submit(sbatch_wait, script, JOB_TIMEOUT, cwd=work,
                          sbatch_args=("-N", "2", "--ntasks-per-node=2", "-t", "3", "-J", "fleet-test",
                                       "-o", str(work / "job.out")))
        try:
            deadline = time.monotonic() + JOB_TIMEOUT
            while not (work / "downed").exists() and not job.done() and time.monotonic() < deadline:
                time.sleep(0.1)
            if (work / "downed").exists():
                jobid = (work / "jobid").read_text().strip()
                out.jobid = jobid
                # The job is still running: whatever is left now, fleet down left. `fleet
                # down` returns once the coordinator has stopped the agents and their srun,
                # so little grace is due: not enough for agents that were not stopped to
                # stop themselves for want of heartbeats (3/4 of the 10 s timeout).
                try:
                    assert_nothing_left(run_dir, timeout=DOWN_GRACE)
                except AssertionError as e:
                    out.left_after_down = str(e)
                end = time.monotonic() + DOWN_GRACE + 1
                while (_job_steps(jobid) or _stepds(jobid)) and time.monotonic() < end:
                    time.sleep(0.1)
                out.steps_after_down = _job_steps(jobid)
                out.stepds_after_down = _stepds(jobid)
                out.scontrol_steps = _run(["scontrol", "show", "step", "-o", jobid])
        finally:
            (work / "release").touch()
            out.rc, out.output = job.result(timeout=JOB_TIMEOUT + 30)
    if out.jobid is None and (work / "jobid").exists():
        out.jobid = (work / "jobid").read_text().strip()
    out.rcs = (work / "rcs").read_text() if (work / "rcs").exists() else ""
    out.events = events(run_dir)
    out.report = (f"job exit {out.rc}; statuses:\n{out.rcs}\njob output:\n{out.output}\n"
                  f"coordinator log:\n{_tail(run_dir / 'coordinator.log')}\n"
                  f"agents' launcher log:\n{_tail(run_dir / 'agents' / 'launcher.log')}")
    return out


def _tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(none)"


MAIN_SUITE = f"""
[suite]
name = "slurm"

[[steps]]
id = "where/{{i}}"
array = "1-4"
call = "fleet_steps:whereami"
args = {{ seconds = 0.4 }}

[[steps]]
id = "probe4"
mpi = true
ranks = 4
command = {json.dumps(PROBE)}
deps = ["where/1", "where/2", "where/3", "where/4"]

[[steps]]
id = "probe3"
mpi = true
ranks = 3
command = {json.dumps(PROBE)}
deps = ["probe4"]

[[steps]]
id = "probe2x2"
mpi = true
ranks = 2
threads = 2
command = {json.dumps(PROBE)}
deps = ["probe3"]
"""


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return run_job(tmp_path_factory.mktemp("slurm-main"), MAIN_SUITE)


def _by_step(evs, kind):
    return {e["step"]: e for e in evs if e["kind"] == kind}


def _expected_ranks(placement: list[dict], threads: int) -> list[tuple[str, list[int]]]:
    """(node, cores) of each rank: node by node in placement order, `threads` cores each."""
    out = []
    for slot in placement:
        cores = slot["cores"]
        out += [(slot["node"], cores[i:i + threads]) for i in range(0, len(cores), threads)]
    return out


def test_fleet_up_run_and_down_each_succeed_inside_a_two_node_batch_job(job):
    assert job.rc == 0, job.report
    assert job.rcs.split("\n")[:3] == ["up 0", "run 0", "down 0"], job.report
    assert "fleet up on slurm:" in job.output, job.report  # the machine was detected from the job
    assert "7 succeeded" in job.output, job.report


def test_the_agents_join_as_the_nodes_slurm_names_each_offering_that_node_s_cores(job):
    joined = {e["node"]: e for e in job.events if e["kind"] == "node_joined"}
    assert sorted(joined) == ["node1", "node2"], job.report
    for e in joined.values():
        assert e["cores"] == [0, 1], e


def test_python_call_steps_land_on_both_nodes_and_really_run_there_on_their_cores(job):
    starts, exits = _by_step(job.events, "start"), _by_step(job.events, "exit")
    where = [f"where/{i}" for i in range(1, 5)]
    assert all(exits[s]["outcome"] == "succeeded" for s in where), job.report
    assert {exits[s]["node"] for s in where} == {"node1", "node2"}, [exits[s] for s in where]
    for s in where:
        rec = json.loads((job.run_dir / "steps" / s / "where.json").read_text())
        assert rec["slurmd_nodename"] == exits[s]["node"] == starts[s]["node"], (s, rec, exits[s])
        assert rec["affinity"] == starts[s]["cores"] == rec["cores"], (s, rec, starts[s])
    # Two steps on each node's two cores, none sharing a core.
    used = [(exits[s]["node"], c) for s in where for c in starts[s]["cores"]]
    assert sorted(used) == [("node1", 0), ("node1", 1), ("node2", 0), ("node2", 1)]


@pytest.mark.parametrize("step, threads, ranks", [("probe4", 1, 4), ("probe3", 1, 3), ("probe2x2", 2, 2)])
def test_every_rank_of_an_mpi_step_spanning_both_nodes_runs_on_exactly_the_cores_placed(job, step, threads, ranks):
    start = _by_step(job.events, "start")[step]
    placement = start["placement"]
    assert {s["node"] for s in placement} == {"node1", "node2"}, placement
    want = _expected_ranks(placement, threads)
    assert len(want) == ranks
    result = json.loads((job.run_dir / "steps" / step / "ranks.json").read_text())
    assert result["mismatches"] == [], result
    got = sorted(result["ranks"], key=lambda r: r["rank"])
    assert [r["rank"] for r in got] == list(range(ranks))
    assert [(r["node"], r["affinity"]) for r in got] == want, (got, placement)
    # Each placed core is used by exactly one rank, and nothing outside the placement.
    placed = sorted((s["node"], c) for s in placement for c in s["cores"])
    assert sorted((r["node"], c) for r in got for c in r["affinity"]) == placed
    assert len({r["pid"] for r in got}) == ranks


def test_mpi_steps_launched_while_the_agents_step_runs_are_not_blocked_and_succeed(job):
    exits = _by_step(job.events, "exit")
    for step in ("probe4", "probe3", "probe2x2"):
        assert exits[step]["outcome"] == "succeeded", (exits[step], job.report)
        assert exits[step]["node"] in ("node1", "node2")
        log = (job.run_dir / "steps" / step / "log").read_text()
        assert "Requested nodes are busy" not in log and "step creation temporarily disabled" not in log, log
        assert exits[step]["ended_at"] - exits[step]["decided_at"] < 30, exits[step]


def test_fleet_down_leaves_no_fleet_process_and_no_job_step_while_the_job_still_runs(job):
    assert job.steps_after_down is not None, "the job never reached fleet down:\n" + job.report
    assert fleet_pids(job.run_dir), "the run recorded no pids: nothing would be checked"
    assert job.left_after_down is None, job.left_after_down
    assert job.steps_after_down == [], job.scontrol_steps
    assert job.stepds_after_down == [], job.stepds_after_down
    assert not (job.run_dir / "fleet.json").exists()


def test_nothing_of_the_fleet_or_its_job_remains_after_the_job(job):
    assert job.jobid, "the job never started:\n" + job.report
    assert_nothing_left(job.run_dir, timeout=10)
    assert _job_steps(job.jobid) == []
    assert _stepds(job.jobid) == []


def where_then_probe(name: str, n: int) -> str:
    """A suite of n one-core Python steps that say where they ran, then an MPI probe of
    n ranks after them."""
    deps = ", ".join(f'"where/{i}"' for i in range(1, n + 1))
    return (f'[suite]\nname = "{name}"\n\n[[steps]]\nid = "where/{{i}}"\narray = "1-{n}"\n'
            f'call = "fleet_steps:whereami"\nargs = {{ seconds = 0.3 }}\n\n[[steps]]\nid = "probe"\nmpi = true\n'
            f'ranks = {n}\ncommand = {json.dumps(PROBE)}\ndeps = [{deps}]\n')


HELD_SUITE = where_then_probe("held", 2)


def test_a_profile_s_held_back_core_is_never_offered_nor_given_to_a_step_or_rank(tmp_path):
    machines = tmp_path / "machines"
    machines.mkdir()
    (machines / "slurm-held.toml").write_text(
        '[machine]\ndescription = "test: core 0 held back"\nlauncher = "slurm"\nmpi = "srun"\nheld_back_cores = [0]\n')
    job = run_job(tmp_path, HELD_SUITE, up_args="--machine slurm-held", extra_env=f"export FLEET_MACHINES={machines}")
    assert job.rc == 0, job.report
    assert "fleet up on slurm-held:" in job.output, job.report
    joined = {e["node"]: e for e in job.events if e["kind"] == "node_joined"}
    assert sorted(joined) == ["node1", "node2"], job.report
    assert [e["cores"] for e in joined.values()] == [[1], [1]], joined
    starts, exits = _by_step(job.events, "start"), _by_step(job.events, "exit")
    for s in ("where/1", "where/2"):
        rec = json.loads((tmp_path / "run" / "steps" / s / "where.json").read_text())
        assert rec["affinity"] == [1], rec
    assert {exits[s]["node"] for s in ("where/1", "where/2")} == {"node1", "node2"}
    assert [(s["node"], s["cores"]) for s in starts["probe"]["placement"]] in (
        [("node1", [1]), ("node2", [1])], [("node2", [1]), ("node1", [1])])
    ranks = json.loads((tmp_path / "run" / "steps" / "probe" / "ranks.json").read_text())
    assert ranks["mismatches"] == [] and [r["affinity"] for r in ranks["ranks"]] == [[1], [1]], ranks
    assert exits["probe"]["outcome"] == "succeeded"
    assert job.left_after_down is None, job.left_after_down
    assert job.steps_after_down == [], job.scontrol_steps


GPU_SUITE = """
[suite]
name = "gpus"

[[steps]]
id = "gpu/{i}"
array = "1-2"
command = "echo DEVICES=$ZE_AFFINITY_MASK; sleep 1"
gpus = 2
"""


def test_agents_started_by_srun_offer_the_gpus_their_profile_states_when_its_variable_is_not_set(tmp_path):
    # As on Aurora, where nothing sets ZE_AFFINITY_MASK on a node a job has whole.
    machines = tmp_path / "machines"
    machines.mkdir()
    (machines / "slurm-ze.toml").write_text('[machine]\ndescription = "test: 2 GPUs a node"\nlauncher = "slurm"\n'
                                            'mpi = "srun"\ngpu_var = "ZE_AFFINITY_MASK"\ngpus_per_node = 2\n')
    job = run_job(tmp_path, GPU_SUITE, up_args="--machine slurm-ze",
                  extra_env=f"export FLEET_MACHINES={machines}; unset ZE_AFFINITY_MASK CUDA_VISIBLE_DEVICES "
                            "ROCR_VISIBLE_DEVICES HIP_VISIBLE_DEVICES")
    assert job.rc == 0, job.report
    joined = {e["node"]: e["gpus"] for e in job.events if e["kind"] == "node_joined"}
    assert joined == {"node1": [0, 1], "node2": [0, 1]}, job.report
    for s in ("gpu/1", "gpu/2"):
        log = (tmp_path / "run" / "steps" / s / "log").read_text()
        assert "DEVICES=0,1" in log, log
    assert job.left_after_down is None, job.left_after_down


KEPT_SUITE = where_then_probe("kept", 3)

AFFINITY = ("$PY -c 'import json, os, sys; pid = json.load(open(sys.argv[1]))[\"pid\"]; "
            "print(sorted(os.sched_getaffinity(pid)))' {run}/fleet.json > coordinator-affinity")


def test_a_core_kept_for_the_coordinator_runs_the_coordinator_alone_and_no_step_or_rank_is_given_it(tmp_path):
    job = run_job(tmp_path, KEPT_SUITE, up_args="--coordinator-cores 1",
                  after_up=AFFINITY.format(run=tmp_path / "run"))
    assert job.rc == 0, job.report
    assert "4 succeeded" in job.output, job.report
    log = (job.run_dir / "coordinator.log").read_text()
    kept = re.search(r"cores (\d+) of (\S+) kept for the coordinator", log)
    assert kept, job.report
    core, home = int(kept.group(1)), kept.group(2)
    assert json.loads((tmp_path / "coordinator-affinity").read_text()) == [core], job.report
    joined = {e["node"]: e["cores"] for e in job.events if e["kind"] == "node_joined"}
    assert sorted(joined) == ["node1", "node2"] and home in joined, joined
    assert joined == {n: ([0, 1] if n != home else [c for c in (0, 1) if c != core]) for n in joined}, joined
    starts = _by_step(job.events, "start")
    used = [(slot["node"], c) for e in starts.values() for slot in e["placement"] for c in slot["cores"]]
    assert used and (home, core) not in used, used
    ranks = json.loads((job.run_dir / "steps" / "probe" / "ranks.json").read_text())
    assert ranks["mismatches"] == [] and len(ranks["ranks"]) == 3, ranks
    assert all(core not in r["affinity"] for r in ranks["ranks"] if r["node"] == home), ranks
    assert job.left_after_down is None, job.left_after_down
    assert job.steps_after_down == [], job.scontrol_steps


# A rank that traps SIGTERM writes term.<rank> in its step's directory; `polite` then
# exits, `stubborn` runs on until its grace is over. Both span the two nodes (4 ranks of
# the job's 4 cores: one after the other; a dep would block the second, the first timed out).
RANK = ("trap 'echo term > term.$SLURM_PROCID; {then}' TERM; echo up > up.$SLURM_PROCID; "
        "while :; do sleep 0.2; done")
STOPPED_SUITE = f"""
[suite]
name = "stopped"

[[steps]]
id = "polite"
mpi = true
ranks = 4
timeout = 6
grace = 60
retries = 0
command = {json.dumps(["bash", "-c", RANK.format(then="exit 0")])}

[[steps]]
id = "stubborn"
mpi = true
ranks = 4
timeout = 6
grace = 3
retries = 0
command = {json.dumps(["bash", "-c", RANK.format(then=":")])}
"""


def test_an_srun_mpi_step_past_its_timeout_gives_every_rank_sigterm_and_its_grace_then_sigkill(tmp_path):
    job = run_job(tmp_path, STOPPED_SUITE)
    assert job.rcs.split("\n")[:1] == ["up 0"], job.report
    exits = _by_step(job.events, "exit")
    for step in ("polite", "stubborn"):
        where = job.run_dir / "steps" / step
        log = (where / "log").read_text(errors="replace") if (where / "log").exists() else "(no log)"
        assert exits[step]["outcome"] == "timed_out", (exits[step], log)
        assert sorted(p.name for p in where.glob("term.*")) == [f"term.{r}" for r in range(4)], log
    polite_log = (job.run_dir / "steps" / "polite" / "log").read_text(errors="replace")
    assert "forcing job termination" not in polite_log, polite_log  # srun never killed its ranks
    # polite ended on its SIGTERM, long before its 60 s grace; stubborn was killed after its 3 s.
    assert exits["polite"]["reason"] == "timed out after 6 s; ended after SIGTERM", exits["polite"]
    assert exits["stubborn"]["reason"] == "timed out after 6 s; SIGKILL after 3 s grace", exits["stubborn"]
    assert {s["node"] for s in _by_step(job.events, "start")["polite"]["placement"]} == {"node1", "node2"}
    assert job.left_after_down is None, job.left_after_down
    assert job.steps_after_down == [], job.scontrol_steps
    assert job.stepds_after_down == [], job.stepds_after_down
    assert_nothing_left(job.run_dir, timeout=10)


# One node's worth of ranks (span = false) in a two-node job: scancel signals them and
# then fails for the other node (exit 225, "Invalid job id specified"). A rank that traps
# SIGTERM takes 2 s to write its checkpoint, well within its grace.
CHECKPOINT = ("trap 'echo term > term.$SLURM_PROCID; sleep 2; echo saved > ckpt.$SLURM_PROCID; exit 0' TERM; "
              "echo up > up.$SLURM_PROCID; while :; do sleep 0.2; done")
ONE_NODE_SUITE = f"""
[suite]
name = "one_node"

[[steps]]
id = "one_node"
mpi = true
ranks = 2
span = false
timeout = 5
grace = 20
retries = 0
command = {json.dumps(["bash", "-c", CHECKPOINT])}
"""


def test_an_srun_mpi_step_on_some_of_the_job_s_nodes_past_its_timeout_gives_its_ranks_their_grace(tmp_path):
    job = run_job(tmp_path, ONE_NODE_SUITE)
    assert job.rcs.split("\n")[:1] == ["up 0"], job.report
    where = job.run_dir / "steps" / "one_node"
    log = (where / "log").read_text(errors="replace") if (where / "log").exists() else "(no log)"
    [start] = [e for e in job.events if e["kind"] == "start" and e["step"] == "one_node"]
    assert len({s["node"] for s in start["placement"]}) == 1, start
    [exit_] = [e for e in job.events if e["kind"] == "exit" and e["step"] == "one_node"]
    assert exit_["outcome"] == "timed_out", (exit_, log)
    assert "cannot send SIGTERM" not in log and "forcing job termination" not in log, log
    assert sorted(p.name for p in where.glob("ckpt.*")) == ["ckpt.0", "ckpt.1"], log  # each rank had its grace
    assert exit_["reason"] == "timed out after 5 s; ended after SIGTERM", exit_
    assert job.steps_after_down == [], job.scontrol_steps
    assert_nothing_left(job.run_dir, timeout=10)
