"""`fleet report` on event streams made by real runs, and its HTML in a real browser."""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from fleet.report.html import COLOURS
from fleet.report.trace import validate
from fleetharness import events, fleet, spawn, wait_for, write_suite

CHROMIUM = Path("/usr/bin/chromium")


def report_json(run_dir: Path, *extra: str, cwd: Path) -> dict:
    r = fleet("report", str(run_dir), "--json", *extra, cwd=cwd, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


MIXED = """
[suite]
name = "mixed"
run_dir = "run"
[[steps]]
id = "nap/{i}"
array = "1-4"
call = "fleet_steps:nap"
args = { seconds = 0.4 }
[[steps]]
id = "first"
call = "fleet_steps:nap"
args = { seconds = 0.3 }
[[steps]]
id = "second"
call = "fleet_steps:nap"
deps = ["first"]
args = { seconds = 0.3 }
[[steps]]
id = "bad"
command = ["sh", "-c", "sleep 0.5; echo failing >&2; exit 3"]
[[steps]]
id = "after-bad"
call = "fleet_steps:produce"
deps = ["bad"]
"""


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("mixed")
    suite = write_suite(tmp / "s.toml", MIXED)
    # Without a node window: a step queued on its node starts there a few milliseconds
    # before the coordinator's start record, which this test's exact sums would see
    # (docs/report.md says so; tests/control/test_window_fleet.py covers the window).
    r = fleet("run", str(suite), "--nodes", "2", "--window", "0", cwd=tmp, timeout=120)
    assert r.returncode == 1, r.stderr  # bad failed, after-bad blocked
    return tmp / "run"


def test_the_report_of_a_real_run_agrees_with_its_exit_records(mixed_run):
    j = report_json(mixed_run, cwd=mixed_run.parent)
    ex = [e for e in events(mixed_run) if e["kind"] == "exit"]
    assert j["work_s"] == pytest.approx(sum(e["work_s"] for e in ex), abs=1e-5)
    assert j["startup_s"] == pytest.approx(sum(e["startup_s"] for e in ex), abs=1e-5)
    starts = [e["t"] for e in events(mixed_run) if e["kind"] == "submitted"]
    assert j["wall_s"] == pytest.approx(max(e["t"] for e in ex) - starts[0], abs=1e-5)
    assert j["speedup"] == pytest.approx(j["work_s"] / j["wall_s"], rel=1e-4)
    # Startup is not work: each nap's work is its sleep, and startup is apart from it.
    for sid in ("nap/1", "nap/2", "nap/3", "nap/4"):
        st = j["steps"][sid]
        assert 0.39 <= st["work_s"] < 1.0 and st["startup_s"] < 2.0  # (bounds for a loaded machine)
        assert st["end"] - st["start"] >= st["work_s"] + st["startup_s"] - 1e-3
        assert st["node"] in ("node1", "node2") and st["cores"] == 1 and st["outcome"] == "succeeded"
    assert 2.0 <= j["work_s"] <= 3.5
    # Two pretend nodes of one core: at best twice as fast as back to back; and steps did
    # overlap (from their recorded spans, not from a speed-up a loaded machine could eat).
    assert j["speedup"] <= 2.05
    spans = sorted((st["start"], st["end"]) for st in j["steps"].values() if st.get("start") is not None)
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:])), spans
    # The chain first -> second (0.6 s of work) or bad (0.5 s) or a nap (0.4 s).
    assert j["floor_s"] >= 0.6 and j["floor_path"][-2:] == ["first", "second"]
    assert j["wall_s"] >= j["floor_s"] and j["wall_s"] >= j["capacity_floor_s"] - 1e-6
    assert j["steps"]["bad"]["outcome"] == "failed" and j["steps"]["after-bad"]["outcome"] == "blocked"
    assert {p["step"]: p["reason"] for p in j["problems"]} == {
        "bad": "exit status 3", "after-bad": "dependency bad did not succeed"}
    u = j["utilization"]
    assert set(u["nodes"]) == {"node1", "node2"}
    assert 0.5 < u["overall"]["cores_held"] <= 1.0
    assert u["overall"]["cores_working"] <= u["overall"]["cores_held"]
    assert "dependency" in j["waits"] and j["steps"]["second"]["waited_for"] in ("dependency", "cores")


