"""Done markers written by the node that ran the step, not by the coordinator.

Why: a success's done marker is one file create a step. Created by the coordinator
(fleet.control.markwriter's threads), every create of the whole allocation comes from
one client: on Lustre or GPFS a client has a few metadata requests in flight, each a
round trip of 0.5-5 ms, so the allocation's steps could end no faster than a few
thousand a second, and on any filesystem the threads' hand-overs of the interpreter's
lock cost the loop about what the creates cost. The step's node already makes the
step's directory and log there; it makes the marker as well, and ten thousand nodes'
creates reach the metadata servers side by side (benchmarks/README.md, "Done markers
written on the nodes").

The order the journal keeps is unchanged: a marker is handed over only after the line
that owes it was fsync'd, exactly when it would have been queued for the threads. It
rides with the next message the coordinator sends that node (in a busy node's cycle a
Launch comes within a step: no message of its own), or goes alone after HOLD_S. The
agent writes it on a thread (fleet.node.markers) and says how far it got
(P.MarkersWritten) with its next message. Until then the marker counts as queued for
everything that asks the writer (this fleet's reads, a submission's durability, a
fleet that comes to share, the seal of a rotated journal). The coordinator's threads
write instead, the same bytes, whatever a node did not say written by the time it goes
(lost, unreachable, or said goodbye), what it said it could not write, and, before the
journal's seal at teardown, whatever is still out: that seal never waits on a node.
"""

from __future__ import annotations

import os
import time
from collections import deque
from typing import Callable

from fleet.wire import messages as P

HOLD_S = 0.25  # markers wait at most this long for a message to ride with
CAP = 1000  # markers in one message at most (~0.4 MB: under the sockets' MAX_FRAME)
NODE_BOUND = 5000  # markers a node has not said written at most; past it, the threads write its next ones
ENV = "FLEET_MARKERS_ON"  # "nodes" (the default) or "coordinator": who writes done markers


class Off:
    """The coordinator writes every marker (FLEET_MARKERS_ON=coordinator, or no writer)."""

    out: dict = {}

    def wake(self, when: float) -> float:
        return when

    def tick(self, now: float) -> None:
        pass

    def written(self, node: str, msg) -> None:
        pass

    def gone(self, node: str) -> None:
        pass


def attach(writer, transport, agents: dict) -> "NodeMarkers | Off":
    """Give the writer (fleet.control.markwriter; None: files written on the loop) the
    nodes of `agents` (node -> fleet.control.liveness.Agent) to hand markers to, riding
    with what the transport sends them (Off: the coordinator writes them all)."""
    if writer is None or os.environ.get(ENV, "nodes") == "coordinator":
        return Off()

    def takes(node: str) -> bool:  # its agent is there to write
        a = agents.get(node)
        return a is not None and a.alive

    nodes = writer.nodes = NodeMarkers(transport.send, takes)
    nodes.writer = writer
    transport.ride = nodes.ride
    return nodes


