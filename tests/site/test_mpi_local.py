"""MPI steps on a local fleet (no batch system): Hydra `mpiexec -bind-to user:`, with
every rank checked by the rank-level probe (fleet.node.mpiprobe, mpi4py in the ranks
only). Real coordinator, agents, zygotes and MPICH."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from cluster import mpiexec_path, requires_mpi
from fleetharness import assert_nothing_left, env, events, fleet, write_suite

pytestmark = requires_mpi


def _probe_suite(tmp_path: Path, tag: str, ranks: int, threads: int = 1) -> Path:
    # The tag rides on the command line (the probe ignores its arguments), so that a
    # rank outliving the fleet can be found in the process table.
    command = json.dumps([sys.executable, "-m", "fleet.node.mpiprobe", tag])
    return write_suite(tmp_path / "s.toml", f"""
[suite]
name = "mpi"
run_dir = "run"
[[steps]]
id = "probe"
mpi = true
ranks = {ranks}
threads = {threads}
command = {command}
""")


def _ranks_against_placement(run_dir: Path, threads: int):
    """(what each rank reported, what the scheduler placed for each rank)."""
    ev = events(run_dir)
    [start] = [e for e in ev if e["kind"] == "start" and e["step"] == "probe"]
    want = []
    for slot in start["placement"]:
        c = slot["cores"]
        want += [c[i:i + threads] for i in range(0, len(c), threads)]
    result = json.loads((run_dir / "steps" / "probe" / "ranks.json").read_text())
    got = [r["affinity"] for r in sorted(result["ranks"], key=lambda r: r["rank"])]
    return result, got, want, start


def test_a_two_rank_mpi_step_on_two_pretend_nodes_runs_each_rank_on_exactly_its_placed_core(tmp_path):
    tag = f"mpi-local-{os.getpid()}-two"
    r = fleet("run", str(_probe_suite(tmp_path, tag, ranks=2)), "--nodes", "2", cwd=tmp_path, timeout=90)
    run_dir = tmp_path / "run"
    log = (run_dir / "steps" / "probe" / "log").read_text() if (run_dir / "steps/probe/log").exists() else ""
    assert r.returncode == 0, r.stdout + r.stderr + log
    result, got, want, start = _ranks_against_placement(run_dir, 1)
    assert result["mismatches"] == [], result
    assert len(want) == 2 and all(len(c) == 1 for c in want), start
    assert got == want, (got, start["placement"])
    assert got[0] != got[1]
    if os.cpu_count() == 2:  # one core per pretend node: the step must span both
        assert [s["node"] for s in start["placement"]] == ["node1", "node2"], start
    [exit_] = [e for e in events(run_dir) if e["kind"] == "exit" and e["step"] == "probe"]
    assert exit_["outcome"] == "succeeded"
    assert_nothing_left(run_dir, tag)


def test_an_mpi_rank_with_two_threads_is_bound_to_both_of_its_placed_cores(tmp_path):
    tag = f"mpi-local-{os.getpid()}-threads"
    r = fleet("run", str(_probe_suite(tmp_path, tag, ranks=1, threads=2)), cwd=tmp_path, timeout=90)
    run_dir = tmp_path / "run"
    assert r.returncode == 0, r.stdout + r.stderr
    result, got, want, start = _ranks_against_placement(run_dir, 2)
    assert result["mismatches"] == [], result
    assert len(want) == 1 and len(want[0]) == 2, start
    assert got == want, (got, start["placement"])
    assert_nothing_left(run_dir, tag)


def _probe_directly(tmp_path: Path, placed: str, bind: str) -> tuple[int, dict, str]:
    """Run the probe as one rank under Hydra, bound to `bind`, told it was placed on `placed`."""
    e = env()
    e["FLEET_RANKS"] = placed
    p = subprocess.Popen([mpiexec_path(), "-n", "1", "-bind-to", f"user:{bind}", sys.executable, "-m",
                          "fleet.node.mpiprobe"], cwd=tmp_path, env=e, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=60)
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    return p.returncode, json.loads((tmp_path / "ranks.json").read_text()), out


def test_the_probe_fails_and_says_so_when_a_rank_is_not_on_the_cores_it_was_placed_on(tmp_path):
    # So that a passing probe above means the binding was checked, not ignored.
    rc, result, out = _probe_directly(tmp_path, "ws:1", "0")
    assert rc != 0, out
    assert result["mismatches"] == ["rank 0 on " + result["ranks"][0]["node"] + ": cores [0], placed [1]"], result
    assert "placement mismatch" in out
    rc, result, out = _probe_directly(tmp_path, "ws:0", "0")
    assert rc == 0 and result["mismatches"] == [], out
    rc, result, out = _probe_directly(tmp_path, "ws:0;ws:1", "0")
    assert rc != 0 and result["mismatches"] == ["1 ranks ran, 2 were placed"], result


def test_every_rank_runs_the_command_as_written_even_with_a_placeholder_like_text_in_it(tmp_path):
    tag = f"mpi-local-{os.getpid()}-verbatim"
    # (The tag, an unused argument, lets a rank outliving the fleet be found.)
    # Each rank writes its own file (Hydra can interleave the ranks' output mid-word).
    code = ("import os, sys; open(os.path.join(sys.argv[1], 'rank' + os.environ['PMI_RANK']), 'w')"
            ".write('{fleet}'.format(fleet='rank-said-1'))")
    command = json.dumps([sys.executable, "-c", code, str(tmp_path), tag])
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "verbatim"
run_dir = "run"
[[steps]]
id = "fmt"
mpi = true
ranks = 2
command = {command}
""")
    r = fleet("run", str(suite), "--nodes", "2", cwd=tmp_path, timeout=90)
    run_dir = tmp_path / "run"
    log = (run_dir / "steps" / "fmt" / "log").read_text() if (run_dir / "steps/fmt/log").exists() else ""
    assert r.returncode == 0, r.stdout + r.stderr + log
    said = {p.name: p.read_text() for p in tmp_path.glob("rank*")}
    assert said == {"rank0": "rank-said-1", "rank1": "rank-said-1"} and ".fleet" not in log, (said, log)
    assert_nothing_left(run_dir, tag)


