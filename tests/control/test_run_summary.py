"""The end of `fleet run` (fleet.control.notsucceeded): what did not succeed, said again
after the counts, grouped by kind (numbers and paths folded), each group with its count,
its first steps and the first's log, at most KINDS groups, then `fleet report` for the
rest. Through the real command line, its stdout a pipe (a batch job's log)."""

from __future__ import annotations

import re
from pathlib import Path

from fleetharness import fleet, write_suite

STEPS = '''
def maybe(i):
    i = int(i)
    if i % 20 == 3:
        raise RuntimeError(f"case {i} diverged: residual nan at iteration {7 * i} in /scratch/u/case{i}/out.h5")
    if 30 <= i < 42:  # twelve kinds of one step each: more kinds than the end says
        raise ValueError("bad parameter " + "abcdefghijkl"[i - 30])
'''


def _run(tmp_path: Path):
    (tmp_path / "casesteps.py").write_text(STEPS)
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "bulk"\nrun_dir = "run"\n'
                        '[[steps]]\nid = "case/{i}"\narray = "0-59"\ncall = "casesteps:maybe"\nargs = { i = "{i}" }\n'
                        '[[steps]]\nid = "post/{i}"\narray = "0-9"\ncommand = "true"\ndeps = ["case/{i}"]\n')
    r = fleet("run", str(suite), "--nodes", "2", cwd=tmp_path, timeout=150)
    return r, tmp_path / "run"


def test_the_end_of_a_run_groups_what_did_not_succeed_by_kind_with_its_first_steps_and_log_and_is_bounded(tmp_path):
    r, run_dir = _run(tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith("suite 'bulk': 1 blocked, 15 failed"))
    summary = lines[end + 1:]
    assert summary[0] == "did not succeed: 16 steps, of 14 kinds (the most first):", summary
    # The three alike failures are one group, first; its steps named, the first's reason (its numbers and
    # path as they were: folded, "iteration #" said nothing) and log given.
    names, _, log = summary[2].strip().partition("; log of ")
    assert sorted(names.split(", ")) == ["case/23", "case/3", "case/43"], summary
    first = names.split(", ")[0]
    i = int(first.split("/")[1])
    assert summary[1].split() == ["3", "failed"] + (f"RuntimeError: case {i} diverged: residual nan at iteration "
                                                    f"{7 * i} in /scratch/u/case{i}/out.h5").split(), summary
    assert log == f"{first}: {run_dir / 'steps' / first / 'log'}" and (run_dir / "steps" / first / "log").exists()
    # Ten groups said (two lines each), the rest counted, then where every reason is.
    assert len(summary) == 1 + 2 * 10 + 2, summary  # (notsucceeded.KINDS)
    assert summary[-2] == "  ... and 4 more kinds (4 steps)", summary
    assert summary[-1] == f"every step's reason: fleet report {run_dir}", summary
    said = "\n".join(summary)
    assert said.count("ValueError: bad parameter") + bool(re.search(r"blocked    dependency case/\d+ did not succeed",
                                                                   said)) == 9


def test_like_failures_fold_into_one_kind_and_unlike_ones_do_not():
    from fleet.control.notsucceeded import kind_of
    assert kind_of("RuntimeError: case 7 diverged at 1.5e-3 (0x7fff12)") == kind_of(
        "RuntimeError: case 107 diverged at 2 (0xdead)")
    assert kind_of("FileNotFoundError: /data/run1/a.h5") == kind_of("FileNotFoundError: /data/run2/b.h5")
    assert kind_of("KeyError: 'alpha'") != kind_of("KeyError: 'beta'")


def test_a_step_whose_directory_cannot_be_made_is_said_to_have_no_log_not_pointed_at_one(tmp_path):
    (tmp_path / "run" / "steps").mkdir(parents=True)
    (tmp_path / "run" / "steps" / "b").write_text("left here by something else\n")  # (a file where b's directory goes)
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "nolog"\nrun_dir = "run"\n'
                        '[[steps]]\nid = "a"\ncommand = "true"\n[[steps]]\nid = "b"\ncommand = "true"\n')
    r = fleet("run", str(suite), "--nodes", "1", cwd=tmp_path, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    (line,) = [x for x in r.stdout.splitlines() if "failed     b:" in x]
    assert line.endswith("exists and is not a directory (no log: the step failed before it could open one)"), line
    summary = r.stdout.split("did not succeed: 1 step:\n")[1].splitlines()
    assert summary[1].strip() == "b", summary  # (its name, and no log)
    report = fleet("report", str(tmp_path / "run"), cwd=tmp_path, timeout=60)
    assert "steps/b/log" not in report.stdout, report.stdout
