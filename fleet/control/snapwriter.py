"""A claims snapshot (fleet.control.claimsnap) written off the coordinator's loop.

Written on the loop, a snapshot held it for one whole turn: grouping a million held
steps by fleet, one json.dumps call of ~20 MB (which never lets go of the interpreter's
lock), the write and the fsync (163 ms at 1,000,000 held steps on a quiet machine). Now
the loop only copies the two tables it owns (C copies: a few ms at a million) and
notes the number N the snapshot is to take; a thread groups, encodes in pieces of
PIECE steps (each json.dumps call short, so the loop gets the lock back within the
switch interval, 0.2 ms in the coordinator: fleet.control.worker), writes the temporary
file and fsyncs it. The loop links it in place as N at its next claims upkeep, exactly
as before, and only if it is still N's: the loop read or wrote nothing since the copy
(a batch of another fleet at N means it lost the race, as a snapshot always could:
dropped). A batch this fleet must write meanwhile waits for the thread first (the
number is the snapshot's): the only wait left on the loop, and only when a claim falls
in those few hundred ms. Directory fsync and the removal of the files before N then
run on a thread too. Crash safety is the same as on the loop: every stage leaves what
it left there (the module docstring of fleet.control.claimsnap); the fault hooks fire
in the thread, which kills the process all the same."""

from __future__ import annotations

import json
import logging
import os
import threading

_log = logging.getLogger("fleet.control.snapwriter")
PIECE = 4096  # steps per json.dumps call in the thread


class Pending:
    """A snapshot written aside, linked as number `of` and the files before it removed,
    by a thread (see the module's docstring)."""

    def __init__(self, log, head: bytes, bound: int, live: set):
        self.of, self.root, self.fleet_id = log.next, log.root, log.fleet_id
        self.tmp = log.root / f".{log.fleet_id}.{os.getpid()}.snap.tmp"
        self.linked: bool | None = None  # the link's outcome, once tried
        self.counted = False  # the loop took the outcome in (claimsnap.settle)
        self.decided = threading.Event()  # set once linked, lost or failed: the loop may write again
        # The loop's own tables copied (C copies), so the thread reads a still picture.
        holder, said = log.holder.copy(), log.said.copy()
        self.thread = threading.Thread(target=self._run, args=(head, holder, said, min(bound, self.of), live),
                                       name="fleet-claimsnap", daemon=True)
        self.thread.start()

    def _run(self, head: bytes, holder: dict, said: set, bound: int, live: set) -> None:
        from fleet.control import claimsnap
        try:
            try:
                self._write(claimsnap, head, holder, said)
            finally:
                self.decided.set()
            if self.linked:
                claimsnap._sync_dir(self.root)
                claimsnap._remove(self, bound, live)
        except OSError as e:
            _log.error("could not compact the claims log %s: %s", self.root, e)

    def _write(self, claimsnap, head: bytes, holder: dict, said: set) -> None:
        self.linked = False
        with open(self.tmp, "wb") as f:
            f.write(head)
            for part in _encoded(holder, said):
                f.write(part)
            f.flush()
            os.fsync(f.fileno())
        claimsnap._fault("written")
        try:
            # Still the log's next number: the loop writes nothing while this is undecided
            # (ClaimLog._write waits), so only another fleet's batch can be there.
            os.link(self.tmp, self.root / f"{self.of:09d}.json")
            self.linked = True
        except FileExistsError:
            pass
        finally:
            os.unlink(self.tmp)
        if self.linked:
            claimsnap._fault("linked")

    def done(self) -> bool:
        return not self.thread.is_alive()


def _groups(holder: dict, said: set) -> tuple[dict, dict]:
    holders: dict[str, list] = {}
    ended: dict[str, list] = {}
    for s, who in holder.items():  # plain Python: the loop takes the lock between bytecodes
        h = holders.get(who)
        if h is None:
            h = holders[who] = []
        h.append(s)
        if s in said:
            ended.setdefault(who, []).append(s)
    return holders, ended


def _encoded(holder: dict, said: set):
    """The snapshot's state line, as claimsnap._state writes it, in pieces."""
    holders, ended = _groups(holder, said)
    for key, groups in (("holders", holders), ("ended", ended)):
        yield (b'{"' if key == "holders" else b',"') + key.encode() + b'":{'
        for k, (who, steps) in enumerate(groups.items()):
            yield (b"," if k else b"") + json.dumps(who).encode() + b":["
            for i in range(0, len(steps), PIECE):
                yield (b"," if i else b"") + json.dumps(steps[i:i + PIECE], separators=(",", ":"))[1:-1].encode()
            yield b"]"
        yield b"}"
    yield b"}"
