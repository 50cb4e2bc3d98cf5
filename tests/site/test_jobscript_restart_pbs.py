"""jobscripts/pbs-resubmit.pbs, the real script, when its fleet is lost in the job: its
coordinator killed (as the OOM killer might), `fleet run` exits 5, and the script brings
a fleet up again in the same allocation and finishes the suite. No PBS here: the script
runs under bash with the `local` machine profile, which is all of it that is not PBS's
(as tests/site/test_jobscript_same_run_dir.py runs it)."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap

from fleetharness import REPO, assert_nothing_left, env, events, fleet_command, wait_for

from fleet.wire import records

SCRIPT = REPO / "jobscripts" / "pbs-resubmit.pbs"


def test_a_fleet_lost_in_a_pbs_job_is_brought_up_again_and_the_suite_finishes_in_that_job(tmp_path):
    run_dir, suite, bindir = tmp_path / "run", tmp_path / "suite.toml", tmp_path / "bin"
    fleet_command(bindir)  # `fleet` on PATH is this test's interpreter
    suite.write_text(textwrap.dedent(f"""
        [suite]
        name = "restart"
        [[steps]]
        id = "quick"
        command = "true"
        [[steps]]
        id = "sleepy"
        command = '[ -e {tmp_path}/sleepy.once ] || {{ touch {tmp_path}/sleepy.once; sleep 120; }}'
        [[steps]]
        id = "after"
        command = "true"
        deps = ["sleepy"]
        """))
    e = {k: v for k, v in env().items() if not k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "FLEET_", "PBS_"))}
    e.update(PATH=f"{bindir}{os.pathsep}{e.get('PATH', '')}", SUITE=str(suite), FLEET_RUN_DIR=str(run_dir),
             FLEET_MACHINE="local", PBS_O_WORKDIR=str(tmp_path))
    out_path = tmp_path / "job.out"
    with open(out_path, "w") as out:
        bash = subprocess.Popen(["bash", str(SCRIPT)], cwd=tmp_path, env=e, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        wait_for(lambda: bash.poll() is not None or {("started", "sleepy"), ("exit", "quick")}
                 <= {(r["kind"], r.get("step")) for r in events(run_dir)}, 60, "sleepy running, quick done")
        assert bash.poll() is None, out_path.read_text()
        [first] = [r for r in events(run_dir) if r["kind"] == "fleet_starting"]
        os.kill(first["pid"], signal.SIGKILL)
        code = bash.wait(timeout=90)
        text = out_path.read_text()
        assert code == 0, text
        assert "the fleet was lost (fleet run exited 5): bringing a fleet up again (1 of at most 2)" in text, text
        assert "submitting job" not in text, text  # finished in this job
        ev = events(run_dir)
        assert len([r for r in ev if r["kind"] == "fleet_starting"]) == 2, text
        # sleepy was running when its fleet was lost: that attempt is `lost`, the next succeeded.
        got = {step: [a["outcome"] for a in records.attempts(run_dir, step)] for step in ("quick", "sleepy", "after")}
        assert got == {"quick": ["succeeded"], "sleepy": ["lost", "succeeded"], "after": ["succeeded"]}, (got, text)
        assert [r["step"] for r in ev if r["kind"] == "skipped"] == ["quick"], text
        assert_nothing_left(run_dir)
    finally:
        if bash.poll() is None:
            os.killpg(bash.pid, signal.SIGKILL)
            bash.wait(timeout=30)
        subprocess.run([str(bindir / "fleet"), "down", "--run-dir", str(run_dir)], env=e, timeout=60,
                       capture_output=True)


def test_the_next_pbs_job_gets_every_fleet_setting_of_this_one_by_name(tmp_path):
    # (FLEET_MAX_RESTARTS, FLEET_MACHINES and the rest went back to their defaults from the second job on)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "qstat").write_text("#!/bin/sh\nexit 0\n")  # (no PBS here: qstat -f says nothing)
    (bindir / "qstat").chmod(0o755)
    body = subprocess.run(["sed", "-n", "/^next_job_options()/,/^}/p", str(SCRIPT)], capture_output=True,
                          text=True, check=True, timeout=30).stdout
    assert body.startswith("next_job_options()"), body
    e = {k: v for k, v in env().items() if not k.startswith(("FLEET_", "PBS_"))}
    e.update(PATH=f"{bindir}{os.pathsep}{e.get('PATH', '')}", SUITE="s.toml", FLEET_RUN_DIR="/r", JOB_NUMBER="1",
             FLEET_MAX_RESTARTS="7", FLEET_MACHINES="/p,q", FLEET_MACHINE="local", FLEET_EMPTY="")
    r = subprocess.run(["bash", "-c", body + '\nnext_job_options 2>/dev/null; printf "%s\\n" "${NEXT[@]}"'],
                       env=e, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    words = r.stdout.split("\n")
    names = words[words.index("-v") + 1].split(",")
    assert names[:3] == ["SUITE", "FLEET_RUN_DIR", "FLEET_JOB_NUMBER"], names
    assert {"FLEET_MAX_RESTARTS", "FLEET_MACHINES", "FLEET_MACHINE"} <= set(names[3:]), names
    assert "FLEET_EMPTY" not in names and len(names) == len(set(names)), names
