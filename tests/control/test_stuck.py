"""fleet.control.stuck with the core's real Scheduler: which not-started steps an
allocation like this one could not start either, and why, for a suite's shapes."""

from __future__ import annotations

import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "core"))

from coretools import node, suite  # noqa: E402

from fleet.control.stuck import TOO_LONG, Stuck  # noqa: E402
from fleet.core.scheduler import NodeJoined, Scheduler, submission  # noqa: E402


def stuck_of(tables: list[dict], window: float) -> Stuck:
    s = suite(*tables)
    sched = Scheduler()
    sched.handle(NodeJoined(node("n1", 1)), 0.0)
    sched.handle(submission(s.steps), 0.0)
    return Stuck(types.SimpleNamespace(specs={x.id: x for x in s.steps}, sched=sched), window)


def test_a_chain_of_thousands_listed_dependents_first_is_judged_whole_without_recursing():
    # (the first version recursed once a link: RecursionError in the coordinator's close)
    n = 5000
    tables = [dict(id=f"s{i}", **({"deps": [f"s{i - 1}"]} if i else {"estimate": 600})) for i in range(n)][::-1]
    st = stuck_of(tables, window=100.0)
    whys = [st.why(f"s{i}") for i in reversed(range(n))]
    assert whys[-1].startswith(f"{TOO_LONG}: it takes about 10 min, and an allocation like this one gives steps 100 s")
    assert whys[0] == f"{TOO_LONG}: it needs s{n - 2}, which does"
    assert all(w is not None for w in whys)


def test_only_steps_that_are_too_long_or_need_one_are_judged_so():
    st = stuck_of([dict(id="fits", estimate=90), dict(id="huge", estimate=600), dict(id="after", deps=["huge"]),
                   dict(id="free", deps=["fits"]), dict(id="unknown")], window=100.0)
    assert st.why("fits") is None and st.why("free") is None and st.why("unknown") is None
    assert st.why("huge").startswith(TOO_LONG) and st.why("after") == f"{TOO_LONG}: it needs huge, which does"
    assert stuck_of([dict(id="huge", estimate=600)], window=None).why("huge") is None  # no end known


def test_what_needs_a_step_that_ran_out_of_the_job_needs_a_longer_allocation_too():
    # (no estimate: the drain interrupted it after it had the whole job, fleet.control.stuck.ran_out;
    # its dependents were judged free, so a resubmitting job script ran job after job)
    tables = [dict(id="endless"), dict(id="after", deps=["endless"]), dict(id="later", deps=["after"]),
              dict(id="other")]
    s = suite(*tables)
    sched = Scheduler()
    sched.handle(NodeJoined(node("n1", 1)), 0.0)
    sched.handle(submission(s.steps), 0.0)
    coord = types.SimpleNamespace(specs={x.id: x for x in s.steps}, sched=sched)
    assert Stuck(coord, 100.0).why("later") is None
    st = Stuck(coord, 100.0, {"endless": f"{TOO_LONG}: it ran 95 s of the 100 s ..."})
    assert st.why("after") == f"{TOO_LONG}: it needs endless, which does"
    assert st.why("later") == f"{TOO_LONG}: it needs after, which does"
    assert st.why("other") is None


def test_a_live_fleet_gives_a_step_a_minute_of_room_at_most_over_a_long_job_and_5_percent_of_a_short_one():
    # (5 % of any job before 2026-12-07: a step 100 s over a 2-hour job was resubmitted job
    # after job, and never started, as one 72 min over a 24-hour job)
    hour2 = stuck_of([dict(id="over", estimate=7300), dict(id="within", estimate=7250)], window=7200.0)
    assert hour2.why("over").startswith(f"{TOO_LONG}: it takes about 122 min, and an allocation like this one "
                                        "gives steps 120 min")
    assert hour2.why("within") is None
    short = stuck_of([dict(id="over", estimate=106), dict(id="within", estimate=104)], window=100.0)
    assert short.why("over") == (f"{TOO_LONG}: it takes about 106 s, and an allocation like this one gives steps "
                                 "100 s before its drain point")
    assert short.why("within") is None
    day = stuck_of([dict(id="over", estimate=86400 + 90)], window=86400.0)
    assert day.why("over").startswith(f"{TOO_LONG}: it takes about 1442 min, and an allocation like this one "
                                      "gives steps 1440 min")  # (not "1.44e+03 min")
