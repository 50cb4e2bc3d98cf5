"""`fleet run` in the environments users start it from: a locale that cannot show every
character, a closed standard output, a reader that goes away, a current directory that
is gone, a run directory whose name is not UTF-8. Each through the real command, with
an embedded fleet (fleet.cli_streams, fleet.wire.interpreter)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from fleetharness import assert_nothing_left, completed, env, events

SUITE = """\
[suite]
name = "loc"

[[steps]]
id = "echo"
call = "locsteps:echo"
args = { label = "é漢 ünï" }

[[steps]]
id = "boom"
call = "locsteps:boom"

[[steps]]
id = "shell"
command = "echo shell > out.txt"
"""

STEPS = """\
import json
def echo(label):
    json.dump({"label": label}, open("label.json", "w"))
def boom():
    raise RuntimeError("失败 échec")
"""


def run(argv: list[str], cwd: Path, extra: dict | None = None, shell: str | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess:
    """argv (or a shell line) in its own process group, killed whole if it overruns."""
    r = completed(shell if shell is not None else argv, timeout, shell=shell is not None, cwd=cwd,
                  executable="/bin/bash" if shell is not None else None, env={**env(), **(extra or {})})
    return subprocess.CompletedProcess(r.args, r.returncode, r.stdout.decode(errors="replace"),
                                       r.stderr.decode(errors="replace"))


def suite_in(tmp_path: Path) -> Path:
    (tmp_path / "s.toml").write_text(SUITE, encoding="utf-8")
    (tmp_path / "locsteps.py").write_text(STEPS, encoding="utf-8")
    return tmp_path / "s.toml"


FLEET = [sys.executable, "-P", "-m", "fleet"]


def test_an_ascii_locale_reads_the_suite_as_utf8_and_escapes_what_it_cannot_show(tmp_path):
    suite_in(tmp_path)
    r = run([*FLEET, "run", "s.toml", "--nodes", "1"], tmp_path,
            {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""})
    run_dir = tmp_path / "runs" / "loc"
    assert r.returncode == 1, (r.stdout, r.stderr)  # one step failed; nothing else went wrong
    assert "Traceback" not in r.stderr and "UnicodeEncodeError" not in r.stderr, r.stderr
    assert "\\u5931\\u8d25" in r.stdout + r.stderr  # the reason, escaped
    exits = {e["step"]: e["outcome"] for e in events(run_dir) if e["kind"] == "exit"}
    assert exits == {"echo": "succeeded", "boom": "failed", "shell": "succeeded"}, exits
    got = json.loads((run_dir / "steps" / "echo" / "label.json").read_text(encoding="utf-8"))
    assert got == {"label": "é漢 ünï"}
    assert_nothing_left(run_dir)


def test_a_closed_standard_output_runs_the_suite_to_its_end(tmp_path):
    suite_in(tmp_path)
    r = run([], tmp_path, shell=f"exec {sys.executable} -P -m fleet run s.toml --nodes 1 >&-")
    run_dir = tmp_path / "runs" / "loc"
    assert r.returncode == 1, r.stderr  # (boom failed)
    assert "Traceback" not in r.stderr, r.stderr
    exits = {e["step"]: e["outcome"] for e in events(run_dir) if e["kind"] == "exit"}
    assert exits == {"echo": "succeeded", "boom": "failed", "shell": "succeeded"}, exits
    assert_nothing_left(run_dir)


def test_a_current_directory_that_is_gone_does_not_keep_the_fleet_from_starting(tmp_path):
    (tmp_path / "s.toml").write_text('[[steps]]\nid = "a"\ncommand = "echo a > out.txt"\n')
    gone = tmp_path / "gone"
    gone.mkdir()
    run_dir = tmp_path / "rd"
    r = run([], tmp_path, shell=f"cd {gone} && rmdir {gone} && exec {sys.executable} -P -m fleet run "
                                f"{tmp_path / 's.toml'} --nodes 1 --run-dir {run_dir}")
    assert r.returncode == 0, (r.stdout, r.stderr, (run_dir / "coordinator.log").read_text()[-2000:])
    assert (run_dir / "steps" / "a" / "out.txt").read_text() == "a\n"
    assert_nothing_left(run_dir)


def test_a_run_directory_or_suite_whose_name_is_not_utf8_is_refused_before_anything_starts(tmp_path):
    suite_in(tmp_path)
    bad = os.fsdecode(bytes(tmp_path) + b"/lat\xe9")
    r = run([*FLEET, "run", "s.toml", "--nodes", "1", "--run-dir", bad], tmp_path)
    assert r.returncode == 2 and "is not valid UTF-8" in r.stderr and "nothing was started" in r.stderr, r.stderr
    r = run([*FLEET, "up", "--local", "--run-dir", bad], tmp_path)
    assert r.returncode == 2 and "is not valid UTF-8" in r.stderr, r.stderr
    assert not os.path.exists(bad)
    shutil.copy(tmp_path / "s.toml", os.fsdecode(bytes(tmp_path) + b"/s\xe9.toml"))
    r = run([*FLEET, "run", os.fsdecode(bytes(tmp_path) + b"/s\xe9.toml"), "--nodes", "1",
             "--run-dir", str(tmp_path / "rd")], tmp_path)
    assert r.returncode == 2, r.stderr


def test_a_reader_that_goes_away_does_not_stop_the_run(tmp_path):
    # Enough steps that fleet run's output passes a pipe's buffer while steps still run.
    (tmp_path / "s.toml").write_text('[suite]\nname = "many"\n\n[[steps]]\nid = "s/{i}"\narray = "1-600"\n'
                                     'command = "true"\n\n[[steps]]\nid = "last"\ncommand = "exit 3"\n'
                                     'deps = ["s/600"]\n')
    r = run([], tmp_path, shell=f"set -o pipefail; {sys.executable} -P -m fleet run s.toml --nodes 1 | head -c 1",
            timeout=300)
    run_dir = tmp_path / "runs" / "many"
    assert r.returncode == 1, (r.stdout, r.stderr)  # fleet run's own status (`last` failed), not an abort's
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr
    exits = {e["step"]: e["outcome"] for e in events(run_dir) if e["kind"] == "exit"}
    assert len(exits) == 601 and exits.pop("last") == "failed", exits.get("last")
    assert set(exits.values()) == {"succeeded"}, {o for o in exits.values()}
    assert_nothing_left(run_dir)
