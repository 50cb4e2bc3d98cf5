"""A machine profile whose held_back_cores are every core a real Slurm job gives it on a
node (fleet.node.heldback, fleet.control.nocores): on one node of two, the fleet comes
up and every part of it names that node and the profile; on both, it does not come up.

The job asks for 3 tasks on 2 nodes of 2 cores, so Slurm gives one node 2 cores and
the other 1 (srun's agents see those alone, even unbound): holding back that one core
leaves its node none. Which node has it is Slurm's to say; the job script finds out
and writes the two profiles (before 2026-12-07 both fleets came up in silence, the
second with no core at all)."""

from __future__ import annotations

import json
import sys
import textwrap

from cluster import requires_slurm, sbatch_wait
from fleetharness import REPO, TESTS

pytestmark = [requires_slurm]

JOB_TIMEOUT = 240.0  # queueing included; normally ~20 s

PROFILES = textwrap.dedent("""\
    import json, sys
    seen = {}
    for line in open("affinity"):
        node, cpus = line.split(" ", 1)
        seen[node] = sorted(json.loads(cpus))
    small = min(seen, key=lambda n: len(seen[n]))
    json.dump({"empty": small, "cores": seen}, open("seen.json", "w"))
    every = sorted(set().union(*map(set, seen.values())))
    for name, held in (("part", seen[small]), ("none", every)):
        open(f"machines/{name}.toml", "w").write(
            f'[machine]\\nlauncher = "slurm"\\nmpi = "srun"\\nheld_back_cores = {held}\\n')
    """)


def test_a_node_whose_cores_are_all_held_back_is_named_and_a_fleet_with_no_core_left_does_not_come_up(tmp_path):
    (tmp_path / "machines").mkdir()
    (tmp_path / "profiles.py").write_text(PROFILES)
    (tmp_path / "two.toml").write_text('[suite]\nname = "two"\n[[steps]]\nid = "two"\ncommand = "true"\ncores = 2\n')
    script = tmp_path / "job.sh"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        cd {tmp_path}
        export PYTHONPATH={TESTS}:{REPO}${{PYTHONPATH:+:$PYTHONPATH}}
        unset FLEET_RUN_DIR FLEET_MACHINE
        export FLEET_MACHINES={tmp_path / "machines"}
        PY={sys.executable}
        # what the agents will see on each node (as they are started: fleet.site.launch.SlurmLauncher)
        timeout -k 5 30 srun --overlap --mpi=none --cpu-bind=none -N 2 -n 2 --ntasks-per-node=1 \\
            $PY -c 'import os, json; print(os.environ["SLURMD_NODENAME"], json.dumps(sorted(os.sched_getaffinity(0))))' \\
            > affinity
        $PY profiles.py || exit 1
        timeout -k 5 60 $PY -m fleet up --run-dir run-part --machine part --timeout 30 > part.out 2> part.err
        echo $? > part.rc
        timeout -k 5 30 $PY -m fleet status --run-dir run-part --nodes > part.status 2>&1
        timeout -k 5 60 $PY -m fleet run two.toml --run-dir run-part > part.run 2>&1
        echo $? > part.runrc
        [ -e run-part/fleet.json ] && timeout -k 5 40 $PY -m fleet down --run-dir run-part
        timeout -k 5 60 $PY -m fleet up --run-dir run-none --machine none --timeout 30 > none.out 2> none.err
        echo $? > none.rc
        # (the old code's fleet came up: stopped before the job ends)
        [ -e run-none/fleet.json ] && timeout -k 5 40 $PY -m fleet down --run-dir run-none
        exit 0
        """))
    rc, out = sbatch_wait(script, JOB_TIMEOUT, cwd=tmp_path,
                          sbatch_args=("-N", "2", "-n", "3", "-t", "4", "-J", "fleet-test", "-o", str(tmp_path / "job.out")))
    assert rc == 0, out
    seen = json.loads((tmp_path / "seen.json").read_text())
    empty, cores = seen["empty"], seen["cores"]
    assert sorted(cores) == ["node1", "node2"] and len(cores[empty]) == 1, seen
    other = "node2" if empty == "node1" else "node1"
    [core] = cores[empty]
    why = f"all 1 core this job gives it on {empty} is held back by machine profile part's held_back_cores [{core}]"
    said = {f: (tmp_path / f).read_text() for f in ("part.out", "part.err", "part.status", "part.run", "none.out", "none.err")}

    # Some nodes empty: up (its other node runs steps), and named everywhere.
    assert (tmp_path / "part.rc").read_text().strip() == "0", said
    assert "fleet up: warning: 1 of its 2 nodes offers no core for steps" in said["part.err"], said
    assert f"  {empty}: no core for steps: {why}" in said["part.err"], said
    assert f"no core for steps: {why}" in said["part.status"], said
    agents = "".join(p.read_text() for p in (tmp_path / "run-part" / "agents").glob("*.log"))
    assert f"fleet agent {empty}: offering no core: {why}" in agents, agents
    log = (tmp_path / "run-part" / "coordinator.log").read_text()
    assert f"node {empty} offers no core for steps: {why}" in log, log
    recs = [json.loads(line) for line in (tmp_path / "run-part" / "events.jsonl").read_text().splitlines()]
    joined = {r["node"]: r for r in recs if r["kind"] == "node_joined"}
    assert joined[empty]["cores"] == [] and joined[empty]["held_back"] == [core], joined
    assert joined[other]["cores"] and joined[other]["held_back"] == [core], joined
    assert [r.get("no_cores") for r in recs if r["kind"] == "fleet_up"] == [[empty]], recs
    # A step too wide for what is left is refused, and the refusal says where the cores went.
    assert (tmp_path / "part.runrc").read_text().strip() == "2", said
    assert (f"the largest node that could hold it has 1 (the step may not span nodes); 1 node ({empty}) offers no "
            f"core, every core this job gives it there held back by machine profile part's held_back_cores [{core}]"
            in said["part.run"]), said

    # Every node empty: nothing could run, so it does not come up, and says why.
    assert (tmp_path / "none.rc").read_text().strip() != "0", said
    # (not only in the log's tail below it; after the warnings fleet up may print first, such as
    # this test cluster's loopback address: fleet.control.loopback)
    first = [line for line in said["none.err"].splitlines() if not line.startswith("fleet up: warning:")][0]
    assert "none of its 2 nodes (node1, node2) has a core for steps: machine profile none (" in first, said
    assert "hold back fewer in the profile's held_back_cores" in said["none.err"], said
    assert not (tmp_path / "run-none" / "fleet.json").exists()
    failed = [json.loads(line) for line in (tmp_path / "run-none" / "events.jsonl").read_text().splitlines()
              if '"fleet_failed"' in line]
    assert failed and "none of its 2 nodes (node1, node2) has a core for steps" in failed[-1]["reason"], failed
