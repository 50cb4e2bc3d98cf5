"""When a node runs out of memory the kernel's OOM killer takes a step, not fleet
(fleet.node.oomscore): every step process, call or command, runs with oom_score_adj
raised to STEP_ADJ, and the zygote, agent and coordinator keep their own. Read from
/proc through a real fleet (`fleet run`, its local fleet of one node)."""

from __future__ import annotations

import json
from pathlib import Path

from fleetharness import assert_nothing_left, fleet, write_suite

from fleet.node.oomscore import STEP_ADJ


def own_adj() -> int:
    return int(Path("/proc/self/oom_score_adj").read_text())


def test_steps_are_the_oom_killers_first_choice_and_fleets_own_processes_are_not(tmp_path):
    tag = str(tmp_path)
    base = own_adj()
    assert base < STEP_ADJ, "this test process is raised already: the test would prove nothing"
    write_suite(tmp_path / "s.toml", f'''[suite]
name = "oom"
run_dir = "run"
[[steps]]
id = "call"
call = "fleet_steps:oom_chain"
[[steps]]
id = "command"
command = "sleep 0.3; cat /proc/self/oom_score_adj > own; cat /proc/$PPID/oom_score_adj > parent # {tag}"
''')
    r = fleet("run", "s.toml", "--nodes", "1", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    run = tmp_path / "run"
    chain = json.loads(next(run.rglob("oom.json")).read_text())
    step, *fleet_procs = chain
    assert step["adj"] == STEP_ADJ, chain
    names = " ".join(" ".join(p["cmd"]) for p in fleet_procs)
    for part in ("fleet.node.zygote", "fleet.node.agent", "fleet.control.coordinator"):
        assert part in names, f"{part} is not among the step's ancestors: {chain}"
    assert all(p["adj"] == base for p in fleet_procs if "fleet" in " ".join(p["cmd"])), chain
    workdir = next(p.parent for p in run.rglob("own"))
    assert int((workdir / "own").read_text()) == STEP_ADJ  # the command's process, raised by the zygote
    assert int((workdir / "parent").read_text()) == base   # its parent: the zygote
    assert_nothing_left(run, tag)
