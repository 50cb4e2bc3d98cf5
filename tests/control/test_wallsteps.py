"""Ages by the monotonic clock across steps of the wall clock (fleet.control.wallsteps):
a stamp is read on the span of the wall clock it was taken by, forward steps and back."""

from __future__ import annotations

from fleet.control.wallsteps import WallClock

HOUR = 3600.0


def _clock(wall0: float, mono0: float) -> WallClock:
    c = WallClock(beat_s=1.0)
    c.began, c.spans = mono0, [(mono0, wall0 - mono0)]
    return c


def test_a_stamp_before_a_forward_step_of_the_wall_clock_ages_by_the_monotonic_clock():
    c = _clock(1000.0, 10.0)
    stamp = 1005.0  # taken at mono 15
    c.look(1020.0 + 2 * HOUR, 30.0)  # the clock stepped two hours on between mono 15 and 30
    assert c.age(stamp, 1030.0 + 2 * HOUR, 40.0) == 25.0
    assert c.age(1025.0 + 2 * HOUR, 1030.0 + 2 * HOUR, 40.0) == 5.0  # (a stamp taken after it)
    assert c.up_s(40.0) == 30.0


def test_a_stamp_before_a_backward_step_is_read_on_the_clock_it_was_taken_by_and_never_in_the_future():
    c = _clock(1000.0 + HOUR, 10.0)
    stamp = 1005.0 + HOUR  # taken at mono 15
    c.look(1020.0, 30.0)  # an hour back
    assert c.age(stamp, 1030.0, 40.0) == 25.0
    assert c.age(1025.0, 1030.0, 40.0) == 5.0


def test_a_clock_that_never_stepped_ages_by_its_own_difference_and_small_slews_are_not_steps():
    c = _clock(1000.0, 10.0)
    c.look(1020.01, 30.0)  # 10 ms of slew: no step
    assert len(c.spans) == 1
    assert c.age(1005.0, 1030.0, 40.0) == 25.0
