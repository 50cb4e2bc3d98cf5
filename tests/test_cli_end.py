"""The allocation-end options of the command line (fleet/cli_options.py): `--end TIME`,
`--walltime DURATION` and `--drain-before DURATION`, read as `fleet up` and `fleet run`
read them. Times of day and ISO times without an offset are the machine's local time:
each test that depends on it runs in a named time zone (set through TZ), one with a
clock change, so that local time and UTC cannot be confused unnoticed."""

from __future__ import annotations

import os
import time
from datetime import datetime
from zoneinfo import ZoneInfo

import click
import pytest
from click.testing import CliRunner

from fleet.cli_options import end_args, end_options, parse_duration, parse_end

BERLIN = "Europe/Berlin"  # CET/CEST: the clocks go forward on 2026-03-29 at 02:00


@pytest.fixture
def zone():
    """Run the test in a time zone of its choosing (zone(name) -> its ZoneInfo); the
    machine's zone is back afterwards."""
    before = os.environ.get("TZ")

    def use(name: str) -> ZoneInfo:
        os.environ["TZ"] = name
        time.tzset()
        return ZoneInfo(name)

    yield use
    if before is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = before
    time.tzset()


def at(tz: ZoneInfo, *fields: int) -> float:
    return datetime(*fields, tzinfo=tz).timestamp()


# --- --end ---------------------------------------------------------------------------------

def test_a_time_of_day_still_to_come_is_that_time_today_in_the_machines_time_zone(zone):
    tz = zone(BERLIN)
    now = at(tz, 2026, 5, 1, 9, 30)
    assert parse_end("18:00", now) == at(tz, 2026, 5, 1, 18, 0)
    assert parse_end("18:00:30", now) == at(tz, 2026, 5, 1, 18, 0, 30)
    assert parse_end(" 9:45 ", now) == at(tz, 2026, 5, 1, 9, 45)
    assert parse_end("18:00", now) - now == 8.5 * 3600  # not UTC's 18:00, two hours later


def test_a_time_of_day_already_past_or_now_is_that_time_tomorrow(zone):
    tz = zone(BERLIN)
    now = at(tz, 2026, 5, 1, 19, 0)
    assert parse_end("18:00", now) == at(tz, 2026, 5, 2, 18, 0)
    assert parse_end("18:59:59", now) == at(tz, 2026, 5, 2, 18, 59, 59)
    # Now itself is not to come: the next one is tomorrow's.
    assert parse_end("19:00", now) == at(tz, 2026, 5, 2, 19, 0)
    assert parse_end("19:00:01", now) == now + 1


def test_a_past_time_of_day_before_the_clocks_go_forward_is_tomorrows_wall_clock_time_23_hours_on(zone):
    tz = zone(BERLIN)
    now = at(tz, 2026, 3, 28, 20, 0)  # the evening before the change
    end = parse_end("18:00", now)
    assert end == at(tz, 2026, 3, 29, 18, 0)  # 18:00 CEST on the clocks
    assert end - at(tz, 2026, 3, 28, 18, 0) == 23 * 3600


def test_an_iso_date_and_time_is_local_unless_it_names_its_offset(zone):
    tz = zone(BERLIN)
    now = at(tz, 2026, 4, 1, 12, 0)
    assert parse_end("2026-05-01T18:00", now) == at(tz, 2026, 5, 1, 18, 0)
    assert parse_end("2026-05-01 18:00:15", now) == at(tz, 2026, 5, 1, 18, 0, 15)
    assert parse_end("2026-05-01T18:00+00:00", now) == at(ZoneInfo("UTC"), 2026, 5, 1, 18, 0)
    assert parse_end("2026-05-01T18:00+02:00", now) == at(tz, 2026, 5, 1, 18, 0)  # CEST, named
    assert parse_end("2026-05-01", now) == at(tz, 2026, 5, 1, 0, 0)  # a date alone: its midnight
    # A date and time is taken as it is, past or not (the fleet then drains at once).
    assert parse_end("2026-03-01T18:00", now) == at(tz, 2026, 3, 1, 18, 0)


def test_epoch_seconds_are_taken_as_they_are():
    assert parse_end("1780000000", now=0.0) == 1780000000.0
    assert parse_end("1780000000.25", now=0.0) == 1780000000.25


@pytest.mark.parametrize("text", ["noon", "", "25:00", "18:60", "18h", "tomorrow 18:00", "2026-13-01T18:00",
                                  "12345"])
def test_a_value_that_is_no_time_is_refused_naming_the_forms_a_time_takes(text):
    with pytest.raises(ValueError) as e:
        parse_end(text, now=0.0)
    assert str(e.value) == f"{text!r} is not a time (epoch seconds, nine digits or more; 2026-05-01T18:00; or 18:00)"


# --- --walltime and --drain-before -------------------------------------------------------