def test_the_terminal_summary_of_a_real_run_names_wall_work_floor_and_problems(mixed_run):
    r = fleet("report", str(mixed_run), cwd=mixed_run.parent, timeout=60)
    assert r.returncode == 0, r.stderr
    for word in ("wall", "work", "speedup", "startup", "floor", "utilization", "node1", "node2",
                 "failed", "bad", "blocked", "after-bad", "exit status 3"):
        assert word in r.stdout, word


def test_the_trace_of_a_real_run_validates_with_a_slice_per_step_and_startup_and_work(mixed_run, tmp_path):
    trace = tmp_path / "trace.json"
    r = fleet("report", str(mixed_run), "--trace", str(trace), cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    tr = json.loads(trace.read_text())
    assert validate(tr) == []
    ev = tr["traceEvents"]
    for e in ev:  # the format's required fields, checked here as well as by validate()
        assert {"ph", "ts", "pid", "tid", "name"} <= set(e)
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int) and isinstance(e["ts"], (int, float))
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0
    ran = {e["step"] for e in events(mixed_run) if e["kind"] == "start"}
    slices = [e for e in ev if e["ph"] == "X" and e["cat"] not in ("startup", "work")]
    assert sorted(e["args"]["step"] for e in slices) == sorted(ran)
    assert sum(e["cat"] == "work" for e in ev if e["ph"] == "X") == len(ran)
    assert sum(e["cat"] == "startup" for e in ev if e["ph"] == "X") == len(ran)
    assert {e["pid"] for e in slices} == {1, 2}  # one process per node
    assert any(e["ph"] == "C" and e["name"] == "busy cores" for e in ev)


