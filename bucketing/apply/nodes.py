"""What every emitter shares: the record of a bucket's new nodes, and their metadata.

Nodes are emitted with `graph.call_function`; no tracing per bucket. Each new
node gets `meta["val"]`: the collective and copy-in by running under the
graph's fake mode, the many per-member views and copies from plain meta
tensors, and provenance from the member it stands for.
"""

from __future__ import annotations

import dataclasses
import operator

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, maybe_get_fake_mode

from .. import ops
from ..plan.records import Bucket

aten = torch.ops.aten

# Ops whose output metadata follows from the input's alone (views and reshapes).
VIEW_OPS = frozenset({aten.view.default, aten.view.dtype, aten.slice.Tensor, aten.reshape.default})


@dataclasses.dataclass(frozen=True)
class EmitSettings:
    """How buckets are emitted on this graph."""

    alignment: int  # byte alignment of each member in a multi-dtype gather chunk
    copy_out: str  # lowering.copy_out_mode's answer for the graph
    gather_in_place: bool  # an all-gather's copy-in writes this rank's slot of the result


@dataclasses.dataclass
class EmittedBucket:
    """The nodes that replace one bucket, with what placement needs."""

    bucket: Bucket
    issue_nodes: list[fx.Node]  # copy-in .. collective: placed once inputs exist
    wait_nodes: list[fx.Node]  # wait (+ shared views): placed before the first user
    outputs: list[fx.Node | None]  # per member: the node replacing its wait
    padding_bytes: int = 0  # over the whole gathered buffer
    collective: fx.Node | None = None
    # The copy-out of the members not set apart (Bucket.apart), and their
    # outputs: placed before the first of those members' users.
    later_nodes: list[fx.Node] = dataclasses.field(default_factory=list)


class MetaEvaluator:
    """Computes `meta["val"]` of new nodes under the graph's fake mode."""

    def __init__(self, graph: fx.Graph):
        self.mode = None
        for node in graph.nodes:
            mode = maybe_get_fake_mode(node.meta.get("val"))
            if mode is not None:
                self.mode = mode
                break
        if self.mode is None:
            self.mode = FakeTensorMode()
        self._converted: dict[fx.Node, torch.Tensor] = {}
        self._meta_of: dict[fx.Node, torch.Tensor] = {}

    def val(self, node: fx.Node) -> torch.Tensor:
        v = node.meta["val"]
        if maybe_get_fake_mode(v) is self.mode:
            return v
        # Real values, or fakes of another mode: a fresh fake with the same metadata.
        cached = self._converted.get(node)
        if cached is None:
            with self.mode:
                cached = torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=v.device)
            self._converted[node] = cached
        return cached

    def call(self, graph: fx.Graph, target, args: tuple, created: list[fx.Node], **kwargs) -> fx.Node:
        node = graph.call_function(target, args, kwargs)
        created.append(node)
        if target is operator.getitem:
            node.meta["val"] = args[0].meta["val"][args[1]]
        elif target is aten.clone.default:
            # A dense copy: only shape and dtype matter (same shortcut as views).
            src = self._meta(args[0])
            self._set_meta(node, torch.empty(src.shape, dtype=src.dtype, device="meta"), args[0])
        elif target is aten.new_empty.default:
            # A member's allocation (copy_out="into"): one per member, so no fake dispatch.
            src = self._meta(args[0])
            self._set_meta(node, torch.empty(args[1], dtype=kwargs.get("dtype", src.dtype), device="meta"), args[0])
        elif getattr(target, "namespace", None) == ops.NAMESPACE:
            # Our copy ops' values follow from their arguments' metadata (ops.py's
            # fake kernels, which serve meta tensors too): a copy-in reads every
            # member, which fake dispatch would hash for its cache.
            meta_out = target(*fx.node.map_arg(args, self._meta), **kwargs)
            node.meta["val"] = self._fake(meta_out, self.val(node.all_input_nodes[0]).device)
        elif target in VIEW_OPS:
            # Shape-only ops run on plain meta tensors, skipping fake dispatch and
            # its cache (about 20x cheaper; the per-member copy-out is most of
            # the nodes the pass creates). A chain of views shares one meta storage.
            meta_args = fx.node.map_arg(args, self._meta)
            if target is aten.reshape.default and not meta_args[0].is_contiguous():
                # What reshape returns when it must copy; skips its slow view attempt.
                meta_out = torch.empty(meta_args[1], dtype=meta_args[0].dtype, device="meta")
            else:
                meta_out = target(*meta_args)
            self._set_meta(node, meta_out, args[0])
        else:
            with self.mode:
                node.meta["val"] = target(*fx.node.map_arg(args, self.val), **fx.node.map_arg(kwargs, self.val))
        return node

    def _set_meta(self, node: fx.Node, meta_out: torch.Tensor, source: fx.Node) -> None:
        self._meta_of[node] = meta_out
        node.meta["val"] = self._fake(meta_out, self.val(source).device)

    def _fake(self, meta_out, device: torch.device):
        """The fake value on `device` of a meta tensor (or of a list of them; None stays None)."""
        if isinstance(meta_out, (list, tuple)):
            return [self._fake(t, device) for t in meta_out]
        if meta_out is None:
            return None
        # What the converter's from_meta_and_device makes, without its memo: each
        # meta tensor here is converted once, and the memo's weak reference is
        # most of the cost per member.
        return FakeTensor(self.mode, meta_out, device)

    def _meta(self, node: fx.Node) -> torch.Tensor:
        meta = self._meta_of.get(node)
        if meta is None:
            v = self.val(node)
            meta = torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
            self._meta_of[node] = meta
        return meta


# Where a node came from: what tlparse, profiler traces and error messages read.
# Not "original_aten": a new node is not the op its member was.
PROVENANCE_KEYS = ("stack_trace", "nn_module_stack", "fwd_nn_module_stack", "source_fn_stack", "seq_nr",
                   "from_node")


def copy_provenance(source: fx.Node, nodes: list[fx.Node]) -> None:
    carried = {k: source.meta[k] for k in PROVENANCE_KEYS if k in source.meta}
    for node in nodes:
        node.meta.update(carried)


