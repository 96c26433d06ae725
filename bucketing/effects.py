"""Nodes that constrain the order of others: side effects and the random state.

Nodes with side effects (mutations, effect tokens) are barriers: everything
before one stays before it. Seeded random ops keep their order among
themselves; issuing or waiting a collective never touches the random state,
so they are no barrier to a bucket (attention carries the tag even without
dropout).
"""

from __future__ import annotations

import torch
import torch.fx as fx


def is_barrier(node: fx.Node) -> bool:
    """Mutation or effect token: nothing may move across it."""
    if node.op != "call_function":
        return False
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.is_mutable
    if isinstance(target, torch._ops.HigherOrderOperator):
        return target.name() == "with_effects"
    return False


def is_seeded(node: fx.Node) -> bool:
    """Draws from the random state: such nodes keep their order among themselves."""
    target = node.target
    return (node.op == "call_function" and isinstance(target, torch._ops.OpOverload)
            and torch.Tag.nondeterministic_seeded in target.tags)
