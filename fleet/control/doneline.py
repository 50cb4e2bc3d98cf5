"""A success's journal text, put together by shape: its done marker's record (the text
the marker file is written from) and its attempt record, which the journal's `done`
line carries together (fleet.control.journal.Journal.done).

Byte for byte what json's encoder gives for the dicts fleet.control.store.done_record
and attempt_record make (tests/control/test_linetext.py), so every reader of journals
and markers reads them as before; the values are spelled as fleet.control.linetext
spells them.
"""

from __future__ import annotations

from fleet.control.linetext import esc, num, text, value

_MARKER = ('{"outcome":"succeeded","spec":%s,"attempt":%r,"node":%s,"work_s":%s,"ended_at":%s,"fleet":%s,'
           '"id":%s,"deps":%s,"generation":%r}')
_ATTEMPT = ('{"fleet":%s,"attempt":%r,"generation":%r,"outcome":"succeeded","node":%s,"reason":%s,"work_s":%s,'
            '"started_at":%s,"ended_at":%s,"spec":%s,"rerun":%s,"submission":%s}')


def texts(fleet: str, node: str, msg, work_s: float, reason: str, spec: str, deps: dict, generation: int, mid: str,
          rerun: str, submission, att_spec: str, spelt: tuple | None = None) -> tuple[str, str]:
    """(marker, attempt record) of the success `msg` (an Exited) on `node`: as
    fleet.control.journal.encode of store.done_record's and attempt_record's dicts.
    `spec` is the hash of the definition that ran (the marker's), `att_spec` the one the
    attempt record names (the step's definition now: fleet.control.outcomes.store_reported).
    `spelt`: (node, work_s, work_start, ended_at) as the step's `exit` line spelled them
    (fleet.control.eventlines.Ended), each value spelled once a step; None: spelled here."""
    if spelt is None:
        spelt = text(node), num(work_s), num(msg.work_start), num(msg.ended_at)
    nd, work, started, ended = spelt
    fl, sp = text(fleet), esc(spec)
    asp = sp if att_spec == spec else esc(att_spec)
    if deps:
        ids = "{" + ",".join(esc(k) + ":" + value(v) for k, v in deps.items()) + "}"
    else:
        ids = "{}"
    marker = _MARKER % (sp, msg.attempt, nd, work, ended, fl, esc(mid), ids, generation)
    att = _ATTEMPT % (fl, msg.attempt, generation, nd, esc(reason), work, started, ended, asp, esc(rerun),
                      "null" if submission is None else num(submission))
    return marker, att
