"""Which step produces a path (fleet.control.producers), looked up once per child input
and output on the coordinator's loop. Review 14's F3: each look-up scanned all the
producer's outputs, so 8,000 children each reading one of a step's 8,000 outputs
waited 5.6 s on the loop (N^2 path normalisations). Work is counted, not timed."""

from __future__ import annotations

import os

from fleet.control.producers import Producers
from fleet.core.suite import StepSpec


def counting_normpath(monkeypatch) -> list:
    calls = [0]
    real = os.path.normpath

    def normpath(p):
        calls[0] += 1
        return real(p)

    monkeypatch.setattr(os.path, "normpath", normpath)
    return calls


def test_looking_up_each_of_a_steps_many_outputs_costs_a_constant_each_not_a_scan_of_its_outputs(monkeypatch):
    n = 3000
    gen = StepSpec(id="gen", order=0, command="true", outputs=tuple(f"./chunks/c{i}.dat" for i in range(n)))
    specs = {"gen": gen}
    producers = Producers(specs)
    producers.declared([gen])
    calls = counting_normpath(monkeypatch)
    assert [producers.of(f"chunks/c{i}.dat") for i in range(n)] == ["gen"] * n
    assert calls[0] <= 2 * n, calls[0]  # (the set made once; before: about n * n / 2)
    # Children taken with many outputs each look themselves up as they are indexed.
    kids = [StepSpec(id=f"p/k{j}", order=j, command="true", outputs=tuple(f"k{j}/o{i}" for i in range(300)))
            for j in range(10)]
    calls[0] = 0
    producers.take(kids)
    assert producers.of("k9/o299") == "p/k9" and calls[0] <= 3 * 300 * 10, calls[0]
    # A definition without that output any more no longer produces it; one withdrawn neither.
    specs["gen"] = StepSpec(id="gen", order=0, command="true", outputs=tuple(f"chunks/c{i}.dat" for i in range(1, n)))
    assert producers.of("chunks/c0.dat") is None and producers.of("chunks/c1.dat") == "gen"
    del specs["gen"]
    assert producers.of("chunks/c2.dat") is None and "gen" not in producers.sets
