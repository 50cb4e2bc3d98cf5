"""The coordinator's per-step `start`, `started` and `skipped` records, encoded without
the record.

Every step that runs leaves a `start` and a `started` record in events.jsonl, and every
step a rerun finds done a `skipped` one. Built as
frozen dataclasses (each field set through object.__setattr__), mapped by to_dict and
then encoded, each cost the loop several microseconds per step. Here the record's JSON
object is built directly, in the order Record.to_dict writes it (t and kind first, the
writer's fleet, then the fields as declared, none of them None), and encoded once: the
line is exactly what EventLog.write gives for the record (tests/control/test_eventlines.py
compares them), so every reader reads it as before.
"""

from __future__ import annotations

from fleet.control.linetext import esc, ints, text
from fleet.wire import events as E
from fleet.wire.events import dumps
from fleet.wire.numtext import EXIT_NUMBERS, exit_numbers, num, r6, work_seconds


_START = ('{"t":%s,"kind":"start"%s,"step":%s,"attempt":%r,"node":%s,"cores":%s,"gpus":%s,"memory":%r,'
          '"nodes":[%s],"placement":[{"node":%s,"cores":%s,"gpus":%s,"memory":%r}]}')
_STARTED = '{"t":%s,"kind":"started"%s,"step":%s,"attempt":%r,"node":%s,"pid":%r,"at":%s}'
_QUEUED = '{"t":%s,"kind":"queued"%s,"step":%s,"attempt":%r,"node":%s,"after":%s}'
_SKIPPED = '{"t":%s,"kind":"skipped"%s,"step":%s%s}'


_fleets = {"": ""}  # a fleet's id -> its `fleet` field's text (one fleet a coordinator)


def _fleet(fleet: str) -> str:
    out = _fleets.get(fleet)
    if out is None:
        if len(_fleets) > 64:  # (tests make many fleets in one process)
            _fleets.clear()
            _fleets[""] = ""
        out = _fleets[fleet] = ',"fleet":' + esc(fleet)
    return out


_t = [None, ""]  # the last `t` a start line spelled: a pass's starts share their time


def _time(now: float) -> str:
    if now != _t[0]:
        _t[:] = now, r6(now)
    return _t[1]


def start(fleet: str, now: float, d) -> str:
    """The `start` line of a decision `d` (Start or Begin): as
    EventLog.write(fleet.control.launching.start_record(now, d))."""
    p = d.placement
    if len(p) == 1:  # the common case: one node's slot, by shape (fleet.control.linetext)
        s = p[0]
        node, cores, gpus = text(s.node), ints(s.cores), ints(s.gpus)
        return _START % (_time(now), _fleet(fleet), esc(d.step), d.attempt, node, cores, gpus, s.memory, node,
                         node, cores, gpus, s.memory)
    out = {"t": round(now, 6), "kind": "start"}
    if fleet:
        out["fleet"] = fleet
    out["step"], out["attempt"], out["node"] = d.step, d.attempt, p[0].node
    out["cores"] = [c for s in p for c in s.cores]
    out["gpus"] = [g for s in p for g in s.gpus]
    out["memory"], out["nodes"] = sum(s.memory for s in p), [s.node for s in p]
    out["placement"] = [{"node": s.node, "cores": list(s.cores), "gpus": list(s.gpus), "memory": s.memory} for s in p]
    return dumps(out)


def queued(fleet: str, now: float, d) -> str:
    """The `queued` line of a Queue decision `d` (fleet.core.window): as
    EventLog.write(events.Queued(...)) of its step, attempt, node and predecessor."""
    return _QUEUED % (_time(now), _fleet(fleet), esc(d.step), d.attempt, text(d.placement[0].node), esc(d.after))


def skipped(fleet: str, now: float, step: str, by=None) -> str:
    """The `skipped` line of a step done before (`by`: the other fleet that did it): as
    EventLog.write(events.Skipped(t=now, step=step, by=by))."""
    return _SKIPPED % (_time(now), _fleet(fleet), esc(step), "" if by is None else ',"by":' + dumps(by))


