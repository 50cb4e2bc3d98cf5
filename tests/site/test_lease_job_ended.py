"""A run directory's lease held by a coordinator of another host is taken over as soon as
that coordinator's batch job has ended, not after `--stale-after` (10 minutes): the wait
a job that resubmitted itself paid when its predecessor's coordinator was killed on
another node (fleet.control.lease, fleet.site.jobstate). While that job runs, the lease
is waited for. Real Slurm jobs: the holder's is a job that sleeps, the lease is the one
its coordinator on another node would have left; the taker is a real `fleet up` in a job
of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from cluster import TERMINAL_STATES, _job_fields, _run, fleet_job_script, requires_slurm, stop_coordinators
from fleetharness import REPO, TESTS, assert_nothing_left, wait_for, write_suite

pytestmark = [requires_slurm]


def _sbatch(*args: str) -> str:
    p = subprocess.run(["sbatch", "--parsable", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip().split(";")[0]


def _state(job: str) -> str:
    fields = _job_fields(job)
    return fields.get("JobState", "") if fields else "GONE"


def _cluster() -> str:
    rc, out = _run(["scontrol", "show", "config"])
    assert rc == 0, out
    return next(line.split("=", 1)[1].strip() for line in out.splitlines() if line.startswith("ClusterName"))


def _ran_whole(tmp_path, job: str, name: str) -> None:
    """Wait for the fleet job `name` to end; its up, run and down all exited 0."""
    wait_for(lambda: _state(job) in TERMINAL_STATES or _state(job) == "GONE", 150, f"the {name}'s job ended")
    rcs = (tmp_path / f"{name}.rcs").read_text().split("\n") if (tmp_path / f"{name}.rcs").exists() else []
    assert [r for r in rcs if r] == ["up 0", "run 0", "down 0"], (rcs, (tmp_path / f"{name}.out").read_text())


def _clean_up(run_dir, *jobs) -> None:
    for job in jobs:
        if job is not None:
            _run(["scancel", job])
    stop_coordinators(run_dir)


def _fleet_job(tmp_path, run_dir, name: str):
    """A batch script running a one-step suite on run_dir (fleet_job_script: up may wait
    for the lease), each command's exit status in tmp_path/<name>.rcs."""
    suite = write_suite(tmp_path / "suite.toml", '[suite]\nname = "after"\n[[steps]]\nid = "a"\ncommand = "true"\n')
    return fleet_job_script(tmp_path, run_dir, suite, name, up_s=120, run_s=60)


def test_a_lease_whose_holders_slurm_job_ended_is_taken_over_at_once_and_not_while_it_runs(tmp_path):
    run_dir = tmp_path / "run"
    holder = _sbatch("-o", "/dev/null", "-J", "fleet-lease-holder", "--wrap", "sleep 300")
    taker = None
    try:
        wait_for(lambda: _state(holder) == "RUNNING", 60, "the holder's job running")
        (run_dir / ".fleet").mkdir(parents=True)
        # What a coordinator on another node, in the holder's job, left when it was killed.
        (run_dir / ".fleet" / "lease").write_text(json.dumps({
            "fleet": "crashed-elsewhere", "host": "node9.elsewhere.invalid", "pid": 4242, "at": time.time(),
            "generation": 1, "shared": False, "job": f"Slurm job {holder}", "cluster": _cluster()}))
        script = _fleet_job(tmp_path, run_dir, "taker")
        taker = _sbatch("-N", "1", "-o", str(tmp_path / "taker.out"), "-J", "fleet-lease-taker", str(script))
        # The taker waits, and says for what, while the holder's job runs.
        regs = run_dir / ".fleet" / "fleets"

        def waiting() -> dict | None:
            for p in regs.glob("*.json") if regs.exists() else ():
                try:
                    w = json.loads(p.read_text()).get("waiting")
                except (OSError, ValueError):
                    continue
                if w:
                    return w
            return None
        wait_for(lambda: waiting() is not None, 90, "the taker saying it waits for the lease")
        assert waiting().get("job") == f"Slurm job {holder}", waiting()
        assert json.loads((run_dir / ".fleet" / "lease").read_text())["fleet"] == "crashed-elsewhere"
        assert not (run_dir / "fleet.json").exists()
        # The holder's job ends: the lease is the taker's within a look or two, not 600 s.
        _run(["scancel", holder])
        wait_for(lambda: _state(holder) in TERMINAL_STATES or _state(holder) == "GONE", 30, "the holder's job ended")
        _ran_whole(tmp_path, taker, "taker")
        log = (run_dir / "coordinator.log").read_text()
        assert f"its batch job (Slurm job {holder}) has ended" in log, log[-3000:]
        assert_nothing_left(run_dir)
    finally:
        _clean_up(run_dir, holder, taker)


