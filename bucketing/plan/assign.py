"""Assign collectives to buckets: one walk over the graph, knowing no policy.

Every node carries a bitmask of the buckets whose collectives it
(transitively) depends on; a collective joins the open bucket of its key
only if its own mask does not hold that bucket's bit.

Merging turns a bucket into one issue node (after all member inputs) and one
wait node (before every member's first user), so buckets can depend on each
other through members added later: a bucket depends on every bucket any of
its members' inputs depends on. Each open bucket keeps the set of buckets
that depend on it, directly or through other buckets, and takes no member
whose inputs depend on it or on any of them: the merged graph stays acyclic,
and a bucket stays open when another comes to depend on it. HSDP needs
that: each gradient's all-reduce over replicas feeds its reduce-scatter over
shards, and the all-reduces still merge into one bucket that the
reduce-scatters' bucket reads.

Nodes with side effects (mutations, effect tokens) are barriers: everything
before one stays before it, and a bucket never spans one. Seeded random ops
(attention carries the tag even without dropout) are no barrier: issuing or
waiting a collective never touches the random state. They only keep their
order among themselves, so each one counts as depending on everything the
previous one depends on.

The policy answers the rest: each collective's key, whether it is left out
or kept alone, why a bucket the graph allows refuses it, the caps, how many
buckets of a key stay open. A bucket that refuses a collective for its cap is
closed, where that collective fits a new one: a later, smaller collective
filling its room would hold the bucket's issue back until it is ready.
"""

from __future__ import annotations

from collections import defaultdict

import torch.fx as fx

from ..collectives import Collective
from .policy import Policy
from .records import Alone, Bucket, Span, When
from .timeline import Timeline


class Assigner:
    """The buckets of one graph, and the collectives left alone, in assignment order."""

    def __init__(self, timeline: Timeline, whens: dict[fx.Node, When], policy: Policy):
        self.timeline, self.whens, self.policy = timeline, whens, policy
        self.buckets: list[Bucket] = []  # in order of their first member, singletons included
        self.alone: list[Alone] = []  # left out, or kept alone
        # Per bucket: the buckets that depend on it (a bitmask), directly or
        # through others; kept up to date while it is open (a closed bucket never
        # takes a member, so no cycle can pass through its growth).
        self.dependents: list[int] = []
        self.open_by_key: dict[tuple, list[int]] = defaultdict(list)  # newest last
        self.next_index: dict[str, int] = defaultdict(int)  # per kind
        self.barrier_mask = 0  # what every node after the last barrier depends on
        self.last_barrier = ""

    def run(self, collectives: list[Collective]) -> Assigner:
        by_node = {c.node: c for c in collectives}
        barriers, seeded = set(self.timeline.barriers), set(self.timeline.seeded)
        masks: dict[fx.Node, int] = {}
        rng_mask = 0  # what the next seeded node depends on through the random state
        everything = 0  # union of all masks so far: what a barrier depends on
        for node in self.timeline.nodes:
            mask = self.barrier_mask
            for inp in node.all_input_nodes:
                mask |= masks[inp]
            if node in seeded:
                mask |= rng_mask
                rng_mask = mask
            c = by_node.get(node)
            if c is not None:
                bid = self._assign(c, mask)
                if bid is not None:
                    mask |= 1 << bid
            if node in barriers:
                mask |= everything
                self.barrier_mask, self.last_barrier = mask, node.name
            everything |= mask
            masks[node] = mask
        return self

    def _assign(self, c: Collective, mask: int) -> int | None:
        """The bucket `c` joins or opens, or None where it is left alone."""
        left_out = self.policy.left_out(c)
        if left_out:
            self.alone.append(Alone(c, left_out))
            return None
        key, w = self.policy.key(c), self.whens[c.node]
        unit = key[-2]
        why = self.policy.keep_alone(c, w)
        if why:  # issued like a collective left alone; open buckets stay open
            self._keep_alone(c, why, Bucket(self.next_index[c.kind.name], c.kind, key, 0.0, [c], c.nbytes,
                                            Span.of(w), module=unit))
            return None
        bids = self.open_by_key[key]
        for bid in list(reversed(bids)):
            why = self._refusal(bid, c, w, mask)
            if why is None:
                return self._join(bid, c, w, mask)
            if not self.buckets[bid].alone_reason:
                self.buckets[bid].alone_reason = f"{c.node.name} could not join: {why}"
            if self._full(self.buckets[bid], c):
                # Closed: a smaller collective later filling its room would issue it
                # only once that collective is ready, holding every earlier member back.
                bids.remove(bid)
        index = self.next_index[c.kind.name]
        cap = self.policy.cap_bytes(index)
        if c.nbytes > cap:  # too big for any new bucket
            self._keep_alone(c, f"{c.nbytes} bytes alone exceed the cap of bucket {index}",
                             Bucket(index, c.kind, key, cap, [c], c.nbytes, Span.of(w), module=unit))
            return None
        self.next_index[c.kind.name] += 1
        bid = len(self.buckets)
        self.buckets.append(Bucket(index, c.kind, key, cap, [c], c.nbytes, Span.of(w), why or "", unit, key[-1]))
        self.dependents.append(0)
        bids.append(bid)
        del bids[:-self.policy.max_open]
        self._record_dependencies(mask, bid)
        return bid

    def _full(self, bucket: Bucket, c: Collective) -> bool:
        """Whether `bucket` has no room for `c`, where `c` fits a new bucket."""
        return (bucket.nbytes + c.nbytes > bucket.cap_bytes
                and c.nbytes <= self.policy.cap_bytes(self.next_index[c.kind.name]))

    def _keep_alone(self, c: Collective, why: str, bucket: Bucket) -> None:
        self.alone.append(Alone(c, why, bucket))

    def _join(self, bid: int, c: Collective, w: When, mask: int) -> int:
        bucket = self.buckets[bid]
        bucket.members.append(c)
        bucket.nbytes += c.nbytes
        bucket.span = bucket.span.add(w)
        self._record_dependencies(mask, bid)
        return bid

    def _refusal(self, bid: int, c: Collective, w: When, mask: int) -> str | None:
        """Why `c` may not join bucket `bid`, or None if it may."""
        bucket = self.buckets[bid]
        if (mask >> bid) & 1:
            if (self.barrier_mask >> bid) & 1:
                return f"a side-effecting node ({self.last_barrier}) lies between it and the open bucket"
            return "its input depends on the open bucket's result"
        through = mask & self.dependents[bid]
        if through:
            other = self.buckets[(through & -through).bit_length() - 1].members[0].node.name
            return f"its input depends on {other}'s bucket, which depends on the open bucket's result"
        if bucket.nbytes + c.nbytes > bucket.cap_bytes:
            return f"the open bucket is full ({bucket.nbytes} + {c.nbytes} bytes > cap {bucket.cap_bytes:.0f})"
        limit = self.policy.max_members
        if limit is not None and len(bucket.members) >= limit:
            return f"the open bucket already holds max_bucket_count={limit} members"
        return self.policy.refusal(bucket, w)

    def _record_dependencies(self, mask: int, bid: int) -> None:
        """Bucket `bid` took a member whose inputs depend on the buckets in `mask`."""
        for bids in self.open_by_key.values():
            for x in bids:
                if x != bid and mask & ((1 << x) | self.dependents[x]):
                    self.dependents[x] |= (1 << bid) | self.dependents[bid]
