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
