"""Validated options shared by `bucket_collectives` and `BucketingPass`.

Every check runs when the options are built, so a bad value fails with a
`ValueError` naming the option before any compile starts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import numbers
import os
from collections.abc import Callable
from typing import Union

from torch._inductor import config as inductor_config

from . import modules
from .collectives import NAMES as COLLECTIVE_KINDS

MB = 2**20
POLICIES = ("module", "locality", "merge_all")
COPY_OUTS = ("copy", "packed", "views")
LOWER_COPY_OUTS = ("gpu", "always", "never")

# torch's own default cap is 2000 MB; we keep the same "merge generously" default.
DEFAULT_BUCKET_CAP_MB = 2000.0
DEFAULT_ALIGNMENT_BYTES = 16

CapMB = Union[float, Callable[[int], float]]


@dataclasses.dataclass(frozen=True)
class BucketingOptions:
    collectives: tuple[str, ...] = COLLECTIVE_KINDS
    multidtype: bool = True
    bucket_cap_mb: CapMB = DEFAULT_BUCKET_CAP_MB
    max_bucket_count: int | None = None
    # Byte alignment of every member inside a multi-dtype all-gather chunk; the
    # effective alignment of a member is max(alignment_bytes, its itemsize).
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES
    # Fold a single-use dtype cast feeding an all-gather into the copy-in.
    fuse_casts: bool = True
    # How members leave the merged result. "copy" (default): each member a
    # dense tensor of its own, so every consumer compiles to the kernel it had
    # unbucketed: bit-identical results. Lowered (below), Inductor kernels copy
    # them; otherwise the graph allocates each member and one op fills them
    # all. "views": strided views of the merged buffer that Inductor fuses
    # into consumers (no copy), which may change a consumer's kernel and its
    # summation order: NOT bit-identical.
    # "packed": one op packs each run of same-dtype members densely; members
    # are contiguous slices of it (no per-member allocation or wrapper output).
    # Consumers read dense tensors as unbucketed, but consumers of different
    # members share an input buffer, which Inductor may fuse into one kernel
    # that changes a summation order: bit-identical only where it does not,
    # not by construction.
    copy_out: str = "copy"
    # Where copy_out="copy" becomes Inductor kernels (lowering.py) rather than
    # our op: "gpu" (default): on any device but the CPU (Triton: foreach
    # kernels, a bucket's copies in few launches); the CPU keeps the op, one call per bucket,
    # where one C++ loop per member would cost more to compile than it saves.
    # "always", "never". Results are bit-identical either way.
    lower_copy_out: str = "gpu"
    # "module" (default): one bucket per block (module.py: the outermost
    # indexed module, or one of `block_classes`) read from the graph's module
    # metadata; collectives outside any block follow the locality rule.
    # "locality": merge up to the caps, but keep each bucket within
    # `locality_flops` of compute, keep its overlap window open, and split
    # buckets that would raise the estimated peak memory by more than
    # `memory_budget_mb` (see planning.py and memory.py). "merge_all": the caps alone.
    policy: str = "module"
    # Module classes whose instances are the blocks of policy="module"
    # (e.g. ("TransformerBlock",)); None: the outermost indexed module.
    block_classes: tuple[str, ...] | None = None
    # How many consecutive blocks of one process group share a bucket under
    # policy="module". None: from torch's estimates on CUDA (plan/estimates.py), the
    # fewest whose collectives fit within their compute time, so the
    # prefetch of the next bucket hides behind this one's; one block where
    # torch has no estimates (the CPU).
    blocks_per_bucket: int | None = None
    # Buckets by module, in the format of torch's `module_bucket_plans`: a list
    # whose entries are a module FQN or a list of FQNs. The collectives of one
    # entry merge per key whatever the policy (the caps still apply); the rest
    # follow the policy.
    module_buckets: tuple[tuple[str, ...], ...] | None = None
    # Estimated FLOPs of matmul/convolution/attention one bucket may span
    # (between its members' first uses, or their inputs' producers for
    # reductions). None: what one collective's latency is worth on the graph's
    # device, so merging never gives up overlap that could hide a collective.
    locality_flops: float | None = None
    # How far bucketing may raise the estimated peak live bytes. None: one bucket
    # cap, or with torch's estimates (CUDA) two blocks' gathered parameters if more.
    memory_budget_mb: float | None = None
    # Merge all-reduces and reduce-scatters only where the merged result is
    # bit-identical to the separate ones for the collective's group size: a
    # sum of 2 values is the same in any order, so groups of at most 2
    # (docs/design.md, "What stays the same"). All-gathers move bytes and merge
    # whatever the group.
    exact_reductions: bool = False
    # Gather each all-gather bucket in place: the copy-in writes this rank's slot
    # of the gathered buffer, which the collective fills around it, as torch's
    # own bucketing does. Saves the staging chunk (bucket / group size) while
    # the collective runs, which at 2 ranks lets Inductor's peak-memory
    # reorder issue a bucket as early as torch's; but the rank becomes a
    # constant of the graph, so every rank compiles its own code. None: on
    # while Inductor's own reorder (`reorder_for_compute_comm_overlap`) is on,
    # the one pass the staging chunk holds back; off otherwise, so ranks share code.
    gather_in_place: bool | None = None
    # At the first run, all-gather a digest of the plan and raise, naming the
    # first differing bucket, if ranks disagree (instead of deadlocking).
    verify_plan_across_ranks: bool = dataclasses.field(
        default_factory=lambda: os.environ.get("BUCKETING_VERIFY_PLAN", "") == "1"
    )

    def __post_init__(self) -> None:
        kinds = self.collectives
        if isinstance(kinds, str) or not isinstance(kinds, (tuple, list, set, frozenset)):
            raise ValueError(
                f"collectives must be a sequence drawn from {COLLECTIVE_KINDS}, got {kinds!r}"
            )
        unknown = [k for k in kinds if k not in COLLECTIVE_KINDS]
        if unknown:
            raise ValueError(
                f"collectives has unknown kind(s) {unknown!r}; expected a subset of {COLLECTIVE_KINDS}"
            )
        object.__setattr__(self, "collectives", tuple(k for k in COLLECTIVE_KINDS if k in kinds))
        if not isinstance(self.multidtype, bool):
            raise ValueError(f"multidtype must be a bool, got {self.multidtype!r}")
        if not isinstance(self.fuse_casts, bool):
            raise ValueError(f"fuse_casts must be a bool, got {self.fuse_casts!r}")
        if not isinstance(self.exact_reductions, bool):
            raise ValueError(f"exact_reductions must be a bool, got {self.exact_reductions!r}")
        if self.gather_in_place is not None and not isinstance(self.gather_in_place, bool):
            raise ValueError(f"gather_in_place must be None or a bool, got {self.gather_in_place!r}")
        if self.copy_out not in COPY_OUTS:
            raise ValueError(f"copy_out must be one of {COPY_OUTS}, got {self.copy_out!r}")
        if self.lower_copy_out not in LOWER_COPY_OUTS:
            raise ValueError(f"lower_copy_out must be one of {LOWER_COPY_OUTS}, got {self.lower_copy_out!r}")
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {self.policy!r}")
        object.__setattr__(self, "module_buckets", modules.check_module_buckets(self.module_buckets))
        object.__setattr__(self, "block_classes", modules.check_block_classes(self.block_classes))
        _check_optional_number("locality_flops", self.locality_flops)
        _check_optional_number("memory_budget_mb", self.memory_budget_mb)
        if not isinstance(self.verify_plan_across_ranks, bool):
            raise ValueError(f"verify_plan_across_ranks must be a bool, got {self.verify_plan_across_ranks!r}")
        _check_cap(self.bucket_cap_mb)
        blocks = self.blocks_per_bucket
        if blocks is not None and (isinstance(blocks, bool) or not isinstance(blocks, numbers.Integral) or blocks < 1):
            raise ValueError(f"blocks_per_bucket must be None or an int >= 1, got {blocks!r}")
        count = self.max_bucket_count
        if count is not None and (
            isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 1
        ):
            raise ValueError(f"max_bucket_count must be None or an int >= 1, got {count!r}")
        align = self.alignment_bytes
        if (
            isinstance(align, bool)
            or not isinstance(align, numbers.Integral)
            or align < 1
            or align & (align - 1)
        ):
            raise ValueError(f"alignment_bytes must be a power of two >= 1, got {align!r}")

    def cap_bytes(self, bucket_index: int) -> float:
        """The byte cap of the bucket with this index (in graph order, per kind)."""
        cap = self.bucket_cap_mb
        mb = cap(bucket_index) if callable(cap) else cap
        if isinstance(mb, bool) or not isinstance(mb, numbers.Real) or not mb > 0:
            raise ValueError(
                f"bucket_cap_mb({bucket_index}) must return a positive number, got {mb!r}"
            )
        return float(mb) * MB

    def gathers_in_place(self) -> bool:
        """gather_in_place, None resolved by Inductor's config where the pass runs."""
        if self.gather_in_place is not None:
            return self.gather_in_place
        return bool(inductor_config.reorder_for_compute_comm_overlap)

    def fingerprint(self) -> str:
        """A stable text that changes with any option, every field by its name
        (a callable cap by its code): a field added later is in it too."""
        parts = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "bucket_cap_mb":
                value = _callable_fingerprint(value) if callable(value) else repr(float(value))
            parts.append(f"{field.name}={value!r}")
        return "|".join(parts)


