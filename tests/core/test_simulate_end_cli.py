"""`fleet simulate` and the allocation's end, through the real command line in a fresh
process: the end and the drain point as a live fleet takes them, and the figures it
prints (text and JSON) always numbers."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from fleetharness import completed

ONE = '[suite]\nname = "one"\n[[steps]]\nid = "one"\ncommand = "x"\nestimate = 100\n'


def fleet(tmp_path: Path, text: str, *args: str, timeout: float = 60):
    """`fleet simulate SUITE ARGS` on the suite `text`, in tmp_path."""
    (tmp_path / "s.toml").write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_"))}
    return completed([sys.executable, "-m", "fleet", "simulate", "s.toml", *args], timeout, cwd=tmp_path, env=env,
                     text=True)


def test_a_step_admitted_because_it_ends_exactly_at_the_drain_point_ends_there_and_is_not_interrupted(tmp_path):
    # A live coordinator handles the exits a loop turn brings before it drains
    # (fleet.control.coordinator: messages, then Drain.tick): an end at the drain point is an end.
    r = fleet(tmp_path, ONE, "--nodes", "1", "--cores-per-node", "1", "--walltime", "105", "--drain-before", "5",
              "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["drain_s"] == 100.0 and out["steps"]["one"]["end_s"] == 100.0
    assert out["interrupted"] == {} and out["not_started"] == []


def test_a_wide_step_in_the_comparisons_is_half_a_node_or_more_rounded_up(tmp_path):
    two = ONE.replace('estimate = 100', 'estimate = 100\ncores = 2')
    for cores, wide in (("5", 3), ("4", 2)):
        r = fleet(tmp_path, two, "--nodes", "2", "--cores-per-node", cores, "--compare-reservations", "--json")
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        assert got["wide_cores"] == wide, (cores, got)
        assert got["with"]["wide_waits"]["steps"] == (1 if cores != "5" else 0), (cores, got)


def test_a_walltime_that_ends_now_or_never_is_refused_as_fleet_run_refuses_it(tmp_path):
    for given, said in (("0", "--walltime 0: the allocation would end now"),
                        ("1e-300", "--walltime 1e-300: the allocation would end now"),
                        ("1e400", "'1e400' is too long a duration"),
                        ("9" * 400 + "-1", "is too long a duration")):
        r = fleet(tmp_path, ONE, "--nodes", "1", "--cores-per-node", "1", "--walltime", given)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (given, r.stderr)
        assert said in r.stderr and r.stdout == "", (given, r.stderr)


def test_an_estimate_too_long_to_compute_with_is_refused_naming_file_step_and_field(tmp_path):
    huge = ONE.replace("estimate = 100", "estimate = 1e308")
    r = fleet(tmp_path, huge, "--nodes", "1", "--cores-per-node", "1", "--json")
    assert r.returncode == 2, r.stdout
    assert "s.toml: step 'one': field 'estimate'" in r.stderr and "at most 1,000,000,000 (about 32 years)" in r.stderr, r.stderr
    assert "at most 1,000,000,000" in json.loads(r.stdout)["error"], r.stdout  # (stdout was empty before 2026-12-06)
    ok = fleet(tmp_path, ONE.replace("estimate = 100", "estimate = 1e9"), "--nodes", "1", "--cores-per-node", "1")
    assert ok.returncode == 0 and "1000000000.0 s" in ok.stdout, ok.stderr


def test_simulate_json_never_holds_nan_or_infinity():
    from fleet.cli_simulate import dumps
    assert dumps({"a": float("nan"), "b": [float("inf"), 1.5], "c": {"d": -float("inf")}}) == (
        '{"a": null, "b": [null, 1.5], "c": {"d": null}}')


def test_an_allocation_too_large_to_build_is_refused_naming_the_option_before_anything_is_built(tmp_path):
    import resource

    def small():  # (if it were built after all: a MemoryError here, not a machine's memory filled)
        resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))
    (tmp_path / "s.toml").write_text(ONE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_"))}
    for args, said in ((["--nodes", "1", "--cores-per-node", "1000000000"], "--cores-per-node"),
                       (["--nodes", "100000000", "--cores-per-node", "1"], "--nodes"),
                       (["--nodes", "1", "--cores-per-node", "1", "--gpus-per-node", "1000000000"], "--gpus-per-node"),
                       (["--nodes", "1000000", "--cores-per-node", "100"], "100,000,000 cores and GPUs in all")):
        for cmd in ("simulate", "validate"):
            r = completed([sys.executable, "-m", "fleet", cmd, "s.toml", *args], 60, cwd=tmp_path, env=env, text=True,
                          preexec_fn=small)
            assert r.returncode == 2 and "Traceback" not in r.stderr, (cmd, args, r.stderr)
            assert said in r.stderr and r.stdout == "", (cmd, args, r.stderr)


# One 2-core node: "wide" (2 cores, 100 s), then "after" (50 s); six 30 s one-core steps.
A = """
[suite]
name = "a"
[[steps]]
id = "wide"
command = "x"
cores = 2
estimate = 100
[[steps]]
id = "n/{i}"
array = "1-6"
command = "x"
estimate = 30
[[steps]]
id = "after"
command = "x"
deps = ["wide"]
estimate = 50
"""


def test_the_comparisons_model_the_allocation_s_end_and_show_it_with_each_row_s_end_figures(tmp_path):
    alloc = ["--nodes", "1", "--cores-per-node", "2", "--walltime", "120", "--drain-before", "60"]
    for flag, rows in (("--compare-orders", "orders"), ("--compare-reservations", None)):
        r = fleet(tmp_path, A, *alloc, flag, "--json")
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        assert (got["end_s"], got["drain_s"], got["window"]) == (120.0, 60.0, 2), got
        each = got[rows] if rows else {k: got[k] for k in ("without", "with")}
        for name, row in each.items():  # (it was 220-240 s, past the end, with no end figures)
            assert row["makespan_s"] <= 60.0 and row["not_started"] == 4 and row["interrupted"] == 0, (name, row)
        text = fleet(tmp_path, A, *alloc, flag)
        assert text.returncode == 0, text.stderr
        lines = text.stdout.splitlines()
        assert lines[0].endswith("; window 2 a node; end 120 s, drain point 60 s; machine local"), lines[0]
        assert lines[1].endswith(" interrupted not started"), lines[1]
        assert all(ln.split()[-2:] == ["0", "4"] for ln in lines[2:]), lines


def test_the_text_names_the_steps_interrupted_and_not_started_not_only_their_counts(tmp_path):
    # One core, 60 s to the drain point: "a" (59.5 s) ends, "b" (no estimate: 1 s, and
    # not held back) starts at 59.5 s and is interrupted at 60 s; twelve of 100 s would not
    # end before it: ten named, the rest counted.
    text = "[suite]\nname = \"ends\"\n" + "".join(
        f'[[steps]]\nid = "{sid}"\ncommand = "x"\n' + (f"estimate = {est}\n" if est else "") for sid, est in
        [("a", 59.5), ("b", None)] + [(f"long{i:02d}", 100) for i in range(12)])
    r = fleet(tmp_path, text, "--nodes", "1", "--cores-per-node", "1", "--walltime", "65", "--drain-before", "5")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("interrupted"))
    assert lines[at].split()[1] == "1" and lines[at + 1].strip() == "b"
    assert lines[at + 2].split()[2] == "12"
    assert [ln.split(":")[0].strip() for ln in lines[at + 3:at + 13]] == [f"long{i:02d}" for i in range(10)]
    assert lines[at + 13].strip() == "... and 2 more (--json gives each its reason)"


# One 2-core node, 10 s to the drain point (a 20 s walltime drains 10 s before its end):
# A (4 s) runs; B (7 s, after A) would end past the drain point; C (15 s) takes longer
# than the 10 s an allocation like this one gives steps; D needs B; E needs C.
LEFT = """
[suite]
name = "left"
[[steps]]
id = "A"
command = "x"
estimate = 4
[[steps]]
id = "B"
command = "x"
estimate = 7
deps = ["A"]
[[steps]]
id = "C"
command = "x"
estimate = 15
[[steps]]
id = "D"
command = "x"
deps = ["B"]
[[steps]]
id = "E"
command = "x"
deps = ["C"]
"""
LONG = "needs a longer allocation: it takes about 15 s, and an allocation like this one gives steps 10 s " \
       "before its drain point"


def test_simulate_says_why_each_step_did_not_start_and_which_need_a_longer_allocation(tmp_path):
    # (it said "would not end before the drain point, or after it" of them all: a step a
    # resubmitted job runs and one no job of this length can were told apart by nothing)
    alloc = ["--nodes", "1", "--cores-per-node", "2", "--walltime", "20s"]
    r = fleet(tmp_path, LEFT, *alloc, "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["not_started"] == ["B", "C", "D", "E"], got
    assert got["not_started_reasons"] == {
        "B": "expected to take 7 s (estimate), 6 s left before the drain point", "C": LONG,
        "D": "it needs B, which did not start", "E": "needs a longer allocation: it needs C, which does"}, got
    assert got["needs_longer"] == {"C": LONG, "E": "needs a longer allocation: it needs C, which does"}, got
    assert got["longer_only"] is False, got
    text = fleet(tmp_path, LEFT, *alloc)
    assert text.returncode == 0, text.stderr
    lines = [ln.strip() for ln in text.stdout.splitlines()]
    at = lines.index("not started            4 step(s), each with why")
    assert lines[at + 1:at + 5] == [f"{sid}: {why}" for sid, why in got["not_started_reasons"].items()], lines
    assert lines[at + 5].startswith("longer                 2 step(s) need a longer allocation"), lines
    assert "goes on with the other 2: a live fleet run exits 3" in lines[at + 5] and lines[at + 6] == "C, E", lines


def test_simulate_says_no_job_of_this_length_finishes_when_every_step_left_needs_a_longer_one(tmp_path):
    # The live verdict (fleet run exits 1, not 3): C is too long, E needs it, and F (no
    # estimate: 1 s) is interrupted having run 0.95 s of the 1 s the allocation gives steps.
    only = LEFT.split("[[steps]]\nid = \"A\"")[0] + "".join(
        f'[[steps]]\nid = "{sid}"\ncommand = "x"\n' + extra for sid, extra in
        (("C", "estimate = 15\n"), ("E", 'deps = ["C"]\n'), ("W", "estimate = 0.05\n"), ("F", 'deps = ["W"]\n'),
         ("G", 'deps = ["F"]\n')))
    alloc = ["--nodes", "1", "--cores-per-node", "1", "--walltime", "2s", "--drain-before", "1s"]
    r = fleet(tmp_path, only, *alloc, "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert list(got["interrupted"]) == ["F"] and got["not_started"] == ["C", "E", "G"], got
    assert got["needs_longer"]["F"].startswith("needs a longer allocation: it ran 1 s of the 1 s"), got
    assert got["not_started_reasons"]["G"] == "needs a longer allocation: it needs F, which does", got
    assert got["longer_only"] is True, got
    text = fleet(tmp_path, only, *alloc)
    assert text.returncode == 0, text.stderr
    assert ("4 step(s) need a longer allocation: every step left; no job of this length finishes the suite "
            "(a live fleet run exits 1, not 3)") in text.stdout, text.stdout


def test_a_step_a_little_longer_than_the_time_to_the_drain_point_needs_a_longer_allocation_in_simulate(tmp_path):
    # (simulate gave it 5 % room: the deadline never started a step of 10.4 s in a job giving
    # steps 10 s, yet it said "0 step(s) need a longer allocation: ... goes on with the 1 left")
    slightly = ONE.replace("estimate = 100", "estimate = 10.4")
    alloc = ["--nodes", "1", "--cores-per-node", "1", "--walltime", "20s", "--drain-before", "10s"]
    r = fleet(tmp_path, slightly, *alloc, "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["not_started"] == ["one"] and got["longer_only"] is True, got
    assert got["needs_longer"] == {"one": "needs a longer allocation: it takes about 10.4 s, and an allocation like "
                                          "this one gives steps 10.0 s before its drain point"}, got
    text = fleet(tmp_path, slightly, *alloc)
    assert "1 step(s) need a longer allocation: every step left" in text.stdout, text.stdout
    fits = fleet(tmp_path, ONE.replace("estimate = 100", "estimate = 10"), *alloc, "--json")
    assert json.loads(fits.stdout)["not_started"] == [], fits.stdout  # (exactly the time: it starts and ends)
