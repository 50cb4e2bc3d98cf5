"""`fleet report`: what a run did, from its event stream alone.

The public API (what fleet.cli and the tests use)::

    records = load(run_dir)              # fleet.wire.events records, typed
    report = build(records, now=...)     # a Report of one session
    report = build(blocks(run_dir), now=...)  # the same, the stream never held whole
    format_text(report) / report.to_json()

Modules, bottom up: model (the Report and what it holds), ingest (records -> nodes,
steps, attempts; sessions; closes and unsure, its handlers of drains and of attempts
that may have run), waits (what waiting steps waited for), stretches (idle
while steps waited), figures and floor (startup, utilization, problems, the dependency
floor), assemble (build), text; series, trace and html draw a report; command is the
`fleet report` command's work, for fleet.cli only. None below trace and html imports them.
"""

from fleet.report.assemble import build
from fleet.report.figures import critical_path
from fleet.report.ingest import blocks, events_path, load, sessions
from fleet.report.model import CATEGORY_TEXT, Report, category_name
from fleet.report.text import format_text
from fleet.report.waits import classify

__all__ = ["CATEGORY_TEXT", "Report", "blocks", "build", "category_name", "classify", "critical_path", "events_path",
           "format_text", "load", "sessions"]
