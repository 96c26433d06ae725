"""The collectives the pass merges: their kinds, the nodes that constrain them, and which can be bucketed.

Each kind says which `_c10d_functional` op it is, where the op keeps its
group and reduce op, whether its bucket key may drop the dtype (all-gathers
move bytes, so a multi-dtype bucket can carry them; reductions must add
values of one dtype), and how big its result is.

Nodes with side effects (mutations, effect tokens) are barriers: everything
before one stays before it. Seeded random ops keep their order among
themselves; issuing or waiting a collective never touches the random state,
so they are no barrier to a bucket (attention carries the tag even without
dropout).

A candidate is a `_c10d_functional` all-gather, reduce-scatter or all-reduce
whose result is waited on (one `wait_tensor` or several; any other reader of
the result gets the member's part of the merged result too), with a
static-shaped input and a group given by name. Anything else is reported
with the reason it is left alone.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch
import torch.fx as fx

from . import modules

c10d = torch.ops._c10d_functional
aten = torch.ops.aten
prims = torch.ops.prims
WAIT = c10d.wait_tensor.default


@dataclasses.dataclass(frozen=True, eq=False)
class Kind:
    """Everything the pass knows of one collective kind, in one place."""

    name: str  # "all_gather" | "reduce_scatter" | "all_reduce"
    target: torch._ops.OpOverload
    # (group size, group name, reduce op) from the op's positional arguments after
    # the input; all-reduce has no size (0) and all-gather no reduce op (None).
    read_args: Callable[[tuple], tuple[object, object, object]]
    # A reduction adds values: its bucket never mixes dtypes, a merged sum over
    # more than 2 ranks may add in another order, and the graph needs it where its
    # input is ready. Otherwise (all-gather) it moves bytes, which a multi-dtype
    # bucket can carry, and the graph needs it at its result's first use.
    reduces: bool
    output_factor: Callable[[int, int], int]  # (input bytes, group size) -> result bytes
    nccl_name: str  # its name in torch's NCCL model (comm_analysis.NCCL_COLL)
    # Why an input of this shape (static) cannot be bucketed by this kind, or None.
    refuse_shape: Callable[[tuple[int, ...], int], str | None] = lambda shape, group_size: None
    # Under copy_out="views" a member is a clone made at its first use (a gathered
    # member's bytes are strided across the ranks' rows), not a slice of the result.
    views_clone_members: bool = False
    # What feeds it may differ between ranks (an uneven shard is padded on some
    # ranks only), so no rank-independent estimate may count it.
    inputs_differ_by_rank: bool = False

    @property
    def mixes_dtypes(self) -> bool:
        """May a multi-dtype bucket merge different dtypes?"""
        return not self.reduces

    @property
    def needed_at_first_use(self) -> bool:
        """Is the graph waiting on its result (a prefetch), rather than on its input being ready?"""
        return not self.reduces

    def output_bytes(self, input_bytes: int, group_size: int) -> int:
        return self.output_factor(input_bytes, group_size)

    def payload_bytes(self, input_bytes: int, group_size: int) -> int:
        """The larger side, which bucket caps count: gathered output, scattered input, reduced tensor."""
        return max(input_bytes, self.output_bytes(input_bytes, group_size))

    def __repr__(self) -> str:
        return self.name


def _gather_shape(shape: tuple[int, ...], group_size: int) -> str | None:
    return "0-d all-gather input" if not shape else None


def _scatter_shape(shape: tuple[int, ...], group_size: int) -> str | None:
    if not shape or group_size < 1 or shape[0] % group_size:
        return "reduce-scatter input dim 0 is not divisible by the group size"
    return None


ALL_GATHER = Kind("all_gather", c10d.all_gather_into_tensor.default, lambda a: (a[1], a[2], None),
                  reduces=False, output_factor=lambda b, w: b * w, nccl_name="ALL_GATHER", refuse_shape=_gather_shape,
                  views_clone_members=True, inputs_differ_by_rank=True)
REDUCE_SCATTER = Kind("reduce_scatter", c10d.reduce_scatter_tensor.default, lambda a: (a[2], a[3], a[1]),
                      reduces=True, output_factor=lambda b, w: b // max(w, 1), nccl_name="REDUCE_SCATTER",
                      refuse_shape=_scatter_shape)
ALL_REDUCE = Kind("all_reduce", c10d.all_reduce.default, lambda a: (0, a[2], a[1]),
                  reduces=True, output_factor=lambda b, w: b, nccl_name="ALL_REDUCE")

KINDS = (ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE)
NAMES = tuple(k.name for k in KINDS)
BY_TARGET = {k.target: k for k in KINDS}


def group_of(node: fx.Node) -> str | None:
    """The process group a functional collective is issued on; None for any other node."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or target.namespace != "_c10d_functional" or target is WAIT:
        return None
    for i, arg in enumerate(target._schema.arguments):
        if arg.name == "group_name":
            value = node.kwargs.get("group_name", node.args[i] if i < len(node.args) else None)
            return value if isinstance(value, str) else None
    return None


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


@dataclasses.dataclass(frozen=True)
class Skipped:
    """A collective left as it was, and why."""

    node_name: str
    reason: str


