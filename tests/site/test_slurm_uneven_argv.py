"""An srun MPI step placed unevenly (3 ranks on 2 nodes of 2 cores: 2 + 1) runs, in every
rank, the command exactly as the suite wrote it, on exactly the cores placed.

Such a step starts each rank through fleet's rank wrapper (fleet.site.mpi,
srun-ranks.sh), the command its arguments. Before, it went through srun's --multi-prog
file, which is no shell: `it's` left every task "No executable program specified", a
shell string with quotes or on two lines failed, `%t` became the rank number and words
past ~122 were dropped, the step recorded as succeeded. A one-core step holds a core
while they run, so a node's rank may sit on another core id than its local rank
(node1 core 1 alone), as the rest of the allocation decides.
"""

from __future__ import annotations

import json
import sys
import textwrap

from cluster import requires_mpi, requires_slurm, sbatch_wait
from fleetharness import REPO, TESTS

pytestmark = [requires_slurm, requires_mpi]

JOB_TIMEOUT = 240.0  # queueing included; normally ~20 s

# Each rank says, in rank.<MPI rank>.json in its working directory, what it was given.
PROG = textwrap.dedent("""\
    import json, os, sys
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    seen = comm.allgather(rank)
    with open(f"rank.{rank}.json", "w") as f:
        json.dump({"argv": sys.argv[1:], "affinity": sorted(os.sched_getaffinity(0)), "size": size, "seen": seen,
                   "procid": os.environ.get("SLURM_PROCID"), "node": os.environ.get("SLURMD_NODENAME")}, f)
    """)

# What srun's --multi-prog file changed or choked on, and 200 words more.
ARGS = ["it's", "100%t", "%o", "a b", 'say "hi"', "$HOME", "*", "line 1\nline 2", *map(str, range(200))]

# A shell string: quotes, a comment, a line break inside an argument.
SHELL = """\
# the ranks' 'own' words, 100%t of them
word="it's"
exec {py} {prog} "$word" '100%t' 'two
lines' "a b"
"""
SHELL_ARGS = ["it's", "100%t", "two\nlines", "a b"]


def _suite(work) -> str:
    hold = (f"i=0; while [ ! -e {work}/run/steps/shell/rank.2.json ] && [ $i -lt 300 ]; "
            "do sleep 0.1; i=$((i + 1)); done")
    shell = SHELL.format(py=sys.executable, prog=work / "prog.py")
    return textwrap.dedent(f"""\
        [suite]
        name = "uneven"

        [[steps]]
        id = "hold"
        command = {json.dumps(hold)}

        [[steps]]
        id = "argv"
        mpi = true
        ranks = 3
        command = {json.dumps([sys.executable, str(work / "prog.py"), *ARGS])}

        [[steps]]
        id = "shell"
        mpi = true
        ranks = 3
        command = {json.dumps(shell)}
        deps = ["argv"]
        """)


def _ranks(placement: list[dict]) -> list[tuple[str, list[int]]]:
    """(node, cores) of each rank: node by node in placement order, one core each."""
    return [(s["node"], [c]) for s in placement for c in s["cores"]]


def test_an_unevenly_placed_srun_mpi_step_runs_the_command_as_written_in_every_rank_on_its_placed_cores(tmp_path):
    (tmp_path / "prog.py").write_text(PROG)
    (tmp_path / "suite.toml").write_text(_suite(tmp_path))
    script = tmp_path / "job.sh"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        cd {tmp_path}
        export PYTHONPATH={TESTS}:{REPO}${{PYTHONPATH:+:$PYTHONPATH}}
        unset FLEET_RUN_DIR FLEET_MACHINE FLEET_MACHINES
        PY={sys.executable}
        timeout -k 5 60 $PY -m fleet up --run-dir run --timeout 40; echo "up $?" >> rcs
        timeout -k 5 90 $PY -m fleet run suite.toml --run-dir run > run.out 2>&1; echo "run $?" >> rcs
        timeout -k 5 40 $PY -m fleet down --run-dir run; echo "down $?" >> rcs
        exit 0
        """))
    rc, out = sbatch_wait(script, JOB_TIMEOUT, cwd=tmp_path, sbatch_args=(
        "-N", "2", "--ntasks-per-node=2", "-t", "4", "-J", "fleet-test", "-o", str(tmp_path / "job.out")))
    run = tmp_path / "run"
    said = "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-3000:]}" for p in
                     [tmp_path / "rcs", tmp_path / "run.out", *sorted((run / "steps").glob("*/log"))] if p.exists())
    assert rc == 0, out
    assert (tmp_path / "rcs").read_text().split("\n")[:3] == ["up 0", "run 0", "down 0"], said
    recs = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    starts = {r["step"]: r for r in recs if r["kind"] == "start"}
    exits = {r["step"]: r for r in recs if r["kind"] == "exit"}
    for step, args in (("argv", ARGS), ("shell", SHELL_ARGS)):
        assert exits[step]["outcome"] == "succeeded", (exits[step], said)
        want = _ranks(starts[step]["placement"])
        assert sorted(len(s["cores"]) for s in starts[step]["placement"]) == [1, 2], starts[step]  # uneven
        assert not (run / "steps" / step / ".fleet" / "multi-prog.conf").exists()
        for rank, (node, cores) in enumerate(want):
            got = json.loads((run / "steps" / step / f"rank.{rank}.json").read_text())
            assert got["argv"] == args, (step, rank, got["argv"][:12], len(got["argv"]))
            assert (got["node"], got["affinity"]) == (node, cores), (step, rank, got, want)
            assert got["procid"] == str(rank) and got["size"] == 3 and got["seen"] == [0, 1, 2], got
