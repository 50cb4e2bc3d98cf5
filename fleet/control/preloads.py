"""A suite's ``preload`` on a fleet that is already up: the coordinator's side.

`fleet up --preload` gives every zygote its modules at start. A suite submitted later
may ask for more (``[suite] preload``): its submission is *held*. Every live agent
whose zygote lacks them is sent a Preload (fleet.node.preload imports them between
forks); the submission's steps reach the scheduler, and the client its answer, only
when every one of those agents has answered. If a zygote refuses (a module fails to
import, starts a thread, or takes too long) the submission is refused, naming the
module and the node, and nothing of it starts; what other zygotes imported stays
there (harmless, and never sent again). Submissions that arrive meanwhile wait behind
it in order (fleet.control.intake), so that at most one is held and submission order
is kept.

A node that joins later is handed to the scheduler only once its zygote has what the
fleet has preloaded (the accumulated set, sent as one Preload).

Nothing here waits: it records what is pending and is told of each answer, and of
the clock every heartbeat, by the coordinator's loop (:meth:`Preloads.settle` says
what has become of it).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace

from fleet.control.liveness import Liveness
from fleet.control.submissions import Accepted
from fleet.core.problems import Problem
from fleet.core.resources import NodeSpec
from fleet.wire import events
from fleet.wire import messages as P
from fleet.wire.events import EventLog

log = logging.getLogger("fleet.control.coordinator")

# How long a held submission waits for every zygote's answer. The client that sent it
# waits 60 s at first (fleet.control.api.SUBMIT_WAIT_S); a zygote gives up on an import after 25 s
# (fleet.node.preload.PROBE_TIMEOUT_S) and then imports once more itself.
PRELOAD_WAIT_S = 55.0


@dataclass
class Held:
    """A submission whose steps wait for the zygotes to import its suite's modules."""

    ident: bytes            # the client to answer
    msg: P.Submit
    acc: Accepted
    modules: tuple          # what the suite preloads that the fleet lacked
    nodes: set              # the agents whose answer it waits for
    since: float            # time.monotonic()
    problems: list = field(default_factory=list)  # set when it is refused


@dataclass
class Settled:
    """What became of the pending preloads at one look."""

    nodes: list = field(default_factory=list)        # late joiners ready for the scheduler (NodeSpec)
    turned_away: list = field(default_factory=list)  # (node, reason): joiners that cannot have the set
    held: Held | None = None                         # a submission whose wait is over