def _check_optional_number(name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value >= 0:
        raise ValueError(f"{name} must be None or a number >= 0, got {value!r}")


def _check_cap(cap: object) -> None:
    if callable(cap):
        return
    if isinstance(cap, bool) or not isinstance(cap, numbers.Real) or not cap > 0:
        raise ValueError(
            f"bucket_cap_mb must be a positive number or a callable(bucket_index) -> MB, got {cap!r}"
        )


def _callable_fingerprint(fn: Callable) -> str:
    try:
        text = inspect.getsource(fn)
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        text = repr((code.co_code, code.co_consts)) if code is not None else repr(fn)
    closure = getattr(fn, "__closure__", None) or ()
    cells = []
    for cell in closure:
        try:
            cells.append(repr(cell.cell_contents))
        except ValueError:  # empty cell
            cells.append("<empty>")
    digest = hashlib.sha256((text + "|".join(cells)).encode()).hexdigest()
    return f"callable:{getattr(fn, '__qualname__', type(fn).__name__)}:{digest}"


def make_options(**kwargs) -> BucketingOptions:
    names = {f.name for f in dataclasses.fields(BucketingOptions)}
    unknown = sorted(set(kwargs) - names)
    if unknown:
        raise ValueError(f"unknown option(s) {unknown}; known options are {sorted(names)}")
    return BucketingOptions(**kwargs)
