"""A job submitted with ``sbatch --export=NONE`` (some sites' default, through
SLURM_EXPORT_ENV=NONE): its job script's environment is in SLURM_EXPORT_ENV=NONE's
hands, which every srun inside the job inherits. Before 2026-12-07 the agents' srun
started them with an empty environment (no keys, no PATH or PYTHONPATH): none joined,
and nothing said why. Now the agents' srun says --export=ALL (fleet.site.launch), and
every step, MPI ranks under their own srun included, has the job script's variables."""

from __future__ import annotations

import json
import sys
import textwrap

from cluster import requires_mpi, requires_slurm, sbatch_wait, stop_coordinators
from fleetharness import REPO, TESTS

pytestmark = [requires_slurm, requires_mpi]

JOB_TIMEOUT = 180.0  # queueing included; normally ~10 s

NAMES = ["JOBVAR", "SLURM_EXPORT_ENV"]
DUMP = ("import json, os; json.dump({n: os.environ.get(n) for n in %r}, "
        "open('env.%%s.json' %% os.environ.get('SLURM_PROCID', 'cmd'), 'w'))" % NAMES)

SUITE = f"""
[suite]
name = "export-none"

[[steps]]
id = "call"
call = "fleet_steps:env_report"
args = {{ names = {json.dumps(NAMES)} }}

[[steps]]
id = "cmd"
command = {json.dumps([sys.executable, "-c", DUMP])}

[[steps]]
id = "mpi"
mpi = true
ranks = 4
command = {json.dumps([sys.executable, "-c", DUMP])}
"""


def _read(path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError as e:
        return f"({e})"


def test_a_job_submitted_with_export_none_brings_its_fleet_up_and_every_step_has_the_job_script_s_environment(
        tmp_path):
    run_dir = tmp_path / "run"
    (tmp_path / "suite.toml").write_text(SUITE)
    script = tmp_path / "job.sh"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        cd {tmp_path}
        echo "SLURM_EXPORT_ENV=$SLURM_EXPORT_ENV" > seen
        export PYTHONPATH={TESTS}:{REPO}
        export JOBVAR=from-the-job-script
        unset FLEET_RUN_DIR FLEET_MACHINE FLEET_MACHINES
        PY={sys.executable}
        timeout -k 5 60 $PY -m fleet up --run-dir {run_dir} --timeout 20; echo "up $?" >> rcs
        # (the old code's fleet is not up: no embedded fleet's agents to wait for again)
        [ -e {run_dir}/fleet.json ] || exit 0
        timeout -k 5 60 $PY -m fleet run suite.toml --run-dir {run_dir}; echo "run $?" >> rcs
        timeout -k 5 40 $PY -m fleet down --run-dir {run_dir}; echo "down $?" >> rcs
        exit 0
        """))
    try:
        rc, out = sbatch_wait(script, JOB_TIMEOUT, cwd=tmp_path,
                              sbatch_args=("--export=NONE", "-N", "2", "--ntasks-per-node=2", "-t", "3",
                                           "-J", "fleet-test", "-o", str(tmp_path / "job.out")))
    finally:
        stop_coordinators(run_dir)
    report = (f"job exit {rc}\n{out}\nstatuses:\n{_read(tmp_path / 'rcs')}\ncoordinator log:\n"
              f"{_read(run_dir / 'coordinator.log')[-3000:]}\nagents:\n{_read(run_dir / 'agents' / 'launcher.log')}")
    assert rc == 0, report
    assert _read(tmp_path / "seen").strip() == "SLURM_EXPORT_ENV=NONE", report  # (what this test is about)
    assert _read(tmp_path / "rcs").split("\n")[:3] == ["up 0", "run 0", "down 0"], report
    want = {"JOBVAR": "from-the-job-script", "SLURM_EXPORT_ENV": None}
    steps = run_dir / "steps"
    for seen in (steps / "call" / "env.json", steps / "cmd" / "env.cmd.json",
                 *(steps / "mpi" / f"env.{rank}.json" for rank in range(4))):
        assert json.loads(_read(seen)) == want, (seen, report)
