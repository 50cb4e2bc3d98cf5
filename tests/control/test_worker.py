"""fleet.control.worker: the coordinator's worker thread, in a process of its own (the
switch interval it sets is the process's)."""

import textwrap

from fleetharness import script_json

SCRIPT = textwrap.dedent("""
    import json, os, select, sys
    sys.setswitchinterval(float(sys.argv[1]))
    from fleet.control import worker
    w = worker.Worker("test")
    w.put("sum", sum, range(1000))
    w.put("bad", int, "x")
    select.select([w.fd], [], [], 60)
    got = []
    while len(got) < 2:
        got += w.collect()
        if len(got) < 2:
            select.select([w.fd], [], [], 60)
    print(json.dumps({"switch": sys.getswitchinterval(), "limit": worker.SWITCH_S,
                      "done": [[d.tag, d.value, type(d.error).__name__] for d in got]}))
""")


def _run(switch_s: float) -> dict:
    return script_json(SCRIPT, str(switch_s))


def test_the_worker_runs_jobs_in_order_and_makes_the_loop_wait_at_most_its_short_switch_interval_for_the_lock():
    got = _run(0.005)  # CPython's default
    # (CPython keeps the interval in whole microseconds)
    assert abs(got["switch"] - got["limit"]) < 2e-6 and got["limit"] < 0.005
    assert got["done"] == [["sum", 499500, "NoneType"], ["bad", None, "ValueError"]]


def test_a_switch_interval_already_shorter_is_kept():
    got = _run(0.0001)
    assert abs(got["switch"] - 0.0001) < 2e-6


CLOSED = textwrap.dedent("""
    import json, os, select, threading
    from fleet.control import worker
    w = worker.Worker("test")
    entered, release = threading.Event(), threading.Event()
    w.put("slow", lambda: (entered.set(), release.wait(30)))
    entered.wait(30)
    old = w.fd, w._w
    w.close(timeout=0.05)  # the job goes on past the wait
    r, wr = os.pipe()  # takes the lowest free numbers: the worker's, were they closed
    release.set()
    w._thread.join(30)
    print(json.dumps({"same": sorted(old) == sorted((r, wr)),
                      "woke": bool(select.select([r], [], [], 0.2)[0])}))
""")


def test_a_worker_closed_in_the_middle_of_a_job_never_wakes_into_the_file_that_took_its_pipes_numbers():
    got = script_json(CLOSED)
    assert got == {"same": False, "woke": False}  # its pipe left open: nothing took its numbers
