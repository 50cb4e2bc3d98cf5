"""A non-MPI step that spans nodes runs its process on its first node, held there to
that node's share of its memory: past it, its reason names the share and the whole
(`its share on node1, 100MiB of its 200MiB`), not a "memory" that contradicts its
declaration. A real local fleet of two pretend nodes, and the wording alone."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fleetharness import assert_nothing_left, cgroup1_unwritable, fleet, records, write_suite

from fleet.control.spanshare import reworded
from fleet.core.resources import Slot
from fleet.node.probe import usable_cores
from fleet.wire import events as E
from fleet.wire import messages as P

MIB = 1 << 20


def exited(error: str) -> P.Exited:
    return P.Exited(step="sp", attempt=1, pid=1, outcome="out_of_memory", returncode=None, signal=9, decided_at=0.0,
                    first_at=0.0, work_start=0.0, work_end=0.0, ended_at=0.0, utime=0.0, stime=0.0, maxrss_kb=0,
                    affinity=(), placement_ok=True, error=error)


def test_a_spanning_step_s_memory_reason_names_its_share_on_its_node_and_what_it_declared():
    view = SimpleNamespace(placement=(Slot("node1", (0,), (), 100 * MIB), Slot("node2", (0,), (), 100 * MIB)))
    spec = SimpleNamespace(mpi=False, memory=200 * MIB)
    msg = reworded(exited("out of memory: used 100MiB of its memory 100MiB; killed by the kernel at its cgroup v1 "
                          "memory.limit_in_bytes"), view, spec)
    assert msg.error == ("out of memory: used 100MiB of its share on node1, 100MiB of its 200MiB; killed by the "
                         "kernel at its cgroup v1 memory.limit_in_bytes")
    note = "the kernel killed 1 process of it at its memory 100MiB (cgroup v1 memory.limit_in_bytes; used 100MiB)"
    assert reworded(exited(note), view, spec).error.startswith(
        "the kernel killed 1 process of it at its share on node1, 100MiB of its 200MiB (")
    # An MPI step (srun holds each node's ranks), one node, no declaration: as it was.
    for v, s in ((view, SimpleNamespace(mpi=True, memory=200 * MIB)), (SimpleNamespace(placement=view.placement[:1]), spec),
                 (view, SimpleNamespace(mpi=False, memory=None))):
        assert reworded(exited("out of memory: used 100MiB of its memory 100MiB; x"), v, s).error.endswith(
            "of its memory 100MiB; x")


@pytest.mark.skipif(len(usable_cores()) < 2, reason="two pretend nodes need two cores")
@pytest.mark.skipif(cgroup1_unwritable() is not None, reason=f"no writable cgroup v1: {cgroup1_unwritable()}")
def test_a_spanning_step_past_its_share_on_its_node_ends_out_of_memory_naming_the_share(tmp_path):
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "span"\nrun_dir = "run"\n[[steps]]\nid = "sp"\n'
                                             'command = ["python3", "-c", "b = b\'\\\\x01\' * (150 << 20)"]\n'
                                             'cores = 2\nspan = true\nmemory = "200MiB"\n')
    r = fleet("run", str(suite), "--nodes", "2", cwd=tmp_path, timeout=120, environ={"FLEET_MEMLIMIT": "cgroup1"})
    assert r.returncode == 1, r.stdout + r.stderr
    [e] = [e for e in records(tmp_path / "run") if isinstance(e, E.Exit)]
    assert e.outcome == "out_of_memory" and e.memory == 200 * MIB, e
    assert "of its share on node1, 100MiB of its 200MiB; killed by the kernel" in e.reason, e.reason
    assert "of its share on node1, 100MiB of its 200MiB" in r.stdout, r.stdout
    assert_nothing_left(tmp_path / "run")
