"""Collective programs traced to FX graphs on the fake process group of conftest.py:
graphs to plan and rewrite, no communication."""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

WORLD = 4
c10d = torch.ops._c10d_functional


def ag(x, group_name, world=WORLD):
    return c10d.wait_tensor(c10d.all_gather_into_tensor(x, world, group_name))


def rs(x, group_name, op="sum", world=WORLD):
    return c10d.wait_tensor(c10d.reduce_scatter_tensor(x, op, world, group_name))


def ar(x, group_name, op="sum"):
    return c10d.wait_tensor(c10d.all_reduce(x, op, group_name))


def trace(fn, *specs):
    """make_fx under fake mode; specs are (shape, dtype) pairs."""
    with FakeTensorMode():
        args = [torch.empty(shape, dtype=dtype) for shape, dtype in specs]
        return make_fx(fn)(*args)


def count(gm, target) -> int:
    return sum(1 for n in gm.graph.nodes if n.target is target)


class StandInEstimates:
    """Stands in for torch's estimates (bucketing/costs.py), which the CPU has none
    of: each collective a fixed latency plus its bytes at a bandwidth, merging
    saving one latency, a copy its bytes at another bandwidth, a millisecond of
    compute a node."""

    def __init__(self, latency_ms=1.0, ms_per_byte=0.0, copy_ms_per_byte=0.0):
        self.latency_ms, self.ms_per_byte, self.copy_ms_per_byte = latency_ms, ms_per_byte, copy_ms_per_byte

    def collective_ms(self, kind, nbytes, group_size):
        return self.latency_ms + nbytes * self.ms_per_byte

    def copy_ms(self, nbytes):
        return nbytes * self.copy_ms_per_byte

    def merge_saves_ms(self, kind, bucket_bytes, member_bytes, group_size):
        return self.latency_ms

    def compute_ms_before(self, timeline):
        return [float(i) for i in range(len(timeline.nodes) + 1)]
