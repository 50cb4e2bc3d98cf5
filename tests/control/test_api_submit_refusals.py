"""What Fleet.submit refuses itself, before anything is sent: step tables TOML cannot
hold, and options given without the one they go with (as `fleet run` refuses them).
A real fleet, real files: nothing reaches it, and nothing is left in .fleet/api."""

from __future__ import annotations

import pytest

from fleetharness import assert_nothing_left, fleet

import fleet as F
from fleet.core.suite import tomllib


@pytest.fixture(scope="module")
def up(tmp_path_factory):
    """A local fleet of one node; a client of it."""
    tmp = tmp_path_factory.mktemp("api-refusals")
    run = tmp / "run"
    fleet("up", "--local", "--nodes", "1", "--run-dir", str(run), cwd=tmp, check=True, timeout=60)
    f = F.connect(run)
    try:
        yield f
    finally:
        f.close()
        fleet("down", "--run-dir", str(run), cwd=tmp, timeout=60)
        assert_nothing_left(run)


def _submissions(f) -> int:
    return len(f.status().get("submissions", []))


def test_a_lone_surrogate_in_a_step_table_is_a_value_error_naming_step_and_field_and_leaves_no_file(up):
    api = up.run_dir / ".fleet" / "api"
    before = sorted(api.glob("*")) if api.exists() else []
    with pytest.raises(ValueError) as e:
        up.submit([{"id": "x", "command": "echo \udcff"}])
    assert str(e.value).startswith("step 'x': field 'command': "), e.value
    assert "surrogate" in str(e.value), e.value
    with pytest.raises(ValueError, match=r"^step 'y': field 'args': the key "):
        up.submit([{"id": "y", "call": "m:f", "args": {"\udcff": 1}}])
    assert (sorted(api.glob("*")) if api.exists() else []) == before  # (an empty suite file was left)


def test_a_key_past_the_basic_plane_is_written_as_toml_reads_it(tmp_path):
    # (a key was JSON-escaped to a surrogate pair, which TOML refuses: "not valid TOML")
    from fleet.control.api import write_suite
    path = write_suite(tmp_path, "n", [{"id": "k", "call": "m:f", "args": {"x\U0001F600": "\x7f\U0001F600"}}])
    assert tomllib.loads(path.read_text(encoding="utf-8"))["steps"] == [{"id": "k", "call": "m:f", "args": {"x\U0001F600": "\x7f\U0001F600"}}]


@pytest.mark.parametrize("options, named", [
    ({"with_deps": True}, "with_deps=True selects with only"),
    ({"new_generation": True}, "new_generation=True goes with shard"),
    ({"wait_foreign": False}, "wait_foreign=False goes with shard"),
])
def test_an_option_without_the_one_it_goes_with_is_a_value_error_and_nothing_is_sent(up, options, named):
    asked = _submissions(up)
    with pytest.raises(ValueError, match=named):
        up.submit([{"id": "a", "command": "true"}], name="companions", **options)
    assert _submissions(up) == asked


def test_a_bad_fleet_run_silence_is_a_fleet_error_at_submit_and_nothing_is_sent(up, monkeypatch):
    # (before 2026-12-07 it was said at wait() only, the suite already handed over: its
    # steps ran with nobody waiting; `fleet run` refuses it before anything starts)
    asked = _submissions(up)
    monkeypatch.setenv("FLEET_RUN_SILENCE", "2m")
    with pytest.raises(F.FleetError, match=r"FLEET_RUN_SILENCE='2m': give a number of seconds above 0"):
        up.submit([{"id": "q1", "command": "true"}])
    assert _submissions(up) == asked
