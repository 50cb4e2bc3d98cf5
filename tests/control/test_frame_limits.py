"""What a message to a node or to the coordinator can hold: ZeroMQ drops a frame over
1 MiB, with the connection it came on. A step too big to launch is refused before
anything starts, naming its file, step and field; a launch that grows past it anyway
(fleet's own part: its paths) fails that step alone; a client's request over it is
refused at once. Real `fleet` processes, a real fleet for the API."""

from __future__ import annotations


import pytest

from fleetharness import assert_nothing_left, events, exits, fleet, write_suite

import fleet as F

MIB = 1 << 20


def test_a_step_with_args_over_a_megabyte_is_refused_before_anything_starts_naming_file_step_and_field(tmp_path):
    # (before: valid; its launch took down each node it was tried on, then the fleet)
    big = "c" * (MIB + MIB // 5)
    suite = write_suite(tmp_path / "huge.toml", f'[suite]\nname = "huge"\nrun_dir = "rd"\n'
                        f'[[steps]]\nid = "small"\ncommand = "true"\n'
                        f'[[steps]]\nid = "big"\ncall = "os:getcwd"\nargs = {{s = "{big}"}}\n')
    for verb in ("validate", "run"):
        r = fleet(verb, str(suite), "--nodes", "1", cwd=tmp_path, timeout=120) if verb == "run" else \
            fleet(verb, str(suite), cwd=tmp_path, timeout=120)
        assert r.returncode != 0, (verb, r.stdout, r.stderr[-2000:])
        assert "huge.toml: step 'big': field 'args': " in r.stderr, (verb, r.stderr[-2000:])
        assert "1,048,576 bytes" in r.stderr and "nothing was started" in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "rd").exists()  # no coordinator ran


@pytest.mark.parametrize("field,table", [
    ("command", 'command = "echo {x}"'),
    ("command", 'command = ["echo", "{x}"]'),
    ("env", 'command = "true"\nenv = {{BIG = "{x}"}}'),
])
def test_a_command_string_or_env_value_over_128_kib_is_refused_by_validate_naming_it(tmp_path, field, table):
    # (before: valid, then "Argument list too long" when it ran)
    body = table.format(x="y" * (128 * 1024))
    suite = write_suite(tmp_path / "s.toml", f'[suite]\nname = "s"\n[[steps]]\nid = "a"\n{body}\n')
    r = fleet("validate", str(suite), cwd=tmp_path, timeout=60)
    assert r.returncode != 0, (r.stdout, r.stderr[-2000:])
    assert f"s.toml: step 'a': field '{field}': " in r.stderr and "MAX_ARG_STRLEN" in r.stderr, r.stderr[-2000:]
    ok = write_suite(tmp_path / "ok.toml", f'[suite]\nname = "s"\n[[steps]]\nid = "a"\n'
                     f'{table.format(x="y" * (100 * 1024))}\n')
    assert fleet("validate", str(ok), cwd=tmp_path, timeout=60).returncode == 0


def test_a_launch_grown_past_a_megabyte_by_its_run_directory_fails_its_step_alone_and_its_node_lives(tmp_path):
    # The step's own part is under the bound validation checks; each output travels
    # joined to the run directory, which makes the launch over 1 MiB. Before: the node's
    # agent lost its connection, the node was lost, and with it the fleet.
    run_dir = tmp_path / ("r" * 120)
    outputs = [f"o{i:04d}/{'a' * 230}/{'b' * 230}" for i in range(2000)]
    suite = write_suite(tmp_path / "grown.toml", f'[suite]\nname = "grown"\nrun_dir = "{run_dir}"\n'
                        f'[[steps]]\nid = "grown"\ncall = "os:getcwd"\noutputs = {outputs!r}\n'
                        '[[steps]]\nid = "before"\ncommand = "true"\n'
                        '[[steps]]\nid = "after"\ncommand = "true"\ndeps = ["before"]\n'.replace("'", '"'))
    assert fleet("validate", str(suite), cwd=tmp_path, timeout=60).returncode == 0
    r = fleet("run", str(suite), "--nodes", "1", cwd=tmp_path, timeout=180)
    assert r.returncode == 1, (r.stdout, r.stderr[-3000:])
    (ended,) = exits(run_dir, "grown")
    assert ended["outcome"] == "failed", ended
    assert "the Launch for " in ended["reason"] and "over the 1,048,576 bytes" in ended["reason"], ended
    for step in ("before", "after"):
        assert [e["outcome"] for e in exits(run_dir, step)] == ["succeeded"], (step, r.stderr[-3000:])
    assert not [e for e in events(run_dir) if e["kind"] == "exit" and e.get("outcome") == "lost"]
    assert_nothing_left(run_dir)


def test_a_submission_over_a_megabyte_is_refused_at_once_naming_the_limit_and_the_fleet_answers_on(tmp_path):
    # (before: libzmq dropped it unread; 60 s later "did not answer ... may still take it in")
    run = tmp_path / "run"
    wide = write_suite(tmp_path / "wide.toml", '[suite]\nname = "wide"\n'
                       f'[[steps]]\nid = "{"x" * 190}{{i}}"\narray = "0-5999"\ncommand = "true"\n')
    fleet("up", "--local", "--nodes", "1", "--run-dir", str(run), cwd=tmp_path, check=True, timeout=60)
    f = F.connect(run)
    try:
        with pytest.raises(F.FleetError) as e:
            f.submit(wide, only=["x" * 190 + str(i) for i in range(6000)], timeout=20)
        assert "this submit request is " in str(e.value) and "over the 1,048,576 bytes" in str(e.value), e.value
        assert f.status()["submissions"] == []  # nothing went in, and the fleet still answers
        assert f.submit(wide, only=["x" * 190 + "7"]).steps == 1
    finally:
        f.close()
        fleet("down", "--run-dir", str(run), cwd=tmp_path, timeout=60)
    assert_nothing_left(run)