@dataclasses.dataclass
class Collective:
    """One bucketable collective and the facts planning and rewriting need."""

    kind: Kind
    node: fx.Node  # the collective
    wait: fx.Node  # its first wait_tensor
    input: fx.Node  # the tensor the collective reads
    group_name: str
    group_size: int  # ranks in the group; for all-reduce (whose schema has no size) 0 unless the group resolves
    reduce_op: str | None
    dtype: torch.dtype
    shape: tuple[int, ...]  # of the collective's input
    nbytes: int  # the larger side: gathered output, scattered input, reduced tensor
    # When a single-use cast feeds an all-gather, the copy-in reads `cast_source`
    # and converts on the way; the cast node then dies.
    cast_source: fx.Node | None = None
    # (FQN, class name) of the modules around it, outermost first (modules.py).
    module_stack: tuple[tuple[str, str], ...] = ()
    # Every wait_tensor of the collective (`wait` first) and any other node
    # that reads its result directly: all of them get the member's part.
    waits: tuple[fx.Node, ...] = ()
    direct_readers: tuple[fx.Node, ...] = ()

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def readers(self) -> list[fx.Node]:
        """The nodes that read the collective's result: users of its waits, and direct readers."""
        out = [u for w in self.waits for u in w.users]
        return out + [r for r in self.direct_readers if r not in out]



def _static_shape(val) -> tuple[int, ...] | None:
    if not isinstance(val, torch.Tensor):
        return None
    shape = []
    for s in val.shape:
        if not isinstance(s, int):
            return None
        shape.append(s)
    return tuple(shape)


def _waits(node: fx.Node) -> tuple[list[fx.Node], list[fx.Node]]:
    """(the wait_tensors of a collective, in graph order; its other users)."""
    waits = sorted(u for u in node.users if u.target is WAIT)
    return waits, [u for u in node.users if u.target is not WAIT]


def _fusable_cast_source(input_node: fx.Node, consumer: fx.Node) -> fx.Node | None:
    """The source of a dtype-only cast whose single user is `consumer`."""
    if input_node.op != "call_function" or len(input_node.users) != 1:
        return None
    if next(iter(input_node.users)) is not consumer:
        return None
    target = input_node.target
    if target is prims.convert_element_type.default:
        src = input_node.args[0]
    elif target is aten._to_copy.default:
        extra = set(input_node.kwargs) - {"dtype"}
        if extra or len(input_node.args) != 1:
            return None
        src = input_node.args[0]
    else:
        return None
    if not isinstance(src, fx.Node):
        return None
    src_val = src.meta.get("val")
    out_val = input_node.meta.get("val")
    if not isinstance(src_val, torch.Tensor) or not isinstance(out_val, torch.Tensor):
        return None
    if src_val.device != out_val.device or _static_shape(src_val) is None:
        return None
    if src_val.dtype.is_complex or out_val.dtype.is_complex:
        return None
    return src


def find_collectives(
    graph: fx.Graph, selected: tuple[str, ...], fuse_casts: bool
) -> tuple[list[Collective], list[Skipped]]:
    found: list[Collective] = []
    skipped: list[Skipped] = []
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        kind = BY_TARGET.get(node.target)
        if kind is None or kind.name not in selected:
            continue
        record, reason = _describe(node, kind, fuse_casts)
        if record is None:
            skipped.append(Skipped(node.name, reason))
        else:
            found.append(record)
    return found, skipped


def _describe(node: fx.Node, kind: Kind, fuse_casts: bool) -> tuple[Collective | None, str]:
    inp = node.args[0]
    if not isinstance(inp, fx.Node):
        return None, "input is not a graph node"
    group_size, group_name, reduce_op = kind.read_args(node.args)
    if node.kwargs:
        return None, f"unexpected keyword arguments {sorted(node.kwargs)}"
    if not isinstance(group_name, str):
        return None, "group is not a constant name (graph input or object); left as is"
    if not isinstance(group_size, int):
        return None, "group size is not a constant int"
    waits, direct_readers = _waits(node)
    if not waits:
        return None, "result is never waited on (no wait_tensor reads it)"
    if not group_size:  # all-reduce's schema has no size: the group's, where it resolves here
        group_size = _resolved_size(group_name)
    val = inp.meta.get("val")
    shape = _static_shape(val)
    if shape is None:
        return None, "input has no static shape in meta['val'] (dynamic or missing)"
    if val.dtype.is_complex and not kind.mixes_dtypes:
        return None, "complex reductions are left as they are"
    refused = kind.refuse_shape(shape, group_size)
    if refused:
        return None, refused
    nbytes = kind.payload_bytes(math.prod(shape) * val.dtype.itemsize, group_size)
    cast_source = None
    if kind.mixes_dtypes and fuse_casts:  # a gather's copy-in can convert on the way
        cast_source = _fusable_cast_source(inp, node)
    record = Collective(
        kind=kind,
        node=node,
        wait=waits[0],
        input=inp,
        group_name=group_name,
        group_size=group_size,
        reduce_op=reduce_op,
        dtype=val.dtype,
        shape=shape,
        nbytes=nbytes,
        cast_source=cast_source,
        module_stack=modules.module_stack(node),
        waits=tuple(waits),
        direct_readers=tuple(direct_readers),
    )
    return record, ""


def _resolved_group(group_name: str):
    """The process group named `group_name`, or None where it does not resolve here."""
    try:
        from torch.distributed.distributed_c10d import _resolve_process_group

        return _resolve_process_group(group_name)
    except Exception:
        return None


def _resolved_size(group_name: str) -> int:
    """Ranks in the process group named `group_name`; 0 where it does not resolve here."""
    group = _resolved_group(group_name)
    return 0 if group is None else int(group.size())


def resolved_rank(group_name: str) -> int | None:
    """This process's rank in the group named `group_name`; None where it does not resolve here."""
    group = _resolved_group(group_name)
    return None if group is None else int(group.rank())


def ranks_here() -> str:
    """This process's rank in every process group it knows, as text ("" outside a
    distributed job): what code that names the rank (an in-place gather) depends on."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return ""
    try:
        names = dist.distributed_c10d._world.pg_names
        return ",".join(sorted(f"{name}:{dist.get_rank(group)}" for group, name in names.items()))
    except Exception:  # the registry is private: the global rank still tells ranks apart
        return f"rank {dist.get_rank()}"