def test_a_hydra_rank_other_than_0_that_reads_stdin_gets_end_of_file_and_the_step_ends(tmp_path):
    # Hydra gives its stdin to rank 0 only; the others read a stream that never ended, and
    # the step held its cores until its timeout (the audit's env2.toml, mpistdin).
    tag = f"mpi-local-{os.getpid()}-stdin"
    # Each rank writes its own file: Hydra forwards the ranks' output in whatever pieces it
    # reads, so two ranks' lines can interleave in the step's log mid-word.
    code = ("import os, sys; d = sys.stdin.read(); "
            "open(os.path.join(sys.argv[1], 'rank' + os.environ['PMI_RANK']), 'w')"
            ".write(f'read {len(d)} bytes')")
    command = json.dumps([sys.executable, "-c", code, str(tmp_path), tag])
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "stdin"
run_dir = "run"
[[steps]]
id = "reads"
mpi = true
ranks = 2
timeout = 60
command = {command}
""")
    r = fleet("run", str(suite), "--nodes", "2", cwd=tmp_path, timeout=150)
    run_dir = tmp_path / "run"
    log = (run_dir / "steps/reads/log").read_text() if (run_dir / "steps/reads/log").exists() else ""
    [exit_] = [e for e in events(run_dir) if e["kind"] == "exit" and e["step"] == "reads"]
    assert exit_["outcome"] == "succeeded", (exit_, log)
    assert r.returncode == 0, r.stdout + r.stderr + log
    said = {p.name: p.read_text() for p in tmp_path.glob("rank*")}
    assert said == {"rank0": "read 0 bytes", "rank1": "read 0 bytes"}, (said, log)
    assert_nothing_left(run_dir, tag)


@requires_mpi
def test_lmods_exported_module_function_reaches_hydra_ranks_and_a_memory_limited_command(tmp_path):
    # Debian's sh (dash) drops environment entries whose names are no shell names, such as
    # Lmod's BASH_FUNC_module%%: a rank (or a command joining its cgroup) started through
    # it lost `module` (fleet.wire.execshell).
    tag = f"mpi-local-{os.getpid()}-module"
    calls = json.dumps(["bash", "-c", f": {tag}; module load netcdf"])
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "modules"
run_dir = "run"
[[steps]]
id = "ranks"
mpi = true
ranks = 2
timeout = 60
command = {calls}
[[steps]]
id = "limited"
memory = "1GiB"
timeout = 60
command = {calls}
""")
    module = '() {  echo "module-called $*";\n}'
    r = fleet("run", str(suite), "--nodes", "2", cwd=tmp_path, timeout=150, environ={"BASH_FUNC_module%%": module})
    run_dir = tmp_path / "run"
    logs = {s: (run_dir / f"steps/{s}/log").read_text() for s in ("ranks", "limited")}
    assert r.returncode == 0, (r.stdout + r.stderr, logs)
    assert logs["ranks"].count("module-called load netcdf") == 2, logs
    assert logs["limited"].count("module-called load netcdf") == 1, logs
    assert_nothing_left(run_dir, tag)
