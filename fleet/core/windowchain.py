"""Chains in a node's window (fleet.core.window), when the depth is above 1.

With `fleet up --window-depth N`, up to N steps may wait behind one running step on
its node, each behind the one before it: a chain. Only its last step (the tail) may
take another, while the chain is shorter than N; a tail at the depth is `full` until
the chain's head starts (its predecessor ended). What a chain keeps, besides the
window's tables:

- `ends`: a queued step's expected end is its predecessor's expected end plus its own
  expected duration (unknown: unknown), so that the choice of where a step goes
  (fleet.core.windowpick) and the reservations' plans see when the slot frees;
- `chained` (the slot's entry for windowpick._later) is kept under the tail's
  predecessor, so one entry per slot that has a step queued, as with depth 1;
- `loose` (what may be taken back, fleet.core.windowback) holds tails only: taking a
  step from the middle would leave its follower behind a step that never runs.

A step that leaves the chain without starting (cancelled, taken back, claimed
elsewhere) hands its follower to its own predecessor, as the node does
(fleet.node.queued.Queued.drop); a lost node's chains are undone tail first. A tail
being cancelled or taken back takes nothing behind it meanwhile: its node drops it when
the word arrives, and a launch queued behind it then would start at once there.
Cost: O(depth) per step queued (the walk to the chain's head), nothing with depth 1.
"""

from __future__ import annotations

import math

from fleet.core.durations import expected_s


class WindowChain:
    """Chains of queued steps (a part of fleet.core.window.Window)."""

    def _chain_of(self, first) -> list:
        """`first` and the steps queued behind it, in order."""
        chain = [first]
        nxt = self.next.get(first.spec.id)
        while nxt is not None:
            chain.append(nxt)
            nxt = self.next.get(nxt.spec.id)
        return chain

    def _level(self, job) -> int:
        """How many queued steps `job`'s chain has up to `job` (0: `job` runs)."""
        n, behind = 0, self.behind
        while job.spec.id in behind:
            n += 1
            job = behind[job.spec.id]
        return n

    def _extend(self, job, pred, node: str) -> None:
        """`job` was just queued behind `pred`: it is its chain's tail."""
        exp = expected_s(job.spec, self.sched.deadline.recorded)
        self.ends[job.spec.id] = self.ends.get(pred.spec.id, math.inf) + exp if exp is not None else math.inf
        gp = self.behind.get(pred.spec.id)
        if gp is not None:  # pred was the tail: the slot's entry moves to pred (_chain put it)
            self._drop_from(self.chained, gp)
            if self.loose:
                self._drop_from(self.loose, pred)
        if self._level(job) >= self.depth:
            self.full.add(job.spec.id)
        else:
            self._open_queued(job, node)

    def _open_queued(self, job, node: str) -> None:
        if self.count.get(node, 0) >= self._limit(node):
            self.parked.setdefault(node, {})[job.spec.id] = job  # opened when the node's window has room
        else:
            self._open(job)

    def _unchain(self, job, pred) -> bool:
        """`job` left the window without starting (unlinked from `pred`): it takes nothing
        behind it now; its follower, if any, goes behind `pred`. True if it had one."""
        sid = job.spec.id
        self._close(job)
        self.full.discard(sid)
        follower = self.next.pop(sid, None)
        if follower is None:
            return False
        fid = follower.spec.id
        self.next[pred.spec.id] = follower
        self.behind[fid] = pred
        self._reckon(pred, self._chain_of(follower))
        if fid not in self.next:  # the follower is the tail: the slot's entry goes to pred
            self._chain(follower, pred)
        self._shortened(pred)
        self._left(pred.placement[0].node)
        return True

    def _reckon(self, pred, chain) -> None:
        """The expected ends of `chain`, queued in order behind `pred`, from pred's."""
        end, recorded = self.ends.get(pred.spec.id, math.inf), self.sched.deadline.recorded
        for job in chain:
            exp = expected_s(job.spec, recorded)
            end = end + exp if exp is not None else math.inf
            self.ends[job.spec.id] = end

    def _retail(self, job) -> None:
        """Queued `job` is its chain's tail again (its follower left)."""
        pred = self.behind[job.spec.id]
        self._chain(job, pred)
        if self.recalled and job.spec.id in self.recalled:
            # Taken back, its node's answer to come: its node may have dropped it already, and
            # a launch queued behind it would then start at once, on its predecessor's cores.
            self.full.discard(job.spec.id)
            return
        if self.tracking and job.spec.id not in self.kept:
            self._put(job, pred)
        self.full.discard(job.spec.id)
        self._open_queued(job, job.placement[0].node)

    def _shortened(self, head) -> None:
        """A chain got shorter from `head` on (its head started, or a step of it left):
        its tail may take one behind it again."""
        tail = self._chain_of(self.next[head.spec.id])[-1] if head.spec.id in self.next else head
        if tail.spec.id in self.full and not (self.recalled and tail.spec.id in self.recalled):  # (see _retail)
            self.full.discard(tail.spec.id)
            self._open_queued(tail, tail.placement[0].node)

    def _no_more(self, job) -> None:
        """A queued step is being cancelled or taken back: if it is a chain's tail, nothing
        more goes behind it (one in the middle takes none anyway)."""
        if self.depth > 1 and job.spec.id not in self.next:
            self._close(job)
            self.full.discard(job.spec.id)

    @staticmethod
    def _drop_from(table: dict, job) -> None:
        heap = table.get(job.demand)
        if heap is not None and heap.drop(job.spec.id) and not heap:
            del table[job.demand]
