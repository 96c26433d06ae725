"""Passes under test. An adapter says how to apply a pass and what to expect of it.

Select one with `--bucketing-pass=NAME` where NAME is `project` (this
package's pass), `torch` (torch's built-in bucketing, multi-dtype mode for
all-gathers), `identity` (a pass that changes nothing, semantics-only), or
`module:object` naming a `PassAdapter`, or a callable `fn(gm, **options)`
checked in semantics-only mode.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib
from collections.abc import Callable

import torch.fx as fx

BUCKETING = "bucketing"  # structure and semantics are checked
SEMANTICS_ONLY = "semantics-only"  # results must stay bit-identical; structure is free


@dataclasses.dataclass
class PassAdapter:
    name: str
    expectations: str
    apply_fx: Callable[..., object]  # apply_fx(gm, **options): rewrite gm in place
    inductor_pass: Callable[..., object] | None = None  # (**options) -> post_grad_custom_post_pass
    # case-id glob -> reason; matching cases are expected to fail.
    expected_failures: dict[str, str] = dataclasses.field(default_factory=dict)

    def xfail_reason(self, case_id: str) -> str | None:
        for pattern, reason in self.expected_failures.items():
            if fnmatch.fnmatchcase(case_id, pattern):
                return reason
        return None


def _project() -> PassAdapter:
    import bucketing.core as bc

    return PassAdapter(
        name="project",
        expectations=BUCKETING,
        apply_fx=bc.bucket_collectives,
        inductor_pass=lambda **options: bc.BucketingPass(**options),
    )


def _torch_apply(gm: fx.GraphModule, **options) -> None:
    from torch._inductor.fx_passes import bucketing as tb

    cap = options.get("bucket_cap_mb", 2000.0)
    cap_fn = cap if callable(cap) else (lambda _i, _c=float(cap): _c)
    kinds = options.get("collectives", ("all_gather", "reduce_scatter", "all_reduce"))
    ag_mode = "custom_ops_multidtype" if options.get("multidtype", True) else "custom_ops"
    if "all_gather" in kinds:
        tb.bucket_all_gather(gm, cap_fn, ag_mode)
    if "reduce_scatter" in kinds:
        tb.bucket_reduce_scatter(gm, cap_fn, "custom_ops")
    if "all_reduce" in kinds:
        tb.bucket_all_reduce(gm, cap_fn)
    gm.recompile()


class _TorchInductorPass:
    def __init__(self, **options):
        self.options = options

    def __call__(self, graph: fx.Graph) -> None:
        _torch_apply(graph.owning_module, **self.options)


# What torch's built-in pass is known to get wrong or do differently, by case id.
# Each entry was observed by running this suite with --bucketing-pass=torch.
TORCH_EXPECTED_FAILURES = {
    "ag-pair-*": "views the bucket through the smallest dtype; odd byte offsets fail "
    "('storage_offset() must be divisible') or members are not merged across dtypes as expected",
}


def _torch() -> PassAdapter:
    return PassAdapter(
        name="torch",
        expectations=BUCKETING,
        apply_fx=_torch_apply,
        inductor_pass=lambda **options: _TorchInductorPass(**options),
        expected_failures=dict(TORCH_EXPECTED_FAILURES),
    )


def _identity() -> PassAdapter:
    return PassAdapter(
        name="identity",
        expectations=SEMANTICS_ONLY,
        apply_fx=lambda gm, **options: None,
        inductor_pass=None,
    )


BUILTIN = {"project": _project, "torch": _torch, "identity": _identity}


def load(spec: str) -> PassAdapter:
    if spec in BUILTIN:
        return BUILTIN[spec]()
    if ":" not in spec:
        raise ValueError(f"--bucketing-pass must be one of {sorted(BUILTIN)} or module:object, got {spec!r}")
    module, name = spec.split(":", 1)
    obj = getattr(importlib.import_module(module), name)
    if isinstance(obj, PassAdapter):
        return obj
    if callable(obj):
        return PassAdapter(name=spec, expectations=SEMANTICS_ONLY, apply_fx=obj)
    raise ValueError(f"--bucketing-pass {spec!r} is neither a PassAdapter nor callable")