class Preloads:
    """Which modules each zygote has, what is asked of them, and who waits for it."""

    def __init__(self, base: tuple[str, ...], liveness: Liveness, log_: EventLog,
                 wait_s: float = PRELOAD_WAIT_S):
        self.liveness = liveness
        self.events = log_
        self.wait_s = wait_s
        self.loaded: list[str] = list(dict.fromkeys(base))  # every zygote of the fleet has these
        self.has: dict[str, set[str]] = {}
        self.asked: dict[str, set[str]] = {}    # in flight, per node
        self.refused: dict[str, str] = {}       # per node: why its latest Preload failed
        self.joining: dict[str, tuple[NodeSpec, float]] = {}
        self.held: Held | None = None
        self.notes: dict[str, str] = {}  # what ok answers said, for the held submission's submitter

    # -- nodes ----------------------------------------------------------------------------
    def joined(self, msg: P.Join, nodes: list[NodeSpec], ready: bool) -> list[NodeSpec]:
        """An agent joined (``nodes``: what liveness would hand the scheduler now). Of
        those, the ones to hand it now: a late joiner only once it has the fleet's set."""
        if nodes or not ready:  # not a rejected second agent
            self.has[msg.node] = set(msg.preload)
            self.asked[msg.node] = set()
            self.refused.pop(msg.node, None)
        if not ready or not nodes:
            return nodes
        lacking = [m for m in self.loaded if m not in self.has[msg.node]]
        if self.held is not None:  # asked apart: a bad new module must not cost it the old set
            self._ask(msg.node, [m for m in self.held.modules if m not in self.has[msg.node]])
            self.held.nodes.add(msg.node)
        if not lacking:
            return nodes
        self._ask(msg.node, lacking)
        self.joining[msg.node] = (nodes[0], time.monotonic())
        return []

    def _ask(self, node: str, modules: list[str]) -> None:
        if modules:  # one that cannot be reached is lost on heartbeats, then not waited for
            self.liveness.send(node, P.Preload(tuple(modules)))
            self.asked[node] |= set(modules)

    def _alive(self, node: str) -> bool:
        a = self.liveness.agents.get(node)
        return a is not None and a.alive

    # -- submissions ------------------------------------------------------------------------
    def hold(self, ident: bytes, msg: P.Submit, acc: Accepted) -> bool:
        """Hold an accepted submission if its suite preloads what some live zygote
        lacks (each such agent is sent a Preload); False: it need not wait."""
        new = [m for m in dict.fromkeys(acc.preload) if m not in self.loaded]
        waiting = set()
        for node in [a.node for a in self.liveness.agents.values() if a.alive and a.node in self.has]:
            lacking = [m for m in new if m not in self.has[node]]
            if lacking:
                waiting.add(node)
                self._ask(node, [m for m in lacking if m not in self.asked[node]])
        if not waiting:
            self.loaded += new
            return False
        self.held, self.notes = Held(ident, msg, acc, tuple(new), waiting, time.monotonic()), {}
        return True

    def waiting(self) -> dict | None:
        """The held submission, for `fleet status` and the `fleet run` that waits for it:
        its suite, the modules, the live nodes whose zygotes have not answered yet, and
        for how long it has been held (before 2026-12-06 nothing said it was held)."""
        held = self.held
        if held is None:
            return None
        wanted = set(held.modules)
        nodes = [n for n in sorted(held.nodes) if self._alive(n) and wanted & self.asked[n]]
        return dict(suite=held.msg.suite, modules=list(held.modules), nodes=nodes,
                    held_s=round(time.monotonic() - held.since, 1))

    def answered(self, node: str, msg: P.Preloaded, now: float) -> None:
        """A zygote's answer (relayed by its agent): recorded, and counted."""
        self.events.write(events.Preloaded(t=now, node=node, modules=list(msg.modules),
                                           import_s=round(msg.import_s, 6), ok=msg.ok, reason=msg.reason))
        if node not in self.has:
            return
        self.asked[node] -= set(msg.modules)
        if msg.ok:
            self.has[node] |= set(msg.modules)
            if msg.reason:  # what the modules changed of the zygote's signals, put back (fleet.node.ownsignals)
                log.warning("the zygote on %s preloaded %s: %s", node, list(msg.modules), msg.reason)
                self.notes.setdefault(msg.reason, node)
        else:
            self.refused[node] = msg.reason
            log.error("the zygote on %s did not preload %s: %s", node, list(msg.modules), msg.reason)

    def settle(self) -> Settled:
        """What the answers so far (and the clock) decide."""
        out = Settled()
        now = time.monotonic()
        for node, (spec, since) in list(self.joining.items()):
            lacking = set(self.loaded) - self.has[node]
            if not self._alive(node):
                del self.joining[node]
            elif not lacking:
                del self.joining[node]
                out.nodes.append(spec)
            elif not lacking & self.asked[node] or now - since > self.wait_s:
                del self.joining[node]
                out.turned_away.append((node, self._why(node, lacking, now - since)))
        held = self.held
        if held is not None:
            wanted = set(held.modules)
            short = [n for n in sorted(held.nodes) if self._alive(n) and not wanted <= self.has[n]]
            if now - held.since > self.wait_s or not any(wanted & self.asked[n] for n in short):
                held.problems = [str(Problem(held.msg.suite, None, "suite.preload",
                                             f"node {n}: {self._why(n, wanted, now - held.since)}"))
                                 for n in short]
                if not held.problems:
                    self.loaded += held.modules
                    said = tuple(f"preload: {text}" for text in self.notes)
                    held.acc = replace(held.acc, notes=held.acc.notes + said)
                self.notes = {}
                self.held, out.held = None, held
        return out

    def _why(self, node: str, wanted: set, waited: float) -> str:
        if wanted & self.asked[node]:
            return f"its zygote did not answer within {waited:.0f} s"
        return self.refused.get(node, "its zygote did not import them")
