"""Whose OOM it was, from a step's cgroup files after its exit: the step's own limit
(out_of_memory, not retried) or the node's or a parent cgroup's (terminated, retried,
its neighbours named), and what a step that went on despite a kill in it is told.
The files are written here as each kernel interface spells them (cgroup v2
memory.events, v1 memory.oom_control and the counters); the real kernel's are used by
tests/control/test_oom_attribution.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.core import states as S
from fleet.node import memlimit as M
from fleet.node import memwatch
from fleet.wire import messages as P

MIB = 1 << 20
V1, V2 = M.Choice(M.CGROUP1, "/x"), M.Choice(M.CGROUP2, "/x")


def v2_cgroup(d: Path, *, max_: int, oom: int, oom_kill: int, peak: int) -> Path:
    d.mkdir()
    (d / "memory.events").write_text(f"low 0\nhigh 0\nmax {max_}\noom {oom}\noom_kill {oom_kill}\noom_group_kill 0\n")
    (d / "memory.peak").write_text(f"{peak}\n")
    return d


def v1_cgroup(d: Path, *, peak: int, limit: int, oom_kill: int, failcnt: int = 0, memsw_peak: int | None = None) -> Path:
    d.mkdir()
    (d / "memory.max_usage_in_bytes").write_text(f"{peak}\n")
    (d / "memory.limit_in_bytes").write_text(f"{limit}\n")
    (d / "memory.failcnt").write_text(f"{failcnt}\n")
    (d / "memory.oom_control").write_text(f"oom_kill_disable 0\nunder_oom 0\noom_kill {oom_kill}\n")
    if memsw_peak is not None:
        (d / "memory.memsw.max_usage_in_bytes").write_text(f"{memsw_peak}\n")
    return d


def exited(outcome: str, **over) -> P.Exited:
    fields = dict(step="s", attempt=1, pid=7, outcome=outcome, returncode=None, signal=None, decided_at=1.0,
                  first_at=1.0, work_start=1.0, work_end=2.0, ended_at=2.0, utime=0.0, stime=0.0, maxrss_kb=0,
                  affinity=(), placement_ok=True, error=None)
    fields.update(over)
    return P.Exited(**fields)


def test_under_cgroup_v2_an_oom_kill_without_an_oom_at_the_step_s_own_memory_max_is_not_its_own(tmp_path):
    parent_s = M.usage(V2, str(v2_cgroup(tmp_path / "a", max_=0, oom=0, oom_kill=1, peak=322 * MIB)))
    own = M.usage(V2, str(v2_cgroup(tmp_path / "b", max_=40, oom=1, oom_kill=1, peak=340 * MIB)))
    reclaimed = M.usage(V2, str(v2_cgroup(tmp_path / "c", max_=40, oom=0, oom_kill=0, peak=340 * MIB)))
    assert (parent_s.oom_kills, parent_s.own_oom, parent_s.hit_limit) == (1, False, False)
    assert (own.oom_kills, own.own_oom, own.hit_limit) == (1, True, True)
    assert (reclaimed.own_oom, reclaimed.hit_limit) == (False, True)


def test_under_cgroup_v1_a_kill_is_the_step_s_own_only_if_it_reached_its_limit_with_or_without_swap(tmp_path):
    limit = 340 * MIB
    below = M.usage(V1, str(v1_cgroup(tmp_path / "a", peak=322 * MIB, limit=limit, oom_kill=1, memsw_peak=322 * MIB)))
    at = M.usage(V1, str(v1_cgroup(tmp_path / "b", peak=limit, limit=limit, oom_kill=1, memsw_peak=limit)))
    # Swapped out under the node's pressure, the memory+swap counter (memsw) is the one at the limit.
    swapped = M.usage(V1, str(v1_cgroup(tmp_path / "c", peak=300 * MIB, limit=limit, oom_kill=1, memsw_peak=limit)))
    counted = M.usage(V1, str(v1_cgroup(tmp_path / "d", peak=300 * MIB, limit=limit, oom_kill=1, failcnt=3)))
    assert (below.oom_kills, below.own_oom, below.hit_limit) == (1, False, False)
    assert at.own_oom and swapped.own_oom and counted.own_oom
    assert not M.usage(V1, str(v1_cgroup(tmp_path / "e", peak=limit, limit=limit, oom_kill=0))).own_oom


@pytest.mark.parametrize("outcome", [S.FAILED, S.TERMINATED])
def test_a_step_killed_at_its_own_limit_is_out_of_memory_and_one_killed_within_it_keeps_its_outcome(outcome):
    own = M.Usage(340 * MIB, 1, True, True)
    parents = M.Usage(322 * MIB, 1, False, False)
    msg = exited(outcome, signal=9 if outcome == S.TERMINATED else None, error="killed by SIGKILL")
    got = memwatch.judge_cgroup(msg, 340 * MIB, own, V1)
    assert got.outcome == S.OUT_OF_MEMORY and got.error.startswith("out of memory: used 340MiB of its memory 340MiB")
    kept = memwatch.judge_cgroup(msg, 340 * MIB, parents, V1)
    assert kept.outcome == outcome and kept.oom_kills == 1 and kept.memory_peak == 322 * MIB
    assert kept.error == ("killed by SIGKILL; the kernel's OOM killer took 1 process of it within its memory "
                          "340MiB (used 322MiB): the node or a parent cgroup ran out"), kept.error


def test_a_step_that_succeeded_despite_a_process_killed_at_its_limit_stays_succeeded_and_says_so():
    got = memwatch.judge_cgroup(exited(S.SUCCEEDED, returncode=0), 128 * MIB, M.Usage(128 * MIB, 2, True, True), V2)
    assert got.outcome == S.SUCCEEDED and got.oom_kills == 2
    assert got.error == "the kernel killed 2 processes of it at its memory 128MiB (cgroup v2 memory.max; used 128MiB)"
    quiet = memwatch.judge_cgroup(exited(S.SUCCEEDED, returncode=0), 128 * MIB, M.Usage(5 * MIB, 0, False), V2)
    assert quiet.error is None and quiet.oom_kills is None and quiet.memory_peak == 5 * MIB
