"""fleet.control.heap: what survives a costly full collection is frozen, in a process
of its own (a freeze in the test process would hide the tests' own garbage)."""

import textwrap

from fleetharness import script_json

SCRIPT = textwrap.dedent("""
    import gc, json, sys
    from fleet.control import heap
    heap.FULL_S = float(sys.argv[1])
    heap.watch()
    kept = [[i] for i in range(200_000)]        # live: tracked lists
    for _ in range(200_000):                     # garbage only a collection frees
        a = []; a.append(a)
    before = gc.get_freeze_count()
    gc.collect()
    frozen = heap.after_collection()
    cycles = [[] for _ in range(3)]
    for c in cycles:
        c.append(c)
    print(json.dumps({"frozen": frozen, "added": gc.get_freeze_count() - before,
                      "again": heap.after_collection(), "kept": len(kept)}))
""")


def _run(full_s: float) -> dict:
    return script_json(SCRIPT, str(full_s))


def test_what_survives_a_costly_full_collection_is_frozen_once_and_the_garbage_it_freed_is_not():
    got = _run(0.0)  # every full collection counts as costly
    assert got["frozen"] is True and got["again"] is False
    # The 200,000 live lists (and the interpreter's own objects, tens of thousands) are
    # frozen; the 200,000 self-referencing lists were freed by that collection, not frozen.
    assert 200_000 <= got["added"] < 400_000, got


def test_a_cheap_full_collection_freezes_nothing():
    got = _run(3600.0)
    assert got == {"frozen": False, "added": 0, "again": False, "kept": 200_000}