class NodeMarkers:
    """The markers handed to nodes and not yet said written, by node (its ZeroMQ identity)."""

    def __init__(self, send: Callable[[bytes, object], bool], takes: Callable[[str], bool]):
        self._send = send    # (identity, message) -> queued (the transport's send)
        self.takes = takes   # node -> whether its agent is there to write (joined, alive)
        self.out: dict[bytes, list] = {}        # identity -> items to give it, in order
        self._oldest: dict[bytes, float] = {}   # identity -> when its first item waiting came (in that order)
        self.sent: dict[bytes, deque] = {}      # identity -> (number, seq, item) given, not said written
        self._number: dict[bytes, int] = {}     # identity -> the last number given
        self.steps: dict[str, tuple] = {}       # step -> its item, while out or sent
        self.seq = 0        # items handed to nodes ever (tickets: fleet.control.markwriter)
        self.pending = 0    # out + sent
        self.on_nodes = 0   # said written by nodes
        self.taken_back = 0  # given back to the coordinator's threads
        self._sweep = 0.0
        self.writer = None  # fleet.control.markwriter.Writer, whose threads take back what nodes do not write

    def add(self, node: str, item: tuple) -> None:
        """An item owed (its line durable) for the node that ran its step."""
        ident = node.encode()
        q = self.out.get(ident)
        if q is None:
            q = self.out[ident] = []
            self._oldest[ident] = time.monotonic()
        self.seq += 1
        q.append((self.seq, item))
        self.steps[item[3]] = item
        self.pending += 1

    def room(self, node: str) -> bool:
        """Whether the node may be given one more: one whose filesystem hangs must not
        hold a growing pile of its steps' markers (nor their memory here)."""
        ident = node.encode()
        return len(self.out.get(ident, ())) + len(self.sent.get(ident, ())) < NODE_BOUND

    def ride(self, ident: bytes) -> bytes | None:
        """What waits for this node, encoded to go with the message the transport sends it now."""
        return P.encode(self._given(ident)) if ident in self.out else None

    def send_all(self) -> None:
        """Everything waiting goes now (a submission waits for its files: nothing to wait for)."""
        for ident in list(self.out):
            self._alone(ident)

    def _alone(self, ident: bytes) -> None:
        """The next message of markers for this node, sent by itself."""
        msg = self._given(ident)
        if not self._send(ident, msg):  # its queue is full now: given again later
            sent, back = self.sent[ident], []
            for _ in msg.files:
                _, seq, item = sent.pop()
                back.append((seq, item))
            self.out[ident] = back[::-1] + self.out.get(ident, [])
            self._oldest.setdefault(ident, time.monotonic())
            self._number[ident] -= len(msg.files)

    def _given(self, ident: bytes) -> P.Markers:
        """The next message of markers for this node (at most CAP), counted as given."""
        q = self.out[ident]
        if len(q) > CAP:
            q, self.out[ident] = q[:CAP], q[CAP:]
        else:
            del self.out[ident], self._oldest[ident]
        last = self._number.get(ident, 0)
        sent = self.sent.get(ident)
        if sent is None:
            sent = self.sent[ident] = deque()
        for seq, item in q:
            last += 1
            sent.append((last, seq, item))
        self._number[ident] = last
        return P.Markers(files=[[item[0], item[1]] for _, item in q], last=last)

    def wake(self, when: float) -> float:
        """The loop's next wake-up (time.monotonic()), sooner while markers wait to ride."""
        return min(when, time.monotonic() + HOLD_S / 4) if self.out else when

    def written(self, node: str, msg: P.MarkersWritten) -> None:
        """A node's progress (the writer's to act on: fleet.control.markwriter)."""
        self.writer.written_on(node, msg)

    def gone(self, node: str) -> None:
        """The node's agent will say nothing more: what it did not say written, the threads write."""
        self.writer.node_gone(node)

    def tick(self, now: float) -> None:
        """(Each loop turn) what waited HOLD_S with no message to ride goes alone."""
        if not self.out or now < self._sweep:
            return
        self._sweep = now + HOLD_S / 4
        late, due = time.monotonic() - HOLD_S, []
        for ident, t in self._oldest.items():  # (in the order they began to wait: the late ones first)
            if t > late:
                break
            due.append(ident)
        for ident in due:
            self._alone(ident)

    def said(self, node: str, msg: P.MarkersWritten) -> tuple[list, list]:
        """A node's progress: (items now written, items it could not write)."""
        sent = self.sent.get(node.encode())
        done, failed = [], []
        if not sent:
            return done, failed
        bad = set(msg.failed)
        while sent and sent[0][0] <= msg.upto:
            number, _, item = sent.popleft()
            (failed if number in bad else done).append(item)
            if self.steps.get(item[3]) is item:
                del self.steps[item[3]]
        self.pending -= len(done) + len(failed)
        self.on_nodes += len(done)
        self.taken_back += len(failed)
        return done, failed

    def take_back(self, ident: bytes | None = None) -> list:
        """A node's items (all nodes': None) not said written, in the order owed: for the threads."""
        idents = list({*self.out, *self.sent}) if ident is None else [ident]
        back = []
        for i in idents:
            self._oldest.pop(i, None)
            back += [(seq, item) for seq, item in self.out.pop(i, ())]
            back += [(seq, item) for _, seq, item in self.sent.pop(i, ())]
        back.sort(key=lambda x: x[0])
        items = [item for _, item in back]
        for item in items:
            if self.steps.get(item[3]) is item:
                del self.steps[item[3]]
        self.pending -= len(items)
        self.taken_back += len(items)
        return items

    def oldest_seq(self) -> int | None:
        """The seq of the oldest item not said written (None: none)."""
        heads = [q[0][0] for q in self.out.values() if q] + [q[0][1] for q in self.sent.values() if q]
        return min(heads, default=None)
