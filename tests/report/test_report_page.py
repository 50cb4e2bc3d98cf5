"""The HTML page in a real browser: every label of its charts drawn inside its chart."""

from __future__ import annotations

import html
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from fleet.wire import events as E
from fleetharness import fleet

CHROMIUM = Path("/usr/bin/chromium")

# Measures each <text> of the charts against its <svg>'s visible box (its viewBox), and
# writes what does not fit into the page, for --dump-dom.
PROBE = """<script>
const out = [];
let seen = 0;
for (const svg of document.querySelectorAll("svg")) {
  const vb = svg.viewBox.baseVal;
  for (const t of svg.querySelectorAll("text")) {
    const b = t.getBBox();
    seen += 1;
    if (b.x < vb.x - 0.5 || b.x + b.width > vb.x + vb.width + 0.5 || b.y < vb.y - 0.5
        || b.y + b.height > vb.y + vb.height + 0.5)
      out.push([svg.id, t.textContent, b.x, b.x + b.width, vb.x, vb.x + vb.width]);
  }
}
const pre = document.createElement("pre");
pre.id = "probe";
pre.textContent = JSON.stringify({seen: seen, outside: out});
document.body.appendChild(pre);
</script>"""


def crowded_stream(path: Path, waiting: int) -> None:
    """Two fleets sharing a run directory, each with a node named `node1`, and
    `waiting` steps waiting for one that runs: the right axis's peak has 4 digits."""
    recs: list[E.Record] = []
    for k, f in enumerate(("somehost-123456-abcdef", "otherhost-654321-fedcba")):
        recs += [E.FleetStarting(t=k, fleet=f, nodes=1, pid=1),
                 E.NodeJoined(t=k, fleet=f, node="node1", host="h", cores=[0, 1], memory=100),
                 E.FleetUp(t=k, fleet=f, nodes=["node1"])]
    f = "somehost-123456-abcdef"
    recs.append(E.Submitted(t=2, fleet=f, submission=1, name="s", steps=waiting + 1))
    recs.append(E.StepDeclared(t=2, fleet=f, step="root", submission=1, cores=1, min_cores=1, task="root"))
    recs += [E.StepDeclared(t=2, fleet=f, step=f"w{i}", submission=1, cores=1, min_cores=1, deps=["root"],
                            task=f"w{i}") for i in range(1, waiting + 1)]
    recs += [E.Start(t=2, fleet=f, step="root", attempt=1, node="node1", cores=[0], memory=10,
                     placement=[dict(node="node1", cores=[0], gpus=[], memory=10)]),
             E.Exit(t=12, fleet=f, step="root", attempt=1, node="node1", outcome="failed", reason="exit status 1",
                    cores=[0], memory=10, decided_at=2, startup_s=0.0, work_s=10.0)]
    recs += [E.Blocked(t=12, fleet=f, step=f"w{i}", because="root") for i in range(1, waiting + 1)]
    recs += [E.FleetDown(t=13, fleet=f), E.FleetDown(t=13, fleet="otherhost-654321-fedcba")]
    path.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in recs))


def need_chromium() -> None:
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is absent: install Debian's chromium (apt-get install chromium) "
                    "to check the HTML page in a real browser; CI's .ci/run installs it")


def probed(tmp_path: Path, text: str, probe_script: str) -> dict:
    """What probe_script wrote into the page (a <pre id="probe"> of JSON), the page
    laid out by headless chromium in a window of 1400 x 900."""
    probe = tmp_path / "probe.html"
    probe.write_text(text.replace("</body>", probe_script + "</body>"))
    profile = tmp_path / "chromium-profile"
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", "--window-size=1400,900", "--dump-dom", probe.as_uri()]
    p = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = p.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise AssertionError("chromium did not dump the page within 90 s")
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    dom = out.decode()
    assert '<pre id="probe">' in dom, f"the probe did not run; chromium exited {p.returncode}: {err.decode()[-2000:]}"
    return json.loads(html.unescape(dom.split('<pre id="probe">', 1)[1].split("</pre>", 1)[0]))


