"""What collectives and compute cost on the graph's device, from torch's own estimators.

On CUDA: torch's NCCL model (`comm_analysis.estimate_nccl_collective_runtime_impl`:
ring and tree by size and group size, NVLink within a node, the network across
nodes) and, per compute node, torch's roofline
(`overlap_scheduling.estimate_roofline_runtime_ms`: FLOPs at 75% of the
datasheet's dense peak or bytes at HBM bandwidth, whichever is longer; torch
< 2.13 lacks it, and there FLOPs at 75% of the dense bf16 peak count alone).
The same figures on every rank: they depend on shapes, group sizes and the GPU
type alone.

Nothing elsewhere: torch has no model of gloo, and a GPU missing from torch's
datasheet has no peak. The policy then keeps its rules by FLOPs alone.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import operator

import torch
import torch.fx as fx

from ..collectives import ALL_GATHER, BY_TARGET, Kind
from .timeline import Timeline, node_flops

# The share of the datasheet peak torch's roofline expects a matmul to reach.
ACHIEVED_PEAK = 0.75

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class DeviceCosts:
    """Estimated milliseconds of compute and of one collective on one device."""

    peak_flops_per_ms: float
    hbm_bytes_per_ms: float

    def copy_ms(self, nbytes: float) -> float:
        """Reading and writing `nbytes` once each in device memory."""
        return 2 * nbytes / self.hbm_bytes_per_ms

    def merge_saves_ms(self, kind: Kind, bucket_bytes: float, member_bytes: float, group_size: int) -> float:
        """What one collective of `member_bytes` saves by joining one of `bucket_bytes` instead of going alone."""
        alone = self.collective_ms(kind, bucket_bytes, group_size) + self.collective_ms(kind, member_bytes, group_size)
        return alone - self.collective_ms(kind, bucket_bytes + member_bytes, group_size)

    def node_ms(self, node: fx.Node) -> float:
        if runs_no_kernel(node):
            return 0.0
        roofline = _roofline()
        if roofline is not None and node.op == "call_function":
            try:
                return float(roofline(node))
            except Exception:  # no estimate for this node: its FLOPs alone
                pass
        return node_flops(node) / (ACHIEVED_PEAK * self.peak_flops_per_ms)

    def compute_ms_before(self, timeline: Timeline) -> list[float]:
        """Per position of `timeline`, the estimated compute milliseconds before it (one more: the total).

        Nodes that only feed collectives whose inputs differ by rank count
        nothing: the padding of an uneven shard before its all-gather exists on
        some ranks only, where counting it would let ranks plan differently."""
        rank_dependent: set[fx.Node] = set()
        for node in reversed(timeline.nodes):
            if node.users and all(_inputs_differ_by_rank(u) or u in rank_dependent for u in node.users):
                rank_dependent.add(node)
        out, total = [], 0.0
        for node in timeline.nodes:
            out.append(total)
            if node not in rank_dependent:
                total += self.node_ms(node)
        out.append(total)
        return out

    def collective_ms(self, kind: Kind, nbytes: int, group_size: int) -> float:
        """One collective of `kind` moving `nbytes` (its input and output, as torch counts them)."""
        from torch._inductor.comm_analysis import NCCL_COLL, estimate_nccl_collective_runtime_impl

        coll = getattr(NCCL_COLL, kind.nccl_name)
        return float(estimate_nccl_collective_runtime_impl(int(nbytes), int(group_size), coll))


def _inputs_differ_by_rank(node: fx.Node) -> bool:
    kind = BY_TARGET.get(node.target)
    return kind is not None and kind.inputs_differ_by_rank


# Allocations Inductor makes without a kernel.
_ALLOCATIONS = frozenset({"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided"})


def runs_no_kernel(node: fx.Node) -> bool:
    """Nodes no compute kernel runs for: a tuple's `getitem`, a view (every result
    aliases an input: the chunks of a `split` that pads an uneven shard), an
    allocation, a collective or its wait (the NCCL model times those). torch's
    roofline would charge a split's getitem every byte of the split's input."""
    if node.op != "call_function" or node.target is operator.getitem:
        return True
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if target.namespace == "_c10d_functional":
        return True
    returns = target._schema.returns
    if returns and all(r.alias_info is not None and not r.alias_info.is_write for r in returns):
        return True
    return target.namespace == "aten" and target._opname in _ALLOCATIONS


@functools.cache
def _roofline():
    """torch's `estimate_roofline_runtime_ms`, looked up once (torch < 2.13: None)."""
    try:
        from torch._inductor.fx_passes.overlap_scheduling import estimate_roofline_runtime_ms
    except ImportError:
        return None
    return estimate_roofline_runtime_ms


def device_costs(device: torch.device) -> DeviceCosts | None:
    """The estimates for `device`, or None where torch has none (with a log line saying why)."""
    if device.type != "cuda":
        return None
    try:
        from torch._inductor.analysis.device_info import datasheet_tops
        from torch._inductor.utils import get_gpu_dram_gbps

        tops = datasheet_tops(torch.bfloat16)
        costs = DeviceCosts(float(tops) * 1e9, float(get_gpu_dram_gbps()) * 1e6) if tops else None
        if costs is not None:
            costs.collective_ms(ALL_GATHER, 1 << 20, 2)  # the NCCL model answers on this device
    except Exception as e:  # an estimator torch cannot run here: plan without estimates
        log.info("bucketing: no cost estimates for %s (%s: %s); planning by FLOPs alone", device, type(e).__name__, e)
        return None
    if costs is None:
        log.info("bucketing: torch's datasheet has no bf16 peak for this GPU; planning by FLOPs alone")
    return costs