def test_a_job_after_one_whose_coordinator_was_killed_on_another_node_comes_up_at_once(tmp_path):
    """What a job that resubmits itself finds when its predecessor's coordinator was
    killed on another node (a node failure, a SIGKILL at the time limit): that fleet's
    fleet.json and lease. Once that job has ended both are stale: `fleet up` removes the
    one and takes the other over, and the suite runs."""
    run_dir = tmp_path / "run"
    scratch = tmp_path / "scratch"
    fleet_up = subprocess.run([sys.executable, "-m", "fleet", "up", "--run-dir", str(scratch), "--nodes", "1"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": f"{TESTS}:{REPO}"})
    assert fleet_up.returncode == 0, fleet_up.stderr
    conn = json.loads((scratch / "fleet.json").read_text())  # a real file's keys and fields
    subprocess.run([sys.executable, "-m", "fleet", "down", "--run-dir", str(scratch)], cwd=tmp_path,
                   capture_output=True, timeout=60, env={**os.environ, "PYTHONPATH": f"{TESTS}:{REPO}"})
    holder = _sbatch("-o", "/dev/null", "-J", "fleet-killed-elsewhere", "--wrap", "sleep 300")
    taker = None
    try:
        wait_for(lambda: _state(holder) == "RUNNING", 60, "the killed fleet's job running")
        cluster, job = _cluster(), f"Slurm job {holder}"
        (run_dir / ".fleet").mkdir(parents=True)
        (run_dir / ".fleet" / "lease").write_text(json.dumps({
            "fleet": "killed-elsewhere", "host": "node9.elsewhere.invalid", "pid": 4242, "at": time.time(),
            "generation": 1, "shared": False, "job": job, "cluster": cluster}))
        conn.update(host="node9.elsewhere.invalid", pid=4242, client="tcp://127.0.0.1:9", job=job, cluster=cluster,
                    run_dir=str(run_dir))
        fd = os.open(run_dir / "fleet.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(conn, f)
        _run(["scancel", holder])
        wait_for(lambda: _state(holder) in TERMINAL_STATES or _state(holder) == "GONE", 30, "that job ended")
        script = _fleet_job(tmp_path, run_dir, "next")
        taker = _sbatch("-N", "1", "-o", str(tmp_path / "next.out"), "-J", "fleet-next-job", str(script))
        wait_for(lambda: _state(taker) in TERMINAL_STATES or _state(taker) == "GONE", 150, "the next job ended")
        out = (tmp_path / "next.out").read_text()
        rcs = (tmp_path / "next.rcs").read_text().split() if (tmp_path / "next.rcs").exists() else []
        assert rcs == ["up", "0", "run", "0", "down", "0"], (rcs, out)
        assert f"removed {run_dir / 'fleet.json'}: its fleet's coordinator (pid 4242 on node9.elsewhere.invalid) " \
               f"ran in {job}, which has ended" in out, out
        log = (run_dir / "coordinator.log").read_text()
        assert f"its batch job ({job}) has ended" in log, log[-3000:]
        assert_nothing_left(run_dir)
    finally:
        for j in (holder, taker):
            if j is not None:
                _run(["scancel", j])
        stop_coordinators(run_dir)


def test_fleet_down_from_outside_any_job_removes_the_file_of_a_fleet_whose_job_ended_and_only_then(tmp_path):
    """`fleet down` on a login node (no job: the cluster is asked of Slurm) of a fleet
    that died with its job on another node: nothing to stop, its fleet.json goes; of one
    whose job still runs, nothing is touched."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    holder = _sbatch("-o", "/dev/null", "-J", "fleet-down-elsewhere", "--wrap", "sleep 300")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PYTHONPATH"] = f"{TESTS}:{REPO}"
    try:
        wait_for(lambda: _state(holder) == "RUNNING", 60, "the job running")
        fd = os.open(run_dir / "fleet.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"client": "tcp://127.0.0.1:9", "agents": "tcp://127.0.0.1:9", "pid": 4242,
                       "host": "node9.elsewhere.invalid", "started": time.time(), "run_dir": str(run_dir),
                       "job": f"Slurm job {holder}", "cluster": _cluster()}, f)
        down = [sys.executable, "-m", "fleet", "down", "--run-dir", str(run_dir)]
        r = subprocess.run(down, cwd=tmp_path, capture_output=True, text=True, timeout=90, env=env)
        assert r.returncode == 1 and "did not answer" in r.stderr, r.stderr  # its job runs: it may be at work
        assert (run_dir / "fleet.json").exists()
        _run(["scancel", holder])
        wait_for(lambda: _state(holder) in TERMINAL_STATES or _state(holder) == "GONE", 30, "the job ended")
        r = subprocess.run(down, cwd=tmp_path, capture_output=True, text=True, timeout=90, env=env)
        assert r.returncode == 0, r.stderr
        assert f"removed {run_dir / 'fleet.json'}" in r.stderr and f"Slurm job {holder}, which has ended" in r.stderr
        assert not (run_dir / "fleet.json").exists()
    finally:
        _run(["scancel", holder])


def _held_by_a_fleet_of_another_node(work, standing: str, holder: str) -> tuple:
    """A shared run directory in work where a fleet on another node, in the holder's job,
    held the lease (or had registered to share it) and claimed step `a` when it was
    killed (what it left, written as it would have); a taker job submitted to run its
    suite of `a` and `b`: (run_dir, taker's job)."""
    run_dir = work / "run"
    suite = write_suite(work / "suite.toml", '[suite]\nname = "held"\n'
                        '[[steps]]\nid = "a"\ncommand = "true"\n[[steps]]\nid = "b"\ncommand = "true"\n')
    where = {"fleet": "crashed-elsewhere", "host": "node9.elsewhere.invalid", "pid": 4242}
    (run_dir / ".fleet" / "claims").mkdir(parents=True)
    job = {"job": f"Slurm job {holder}", "cluster": _cluster()}
    if standing == "lease holder":
        (run_dir / ".fleet" / "lease").write_text(json.dumps({**where, **job, "at": time.time(), "generation": 1,
                                                              "shared": True}))
    else:  # the taker takes the free lease and shares it with the registered fleet
        (run_dir / ".fleet" / "fleets").mkdir()
        (run_dir / ".fleet" / "fleets" / "crashed-elsewhere.json").write_text(json.dumps({**where, **job,
                                                                                       "at": time.time()}))
    (run_dir / ".fleet" / "claims" / f"{0:09d}.json").write_text(json.dumps({**where, "at": time.time(),
                                                                           "steps": ["a"]}))
    script = fleet_job_script(work, run_dir, suite, "taker", up_s=60, run_s=120)
    return run_dir, _sbatch("-N", "1", "-o", str(work / "taker.out"), "-J", "fleet-claims-taker", str(script))


def test_steps_a_fleet_of_another_node_held_as_lease_holder_or_registered_are_free_once_its_job_ended_not_after_stale_after(
        tmp_path):
    """A shared run directory: a fleet on another node, in another job, held the lease
    (or had registered to share it) and claimed step `a` when it was killed. A fleet in a
    job of its own runs the suite: it runs `b`, and waits for `a` while that job runs;
    once the job has ended it finds that fleet gone (asked of Slurm off its loop,
    fleet.control.jobwatch) and runs `a`, without waiting --stale-after. Both standings
    at once, on two run directories, their fleets in one holder's job: the takers wait
    for its end together (about jobwatch.LOOK_S, 30 s, each: before, one test each)."""
    from fleetharness import records as event_records
    from fleet.wire import events as E
    holder = _sbatch("-o", "/dev/null", "-J", "fleet-claims-holder", "--wrap", "sleep 300")
    takers: dict[str, tuple] = {}
    try:
        wait_for(lambda: _state(holder) == "RUNNING", 60, "the holder's job running")
        for standing in ("lease holder", "registered"):
            work = tmp_path / standing.replace(" ", "-")
            work.mkdir()
            takers[standing] = (work, *_held_by_a_fleet_of_another_node(work, standing, holder))

        def started(run_dir, step: str) -> bool:
            return any(isinstance(e, E.Started) and e.step == step for e in event_records(run_dir))
        for standing, (_, run_dir, _) in takers.items():
            wait_for(lambda: started(run_dir, "b"), 90, f"the taker running b (holder: {standing})")
        time.sleep(3)  # several looks at who is live: `a` stays with its holder while its job runs
        for standing, (_, run_dir, taker) in takers.items():
            assert not started(run_dir, "a"), standing
            assert _state(taker) == "RUNNING", standing
        _run(["scancel", holder])
        for standing, (work, run_dir, taker) in takers.items():
            _ran_whole(work, taker, "taker")
            assert started(run_dir, "a"), standing
            log = (run_dir / "coordinator.log").read_text()
            assert f"another fleet's batch job (Slurm job {holder}) has ended" in log, (standing, log[-3000:])
            assert_nothing_left(run_dir)
    finally:
        _run(["scancel", holder])
        for _, run_dir, taker in takers.values():
            _clean_up(run_dir, taker)
