"""Profiles that cannot start a fleet in this batch job, refused in a real Slurm job
before anything starts: a PALS profile (it wants a PBS job), a profile that does not
say its launcher (it was a local fleet on the job's first node alone)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from cluster import requires_slurm, sbatch_wait
from fleetharness import REPO, TESTS

pytestmark = [requires_slurm]

JOB_TIMEOUT = 120.0  # queueing included; normally a few seconds


def test_in_a_slurm_job_a_pals_profile_and_one_without_a_launcher_are_refused_and_nothing_starts(tmp_path: Path):
    machines = tmp_path / "machines"
    machines.mkdir()
    (machines / "nolauncher.toml").write_text('[machine]\nmpi = "srun"\ngpu_var = "CUDA_VISIBLE_DEVICES"\n')
    script = tmp_path / "job.sh"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        cd {tmp_path}
        export PYTHONPATH={TESTS}:{REPO}${{PYTHONPATH:+:$PYTHONPATH}}
        unset FLEET_RUN_DIR FLEET_MACHINE
        export FLEET_MACHINES={machines}
        PY={sys.executable}
        for m in pals nolauncher; do
            timeout -k 5 60 $PY -m fleet up --run-dir run-$m --machine $m --timeout 30 2> $m.err
            echo $? > $m.rc
            # (the old code's fleet, had it come up: stopped before the job ends)
            [ -e run-$m/fleet.json ] && timeout -k 5 40 $PY -m fleet down --run-dir run-$m
        done
        exit 0
        """))
    rc, out = sbatch_wait(script, JOB_TIMEOUT, sbatch_args=("-N", "2", "-o", str(tmp_path / "job.out")), cwd=tmp_path)
    assert rc == 0, out
    said = {m: (tmp_path / f"{m}.err").read_text() for m in ("pals", "nolauncher")}
    assert (tmp_path / "pals.rc").read_text().strip() == "2", said
    assert "machine pals (" in said["pals"] and "starts its agents with PALS mpiexec, which needs a PBS job, " \
        "but this is a Slurm job" in said["pals"], said
    assert "give --machine slurm" in said["pals"], said
    assert (tmp_path / "nolauncher.rc").read_text().strip() == "2", said
    assert f"{machines / 'nolauncher.toml'}: field 'machine.launcher': missing" in said["nolauncher"], said
    assert not (tmp_path / "run-pals").exists() and not (tmp_path / "run-nolauncher").exists()
