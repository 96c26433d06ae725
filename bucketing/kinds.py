"""The collective kinds the pass merges: one registry of targets, arguments and sizes.

Each kind says which `_c10d_functional` op it is, where the op keeps its
group and reduce op, whether its bucket key may drop the dtype (all-gathers
move bytes, so a multi-dtype bucket can carry them; reductions must add
values of one dtype), and how big its result is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
import torch.fx as fx

c10d = torch.ops._c10d_functional


@dataclasses.dataclass(frozen=True)
class Kind:
    name: str  # "all_gather" | "reduce_scatter" | "all_reduce"
    target: torch._ops.OpOverload
    # (group size, group name, reduce op) from the op's positional arguments after
    # the input; all-reduce has no size (0) and all-gather no reduce op (None).
    read_args: Callable[[tuple], tuple[object, object, object]]
    mixes_dtypes: bool  # may a multi-dtype bucket merge different dtypes?
    output_factor: Callable[[int, int], int]  # (input bytes, group size) -> result bytes

    def output_bytes(self, input_bytes: int, group_size: int) -> int:
        return self.output_factor(input_bytes, group_size)

    def payload_bytes(self, input_bytes: int, group_size: int) -> int:
        """The larger side, which bucket caps count: gathered output, scattered input, reduced tensor."""
        return max(input_bytes, self.output_bytes(input_bytes, group_size))


ALL_GATHER = Kind("all_gather", c10d.all_gather_into_tensor.default,
                  lambda a: (a[1], a[2], None), True, lambda b, w: b * w)
REDUCE_SCATTER = Kind("reduce_scatter", c10d.reduce_scatter_tensor.default,
                      lambda a: (a[2], a[3], a[1]), False, lambda b, w: b // max(w, 1))
ALL_REDUCE = Kind("all_reduce", c10d.all_reduce.default,
                  lambda a: (0, a[2], a[1]), False, lambda b, w: b)

KINDS = (ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE)
NAMES = tuple(k.name for k in KINDS)
BY_NAME = {k.name: k for k in KINDS}
BY_TARGET = {k.target: k for k in KINDS}


def count_collectives(graph: fx.Graph) -> dict[str, int]:
    """Collectives per kind name, every kind present (0 when none)."""
    counts = dict.fromkeys(NAMES, 0)
    for node in graph.nodes:
        kind = BY_TARGET.get(node.target)
        if kind is not None:
            counts[kind.name] += 1
    return counts