def test_every_label_of_the_charts_fits_its_chart_in_a_real_browser(tmp_path):
    need_chromium()
    stream = tmp_path / "events.jsonl"
    crowded_stream(stream, 5498)
    page = tmp_path / "report.html"
    r = fleet("report", str(stream), "--html", str(page), cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    text = page.read_text()
    assert ">5498</text>" in text and "node1@otherhost-654321-fedcba (2)" in text
    found = probed(tmp_path, text, PROBE)
    assert found["seen"] > 10  # the axes' numbers, the ticks and the node labels were measured
    assert found["outside"] == [], f"labels drawn outside their chart: {found['outside']}"



# The problems table's box and each of its columns' right edges, against the window's width.
TABLE_PROBE = """<script>
const h = [...document.querySelectorAll("h2")].find(x => x.textContent == "Problems");
const table = h.nextElementSibling;
const row = table.rows[1];
const pre = document.createElement("pre");
pre.id = "probe";
pre.textContent = JSON.stringify({window: document.documentElement.clientWidth,
  table: table.getBoundingClientRect().right, step: row.cells[1].getBoundingClientRect().width,
  rights: [...row.cells].map(c => c.getBoundingClientRect().right), log: row.cells[5].textContent});
document.body.appendChild(pre);
</script>"""


def test_the_problems_table_of_steps_with_200_character_ids_fits_the_window_and_names_each_log(tmp_path):
    # Before 2026-12-06 the step column was ~1,500 px wide and pushed the reason off the
    # screen, and no problem said where its log was.
    need_chromium()
    long = "L" * 196
    recs: list[E.Record] = [E.FleetStarting(t=0, fleet="f", nodes=1, pid=1),
                            E.NodeJoined(t=0, fleet="f", node="node1", host="h", cores=[0, 1], memory=100),
                            E.FleetUp(t=0, fleet="f", nodes=["node1"]),
                            E.Submitted(t=1, fleet="f", submission=1, name="s", steps=3)]
    for i in range(3):
        sid = f"{long}/{i}"
        recs += [E.StepDeclared(t=1, fleet="f", step=sid, submission=1, cores=1, min_cores=1, task=sid),
                 E.Start(t=1 + i, fleet="f", step=sid, attempt=1, node="node1", cores=[0], memory=10,
                         placement=[dict(node="node1", cores=[0], gpus=[], memory=10)]),
                 E.Exit(t=2 + i, fleet="f", step=sid, attempt=1, node="node1", outcome="failed",
                        reason="RuntimeError: " + "a long reason " * 8, cores=[0], memory=10, decided_at=1 + i,
                        startup_s=0.0, work_s=1.0)]
    recs.append(E.FleetDown(t=6, fleet="f"))
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in recs))
    page = tmp_path / "report.html"
    r = fleet("report", str(tmp_path), "--html", str(page), cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    text = page.read_text()
    assert "td.w{overflow-wrap:anywhere}" in text  # (the step, reason and log cells: class w)
    assert text.count(f'<td class="w">steps/{long}/') == 3
    found = probed(tmp_path, text, TABLE_PROBE)
    assert found["log"] == f"steps/{long}/0/log", found
    assert found["table"] <= found["window"] and max(found["rights"]) <= found["window"], found
    assert found["step"] < 600, found  # (it was ~1,500 px: the id on one line)
    r = fleet("report", str(tmp_path), cwd=tmp_path, timeout=60)
    assert f"{long}/2 on node1: RuntimeError: " in r.stdout and f"(log: steps/{long}/2/log)" in r.stdout, r.stdout


# The summary table's rows, the legend's swatches (colour, words), the Children table's
# rows and each bar's colour (its work's, solid) with its title.
SUMMARY_PROBE = """<script>
const cells = t => [...t.rows].map(r => [...r.cells].map(c => c.textContent));
const fams = [...document.querySelectorAll("h2")].find(x => x.textContent == "Children and stages");
const pre = document.createElement("pre");
pre.id = "probe";
pre.textContent = JSON.stringify({summary: cells(document.querySelector("table")),
  legend: [...document.querySelectorAll(".sw")].map(s => [getComputedStyle(s).backgroundColor,
                                                          s.nextSibling.textContent.trim()]),
  children: fams ? cells(fams.nextElementSibling) : null,
  bars: [...document.querySelectorAll("#gantt g")].map(g => [
    getComputedStyle([...g.querySelectorAll("rect")].pop()).fill,
    g.querySelector("title").textContent.split("\\n")[0]])});
document.body.appendChild(pre);
</script>"""


def test_the_page_says_the_allocations_end_the_drain_its_verdict_and_the_children_and_its_legend_names_interrupted(
        tmp_path):
    # Before 2026-12-06 the page had none of the text's allocation, drain and children
    # lines, and its legend no "interrupted", whose bars were grey.
    need_chromium()
    f = "f"
    place = [dict(node="node1", cores=[0], gpus=[], memory=10)]
    recs: list[E.Record] = [E.FleetStarting(t=0, fleet=f, nodes=1, pid=1),
                            E.NodeJoined(t=0, fleet=f, node="node1", host="h", cores=[0, 1], memory=100),
                            E.FleetUp(t=0, fleet=f, nodes=["node1"]),
                            E.Submitted(t=1, fleet=f, submission=1, name="s", steps=2),
                            E.AllocationEnd(t=1, fleet=f, end=31, drain_at=11, source="slurm")]
    for sid in ("p", "p/c0", "p/c1", "late"):
        recs.append(E.StepDeclared(t=1, fleet=f, step=sid, submission=1, cores=1, min_cores=1, task=sid))
    recs += [E.Start(t=1, fleet=f, step="p", attempt=1, node="node1", cores=[0], memory=10, placement=place),
             E.Exit(t=2, fleet=f, step="p", attempt=1, node="node1", outcome="succeeded", cores=[0], memory=10,
                    decided_at=1, startup_s=0.0, work_s=1.0),
             E.Start(t=2, fleet=f, step="p/c0", attempt=1, node="node1", cores=[0], memory=10, placement=place),
             E.Exit(t=4, fleet=f, step="p/c0", attempt=1, node="node1", outcome="succeeded", cores=[0], memory=10,
                    decided_at=2, startup_s=0.0, work_s=2.0),
             E.Start(t=4, fleet=f, step="p/c1", attempt=1, node="node1", cores=[0], memory=10, placement=place),
             E.Drained(t=11, fleet=f, reason="the drain point, 20 s before the end", running=1),
             E.Exit(t=12, fleet=f, step="p/c1", attempt=1, node="node1", outcome="interrupted", cores=[0], memory=10,
                    reason="drained: stopped by the drain", decided_at=4, startup_s=0.0, work_s=8.0),
             E.NotStarted(t=12, fleet=f, steps=1, held=1, reason="not started: the allocation ends at 12:00:00"),
             E.FleetDown(t=13, fleet=f)]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in recs))
    page = tmp_path / "report.html"
    r = fleet("report", str(tmp_path), "--html", str(page), cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    text = fleet("report", str(tmp_path), cwd=tmp_path, timeout=60).stdout
    found = probed(tmp_path, page.read_text(), SUMMARY_PROBE)
    rows = {row[0]: row[1:] for row in found["summary"]}
    assert rows["allocation"] == ["ends at 30.00 s", "(slurm), drain point at 10.00 s (from the first submission)"]
    assert rows["drained"] == ["at 10.00 s", "the drain point, 20 s before the end; 1 step interrupted, 1 step not "
                               "started (1 would not have ended before the drain point): the next run goes on"], rows
    for label in ("allocation", "drained"):  # the text's own lines, word for word
        assert f"  {label:<13} {rows[label][0]}" in text, text
        assert rows[label][1] in text, text
    assert rows["children"] == ["1", "2 submitted by 1 step(s); stages and waits (below)"], rows
    assert found["children"] == [["step", "outcome", "children, stages, restarts"],
                                 ["p", "succeeded", "2 children (1 interrupted, 1 succeeded)"]], found["children"]
    legend = dict((words, colour) for colour, words in found["legend"])
    grey = legend.pop("unfinished or interrupted")
    assert "interrupted" not in " ".join(legend) and "unfinished" not in " ".join(legend), found["legend"]
    bars = {title.split(" (")[0]: fill for fill, title in found["bars"]}
    assert bars["p/c1"] == grey and bars["p/c0"] == legend["succeeded"], (bars, found["legend"])
