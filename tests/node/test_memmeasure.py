"""The watchdog's count of a step's memory (fleet.node.memmeasure), on real processes:
this test's process plays the zygote (it holds memory its forked "step" inherits), the
step touches memory of its own and forks children that share it and touch more."""

from __future__ import annotations

import os
import select
import signal
import time

import pytest

from fleet.node import memmeasure

MIB = 1 << 20


def _touched(mib: int) -> bytearray:
    data = bytearray(mib * MIB)
    data[::4096] = b"\x01" * len(range(0, len(data), 4096))  # every page written: resident
    return data


@pytest.fixture
def step():
    """start(own, children, child_mib): a process forked from this one that touches
    ``own`` MiB, then forks ``children`` processes each touching ``child_mib`` MiB more
    (all of them share the ``own``), in a session of its own; its pids once all are
    ready. Killed by session at the end."""
    leaders = []

    def start(own: int, children: int = 0, child_mib: int = 0) -> list[int]:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                os.setsid()
                mine = _touched(own)
                kids = []
                for _ in range(children):
                    kid = os.fork()
                    if kid == 0:
                        theirs = _touched(child_mib)
                        os.write(w, b"k")
                        time.sleep(120)
                        os._exit(len(mine) + len(theirs) & 1)
                    kids.append(kid)
                os.write(w, (" ".join(map(str, [os.getpid(), *kids])) + "\n").encode())
                time.sleep(120)
            finally:
                os._exit(0)
        os.close(w)
        leaders.append(pid)
        got, deadline = b"", time.monotonic() + 60
        while got.count(b"k") < children or b"\n" not in got:
            assert select.select([r], [], [], max(0.0, deadline - time.monotonic()))[0], got
            got += os.read(r, 4096)
        os.close(r)
        return [int(p) for p in got.replace(b"k", b"").split(b"\n")[0].split()]

    yield start
    for pid in leaders:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(pid, 0)


@pytest.fixture(scope="module")
def zygote_memory():
    """Memory this process (the zygote) holds while the tests fork from it: 120 MiB."""
    held = _touched(120)
    yield held


def test_memory_a_steps_processes_share_among_themselves_counts_once_and_what_they_share_with_the_zygote_not_at_all(
        step, zygote_memory):
    pids = step(100, children=2, child_mib=25)  # 150 MiB of the step's own, 100 of it shared by 3
    me = os.getpid()
    over, within = memmeasure.used(pids, 140 * MIB, me), memmeasure.used(pids, 190 * MIB, me)
    assert 150 * MIB <= over <= 185 * MIB and abs(over - within) < MIB, (over / MIB, within / MIB)  # (the count, both)
    # Each process's private memory leaves the 100 MiB out; their RSS counts it 3 times,
    # the zygote's 120 MiB too; their PSS a part of the zygote's (a quarter each here).
    assert memmeasure.used(pids, 1 << 40, me) > 3 * (100 + 120) * MIB
    assert memmeasure.used(pids, 190 * MIB, 0) > 190 * MIB  # (not told the zygote: every page's share)


def test_a_cheap_bound_answers_when_it_is_on_one_side_of_the_limit(step, zygote_memory):
    pids = step(40, children=2, child_mib=10)  # 60 MiB of its own
    me = os.getpid()
    assert memmeasure.used(pids, 1 << 40, me) > 3 * 150 * MIB  # within by RSS: its RSS
    uss = memmeasure.used(pids, 15 * MIB, me)  # past by USS (the children's 20 MiB): its USS
    assert 20 * MIB <= uss < 40 * MIB
    pss = memmeasure.used(pids, 400 * MIB, me)  # within by PSS: its PSS, with a share of the zygote's
    assert 60 * MIB + 3 * 120 * MIB // 4 <= pss <= 400 * MIB


def test_a_step_of_one_process_counts_its_private_memory_not_what_it_inherited(step, zygote_memory):
    [pid] = step(30)
    got = memmeasure.used([pid], 100 * MIB, os.getpid())
    assert 30 * MIB <= got < 40 * MIB, got / MIB


SMAPS = """\
{start}-{end} rw-p 00000000 00:00 0 {name}
Size:               1024 kB
Rss:                 512 kB
Pss:                 {pss} kB
Private_Clean:         {clean} kB
Private_Dirty:       {dirty} kB
{extra}VmFlags: rd wr mr mw me ac
"""


def test_an_smaps_whose_mappings_differ_in_their_fields_is_read_line_by_line_to_the_same_count():
    """The count reads smaps by stride where every mapping has the same fields (one
    kernel's), else line by line: the same count either way."""
    maps = [("55aa00000000", "55aa00100000", "", 300, 10, 20), ("7f0000000000", "7f0000100000", "[heap]", 400, 1, 2),
            ("7f1000000000", "7f1000100000", "/lib/x.so", 50, 5, 0)]
    inherited = frozenset({b"7f0000000000"})
    expected = (300 + (1 + 2) + 50) << 10
    for extra in ("", "THPeligible:    0\n"):
        text = "".join(SMAPS.format(start=a, end=b, name=n, pss=p, clean=c, dirty=d, extra=extra if i == 1 else "")
                       for i, (a, b, n, p, c, d) in enumerate(maps))
        lines = text.encode().split(b"\n")
        assert (memmeasure._layout(lines) is None) == bool(extra)
        assert memmeasure._count(lines, inherited) == memmeasure._by_line(lines, inherited) == expected