@pytest.mark.parametrize("text, seconds", [
    ("90", 90), ("2.5", 2.5), ("20s", 20), ("90m", 5400), ("1h30m", 5400), ("1.5h", 5400), ("2d", 172800),
    ("1d12h", 129600), (" 20S ", 20),
    # As Slurm writes a time limit: MM:SS, HH:MM:SS, D-HH:MM, D-HH:MM:SS; and D-HH, as its --time takes it.
    ("05:00", 300), ("1:30", 90), ("01:30:00", 5400), ("1-02:30", 86400 + 9000), ("1-00:00:01", 86401),
    ("1-12", 129600), ("0-02", 7200),
])
def test_a_duration_is_a_number_of_seconds_units_or_a_slurm_time_limit(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["soon", "", "-5m", "1h30", "1:2:3:4", "5 m"])
def test_a_value_that_is_no_duration_is_refused_with_examples_of_one(text):
    with pytest.raises(ValueError) as e:
        parse_duration(text)
    assert str(e.value) == f"{text!r} is not a duration (e.g. 20s, 90m, 1h30m, 01:30:00)"


# --- the options on a command line --------------------------------------------------------

@click.command()
@end_options
def ends(end, walltime, drain_before):
    """A command with the options as `fleet up` has them: prints what it was given."""
    click.echo(f"{end!r} {walltime!r} {drain_before!r}")


def invoke(*args: str):
    return CliRunner().invoke(ends, list(args), catch_exceptions=False)


def test_the_end_options_on_a_command_line_give_an_epoch_end_and_durations_in_seconds(zone):
    zone(BERLIN)
    r = invoke("--end", "2026-05-01T18:00", "--drain-before", "10m")
    assert r.exit_code == 0, r.output
    assert r.output.split() == [repr(parse_end("2026-05-01T18:00")), "None", "600.0"]
    r = invoke("--walltime", "01:30:00")
    assert r.exit_code == 0, r.output
    assert r.output.split() == ["None", "5400.0", "None"]
    r = invoke()
    assert r.output.split() == ["None", "None", "None"]  # the batch job's end, read by the coordinator


def test_the_end_options_given_a_bad_value_fail_as_usage_errors_that_say_why():
    r = invoke("--end", "noon")
    assert r.exit_code == 2
    assert "Invalid value for '--end': 'noon' is not a time (epoch seconds, nine digits or more; 2026-05-01T18:00; or 18:00)" in r.output
    r = invoke("--walltime", "soon")
    assert r.exit_code == 2
    assert "Invalid value for '--walltime': 'soon' is not a duration" in r.output
    r = invoke("--drain-before", "-1m")
    assert r.exit_code == 2
    assert "Invalid value for '--drain-before': '-1m' is not a duration" in r.output


def test_a_walltime_becomes_an_end_that_long_from_now_for_the_coordinator():
    before = time.time()
    args = end_args(None, 5400.0, 600.0)
    after = time.time()
    assert args[0] == "--end" and args[2:] == ["--drain-before", "600.0"]
    assert before + 5400 <= float(args[1]) <= after + 5400
    later = time.time() + 3600
    assert end_args(later, None, None) == ["--end", repr(later)]
    assert end_args(None, None, None) == []


def test_an_end_and_a_walltime_together_are_refused():
    with pytest.raises(click.UsageError, match="give --end or --walltime, not both"):
        end_args(time.time() + 3600, 3600.0, None)


def test_an_end_already_past_is_refused_naming_it_and_the_time_now(zone):
    zone(BERLIN)
    with pytest.raises(click.UsageError) as e:
        end_args(at(ZoneInfo(BERLIN), 2026, 5, 1, 18, 0), None, None)
    text = e.value.message
    assert text.startswith("--end 2026-05-01T18:00:00+02:00 is past (it is ")
    assert "the allocation would already be over" in text
    with pytest.raises(click.UsageError, match="--walltime 0: the allocation would end now"):
        end_args(None, 0.0, None)


def test_fleet_up_with_an_end_already_past_starts_nothing(tmp_path):
    """Through the real command: exit 2 with the reason, no coordinator, no fleet.json."""
    import subprocess
    import sys
    run = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "fleet", "up", "--run-dir", str(run), "--nodes", "1",
                        "--end", "2026-01-01T00:00"], capture_output=True, text=True, timeout=60,
                       start_new_session=True)
    assert p.returncode == 2, p.stderr
    assert "--end 2026-01-01T00:00:00" in p.stderr and "is past" in p.stderr
    assert not (run / "fleet.json").exists()


def test_a_drain_margin_not_shorter_than_the_walltime_is_said_and_left_to_the_coordinator_to_halve(capsys):
    # Not refused: a job script that resubmits itself passes the same margin to its
    # last, short job (the coordinator drains at half the time left then).
    args = end_args(None, 600.0, 7200.0)
    assert args[2:] == ["--drain-before", "7200.0"]
    err = capsys.readouterr().err
    assert "--drain-before 120 min is not shorter than the time --walltime leaves (10 min)" in err
    assert "draining 5 min before the end instead" in err
    end_args(None, 600.0, 60.0)
    assert capsys.readouterr().err == ""  # one that fits is taken as given, silently