def started(fleet: str, now: float, node: str, msg) -> str:
    """The `started` line of an agent's Started report: as EventLog.write(events.Started(...))."""
    return _STARTED % (r6(now), _fleet(fleet), esc(msg.step), msg.attempt, text(node), msg.pid, num(msg.at))


def record(cls, **fields):
    """A record made as fleet.wire.events.parse makes one, without the frozen
    dataclass's __init__ (object.__setattr__ per field, for the `exit` record's 24
    fields): equal to cls(**fields)."""
    return E.filled(cls, fields)


class Ended:
    """What the other readers of a reported exit take from its `exit` record (the
    scheduler's event, the attempt record, a placement mismatch), when the record was
    written by exit_line and never made; `spelt`: the values the attempt's records
    repeat, as the line spells them (node, work_s, work_start, ended_at), or None."""

    __slots__ = ("reason", "work_s", "cores", "spelt")

    def __init__(self, reason: str, work_s: float, cores: list, spelt: tuple | None = None):
        self.reason, self.work_s, self.cores, self.spelt = reason, work_s, cores, spelt


# The `exit` line's text with every number spelled already (%s: by its node, or by
# fleet.wire.numtext here) or an int (%r): one formatting instead of one call per value.
_EXIT = ('{"t":%s,"kind":"exit"%s,"step":%s,"attempt":%r,"node":%s,"outcome":%s,"reason":%s%s,"cores":%s,'
         '"gpus":%s,"memory":%r,"decided_at":%s,"first_at":%s,"work_start":%s,"work_end":%s,"ended_at":%s,'
         '"startup_s":%s,"work_s":%s,"utime":%s,"stime":%s,"maxrss_kb":%r%s}')


def exit_line(fleet: str, now: float, node: str, msg, view) -> tuple[str, Ended]:
    """The `exit` line of an agent's Exited report that names no neighbours (any outcome
    but terminated): as EventLog.write(fleet.control.outcomes.reported_exit(...)), put
    together by shape (fleet.control.linetext), and what else reads that record, with the
    values a success's records repeat spelled once (Ended.spelt). The step's times and
    rusage come spelled by its node (Exited.spelt), else are spelled here."""
    p = view.placement
    if len(p) == 1:
        s = p[0]
        cores, gpus, memory = list(s.cores), s.gpus, s.memory
    else:
        cores, gpus, memory = [c for s in p for c in s.cores], [g for s in p for g in s.gpus], sum(s.memory for s in p)
    sp = msg.spelt
    if len(sp) != EXIT_NUMBERS:  # (not spelled where it ended: a launch that never started)
        sp = exit_numbers(msg.decided_at, msg.first_at, msg.work_start, msg.work_end, msg.ended_at, msg.utime,
                          msg.stime, msg.worked_s)
    work = work_seconds(msg.work_start, msg.work_end, msg.worked_s)
    reason, rc, sig, err, peak = msg.error or "", msg.returncode, msg.signal, msg.error, msg.memory_peak
    nd = text(node)
    mid = ("" if rc is None else ',"returncode":' + num(rc)) + ("" if sig is None else ',"signal":' + num(sig))
    tail = ("" if err is None else ',"error":' + esc(err)) + ("" if peak is None else ',"memory_peak":' + num(peak))
    if msg.oom_kills is not None:
        tail += ',"oom_kills":' + num(msg.oom_kills)
    line = _EXIT % (r6(now), _fleet(fleet), esc(msg.step), msg.attempt, nd, text(msg.outcome), esc(reason), mid,
                    ints(cores), ints(gpus), memory, *sp, msg.maxrss_kb, tail)
    wst, endt, workt = sp[2], sp[4], sp[6]
    return line, Ended(reason, work, cores, (nd, workt, wst, endt))