def test_a_report_of_a_run_in_progress_shows_what_runs_and_waits_and_then_what_the_end_did(tmp_path):
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "2", cwd=tmp_path, check=True, timeout=60)
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "live"
[[steps]]
id = "quick"
call = "fleet_steps:nap"
args = { seconds = 0.1 }
[[steps]]
id = "long"
call = "fleet_steps:sleep_forever"
[[steps]]
id = "after"
call = "fleet_steps:produce"
deps = ["long"]
""")
    runner = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
    try:
        wait_for(lambda: any(e["kind"] == "started" and e["step"] == "long" for e in events(run_dir))
                 and any(e["kind"] == "exit" and e["step"] == "quick" for e in events(run_dir)), 30,
                 "long started and quick done")
        j = report_json(run_dir, cwd=tmp_path)
        assert j["in_progress"] is True
        assert j["steps"]["long"]["outcome"] == "running" and j["steps"]["long"]["end"] is None
        assert j["steps"]["after"]["outcome"] == "waiting" and j["steps"]["after"]["waited_for"] == "dependency"
        assert j["steps"]["quick"]["outcome"] == "succeeded"
        assert j["wall_s"] > 0 and j["work_s"] == pytest.approx(j["steps"]["quick"]["work_s"])
        trace = tmp_path / "t.json"
        assert fleet("report", str(run_dir), "--trace", str(trace), cwd=tmp_path, timeout=60).returncode == 0
        assert validate(json.loads(trace.read_text())) == []
        assert fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60).returncode == 0
        runner.wait(timeout=30)
        j = report_json(run_dir, cwd=tmp_path)
        assert j["in_progress"] is False
        # The fleet stopped it: interrupted (not a failure), and nothing after it is blocked.
        assert j["steps"]["long"]["outcome"] == "interrupted"
        assert j["steps"]["after"]["outcome"] == "not run"
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path)


# --- the HTML in a real browser ------------------------------------------------------------------

def png_rgb(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB rows of an 8-bit non-interlaced PNG (what Chromium writes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, []
    while pos < len(data):
        n, typ = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if typ == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
        elif typ == b"IDAT":
            idat.append(body)
    raw = zlib.decompress(b"".join(idat))
    bpp = 3 if ctype == 2 else 4
    stride = w * bpp
    prev = bytearray(stride)
    rows = []
    i = 0
    for _ in range(h):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        if f == 1:
            for x in range(bpp, stride):
                line[x] = (line[x] + line[x - bpp]) & 255
        elif f == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif f == 3:
            for x in range(stride):
                line[x] = (line[x] + ((line[x - bpp] if x >= bpp else 0) + prev[x]) // 2) & 255
        elif f == 4:
            for x in range(stride):
                a = line[x - bpp] if x >= bpp else 0
                b, c = prev[x], (prev[x - bpp] if x >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        prev = line
        rows.append(bytes(line) if bpp == 3 else bytes(b for k, b in enumerate(line) if k % 4 != 3))
    return w, h, rows


def count_colour(rows: list[bytes], hex_colour: str) -> int:
    px = bytes(int(hex_colour[k:k + 2], 16) for k in (1, 3, 5))
    n = 0
    for row in rows:
        for x in range(0, len(row), 3):
            if row[x:x + 3] == px:
                n += 1
    return n


def test_the_html_opens_in_headless_chromium_and_the_screenshot_shows_the_timeline_bars(mixed_run, tmp_path):
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is absent: install Debian's chromium (apt-get install chromium) "
                    "to check the HTML page in a real browser; CI's .ci/run installs it")
    page = tmp_path / "report.html"
    r = fleet("report", str(mixed_run), "--html", str(page), cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    shot = tmp_path / "shot.png"
    profile = tmp_path / "chromium-profile"
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", f"--screenshot={shot}", "--window-size=1400,900", page.as_uri()]
    p = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = p.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise AssertionError("chromium did not take the screenshot within 90 s")
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert shot.exists(), f"no screenshot; chromium exited {p.returncode}: {err.decode()[-2000:]}"
    w, h, rows = png_rgb(shot)
    assert (w, h) == (1400, 900)
    white = sum(row.count(b"\xff\xff\xff") for row in rows)  # approximate, enough to see a blank page
    assert white < 0.97 * w * h, "the screenshot is (nearly) blank"
    # Bars, not only the legend's 12 x 12 swatches: 6 succeeded steps and one failed one
    # of 0.5 s on a run of ~1-2 s, in 13-pixel lanes over 1,160 pixels.
    green = count_colour(rows, COLOURS["succeeded"])
    red = count_colour(rows, COLOURS["failed"])
    assert green > 2000, f"only {green} pixels of the succeeded colour"
    assert red > 600, f"only {red} pixels of the failed colour"


FAMILY = '''
[suite]
name = "family"
run_dir = "run"
[[steps]]
id = "a"
command = "sleep 1"
[[steps]]
id = "p"
protocol = "steps"
deps = ["a"]
command = """
if [ "$FLEET_PHASE" = 0 ]; then
  printf '[[steps]]\\\\nid = "c1"\\\\ncommand = "sleep 1.5"\\\\n[[steps]]\\\\nid = "c2"\\\\ncommand = "sleep 1"\\\\ndeps = ["c1"]\\\\n' > "$FLEET_SUBMIT_DIR/k.toml"
  exit 3
fi
"""
'''


def test_the_dependency_floor_runs_through_a_parent_its_children_and_the_parents_end(tmp_path):
    # (before 2026-12-07 a parent's children were on no chain with it: floor p/c1 -> p/c2,
    # 2.5 s, though nothing could start them before a and p's first stage, nor end p before them)
    suite = write_suite(tmp_path / "s.toml", FAMILY)
    r = fleet("run", str(suite), "--nodes", "2", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    run = tmp_path / "run"
    j = json.loads(fleet("report", str(run), "--json", cwd=tmp_path, timeout=60, check=True).stdout)
    assert j["floor_path"] == ["a", "p", "p/c1", "p/c2", "p"], j["floor_path"]
    chain = sum(e["work_s"] for e in events(run) if e["kind"] == "exit")  # every exit is on it: p's two stages too
    assert j["floor_s"] == pytest.approx(chain, abs=1e-5) and j["floor_s"] <= j["wall_s"], (j["floor_s"], chain)
    text = fleet("report", str(run), cwd=tmp_path, timeout=60, check=True).stdout
    assert "(4 steps: a -> p -> p/c1 -> p/c2 -> p)" in text, text
