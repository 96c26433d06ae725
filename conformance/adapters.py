"""Passes under test. An adapter says how to apply a pass and what to expect of it.

Select one with `--bucketing-pass=NAME` where NAME is `project` (this
package's pass), `torch` (torch's built-in bucketing, multi-dtype mode for
all-gathers), `torch-manual` (torch's `manual_overlap_bucketing`, given the
`module_buckets` plan of a case; semantics only), `identity` (a pass that changes nothing, semantics-only), or
`module:object` naming a `PassAdapter`, or a callable `fn(gm, **options)`
checked in semantics-only mode.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import importlib
import importlib.util
import re
import unittest.mock
from collections.abc import Callable

import torch.fx as fx

from . import known_failures

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
    spec: str = ""  # how it was named to `load` ("torch", "pkg.mod:obj"); rank tasks load it again by this
    # Catalog options (catalog.OPTIONS) the pass acts on; None: all of them.
    honours: frozenset[str] | None = None

    def unhonoured(self, options: dict) -> str | None:
        """Why a case with `options` cannot hold this pass to its collective counts, or None.
        Only structure is at stake: a pass checked for results alone runs every case."""
        if self.expectations != BUCKETING or self.honours is None:
            return None
        ignored = sorted(set(options) - self.honours)
        return f"needs option(s) {ignored}, which {self.name} does not honour" if ignored else None

    def xfail_reason(self, case_id: str) -> str | None:
        """Why `case_id` is expected to fail under this pass (every matching entry's reason), or None."""
        reasons = [reason for pattern, reason in self.expected_failures.items()
                   if fnmatch.fnmatchcase(case_id, pattern)]
        return "; ".join(dict.fromkeys(reasons)) or None


def check_id(case_id: str, level: str = "fx") -> str:
    """The id expected failures are keyed by: the case id at FX level, `LEVEL:case id` otherwise."""
    return case_id if level == "fx" else f"{level}:{case_id}"


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


class TorchInductorPass:
    """An FX pass `apply(gm, **options)` as a `post_grad_custom_post_pass`; by default torch's
    built-in bucketing (`bucket_all_gather` & co.)."""

    def __init__(self, apply: Callable[..., object] | None = None, **options):
        self.apply = apply or _torch_apply
        self.options = options

    def __call__(self, graph: fx.Graph) -> None:
        self.apply(graph.owning_module, **self.options)


def _torch() -> PassAdapter:
    return PassAdapter(
        name="torch",
        expectations=BUCKETING,
        apply_fx=_torch_apply,
        inductor_pass=lambda **options: TorchInductorPass(**options),
        honours=frozenset({"bucket_cap_mb", "collectives", "multidtype"}),
        expected_failures=known_failures.manifest(known_failures.TORCH_BUILTIN),
    )


# Dynamo's root (`L['fn']`, `L['self']`) and `_modules['x']` / `['0']` subscripts.
# The suite keeps its own reading of module paths: it must not depend on the pass it checks.
_DYNAMO_ROOT = re.compile(r"""^L\[['"][^'"]+['"]\]""")
_SUBSCRIPT = re.compile(r"""(?:\._modules)?\[['"]?([^'"\]]+)['"]?\]""")


def module_fqn(path: str) -> str:
    """`L['fn']._modules['layers']['0']` -> `layers.0`."""
    path = _SUBSCRIPT.sub(lambda m: "." + m.group(1), _DYNAMO_ROOT.sub("", path))
    return ".".join(p for p in path.split(".") if p)


def _module_stack(node: fx.Node) -> list:
    # torch's default reading strips only `L['self']`: on `torch.compile(model)`
    # graphs (root `L['fn']`) every node would land in a module named "fn".
    stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack") or {}
    return [(module_fqn(path), cls) for path, cls in stack.values()]


def _torch_manual_apply(gm: fx.GraphModule, **options) -> None:
    """torch's `manual_overlap_bucketing` with the plan in `module_buckets`; other options do not apply."""
    from torch._inductor.fx_passes.overlap_manual_scheduling import manual_overlap_bucketing

    plan = options.get("module_buckets")
    if plan is None:
        return  # nothing to bucket without a plan
    with _gpu_figures_without_gpu():
        manual_overlap_bucketing(gm, module_bucket_plans=[p if isinstance(p, str) else list(p) for p in plan],
                                 module_stack_fn=_module_stack)


@contextlib.contextmanager
def _gpu_figures_without_gpu():
    """torch's schedulers estimate node runtimes from GPU figures they ask Triton's
    driver for, even on CPU graphs. Without a GPU (no driver, or no triton), answer
    with constants instead of failing the compile: what the estimates steer is
    scheduling, never the values a correct pass computes."""
    import torch

    if torch.cuda.is_available():
        yield
        return
    import torch.utils._runtime_estimation as estimation

    with unittest.mock.patch.multiple(estimation, get_gpu_dram_gbps=lambda *a, **k: 1000.0,
                                      get_device_tflops=lambda *a, **k: 100.0):
        yield


def _torch_manual() -> PassAdapter:
    return PassAdapter(
        name="torch-manual",
        expectations=SEMANTICS_ONLY,
        apply_fx=_torch_manual_apply,
        inductor_pass=lambda **options: TorchInductorPass(_torch_manual_apply, **options),
    )


def _torch_overlap_apply(gm: fx.GraphModule, **options) -> None:
    """torch's overlap-preserving scheduler with its bucketing on (`schedule_overlap_bucketing`,
    what `aten_distributed_optimizations.collective_bucketing` runs), analytical estimates (no
    GPU benchmarking). Of the suite's options it honours `bucket_cap_mb` through FSDP pre-bucketing."""
    import inspect

    import torch
    from torch._inductor.fx_passes.overlap_scheduling import schedule_overlap_bucketing

    cap = options.get("bucket_cap_mb")
    settings = dict(collective_bucketing=True, insert_overlap_deps=False, collective_estimator="analytical",
                    compute_estimator="analytical",
                    pre_bucketing_fsdp_collectives_bucket_cap_mb=None if cap is None or callable(cap) else float(cap))
    # torch 2.11's scheduler has fewer settings (no compute estimator, no FSDP pre-bucketing)
    # and benchmarks or rooflines compute nodes on the GPU: without one, a constant
    # 0.1 ms per compute node (estimates steer its schedule, never the values).
    accepted = inspect.signature(schedule_overlap_bucketing).parameters
    estimates = contextlib.nullcontext()
    if "compute_estimator" not in accepted and not torch.cuda.is_available():
        from torch._inductor.fx_passes import overlap_scheduling

        settings["custom_runtime_estimation"] = lambda node, size: (
            None if "_c10d_functional" in str(node.target) else 0.1)
        estimates = unittest.mock.patch.object(overlap_scheduling, "estimate_runtime_analytical", lambda node: 0.1)
    with _gpu_figures_without_gpu(), estimates:
        out = schedule_overlap_bucketing(gm, **{k: v for k, v in settings.items() if k in accepted})
    if out is not gm:
        gm.graph = out.graph
    gm.recompile()


def _torch_overlap() -> PassAdapter:
    return PassAdapter(
        name="torch-overlap",
        expectations=SEMANTICS_ONLY,
        apply_fx=_torch_overlap_apply,
        inductor_pass=lambda **options: TorchInductorPass(_torch_overlap_apply, **options),
        expected_failures=known_failures.manifest(known_failures.TORCH_OVERLAP),
    )


def _identity() -> PassAdapter:
    return PassAdapter(
        name="identity",
        expectations=SEMANTICS_ONLY,
        apply_fx=lambda gm, **options: None,
        inductor_pass=None,
    )


BUILTIN = {"project": _project, "torch": _torch, "torch-manual": _torch_manual, "torch-overlap": _torch_overlap,
           "identity": _identity}


def load(spec: str) -> PassAdapter:
    if spec in BUILTIN:
        return dataclasses.replace(BUILTIN[spec](), spec=spec)
    if ":" not in spec:
        raise ValueError(f"--bucketing-pass must be one of {sorted(BUILTIN)} or module:object, got {spec!r}")
    module, name = spec.split(":", 1)
    obj = getattr(importlib.import_module(module), name)
    if isinstance(obj, PassAdapter) or callable(obj):
        return dataclasses.replace(resolve(obj), spec=spec)
    raise ValueError(f"--bucketing-pass {spec!r} is neither a PassAdapter nor callable")


def resolve(adapter) -> PassAdapter:
    """A PassAdapter from a name or "module:object" (see `load`), a PassAdapter, or a
    callable `fn(gm, **options)` (checked for results only)."""
    if isinstance(adapter, PassAdapter):
        return adapter
    if isinstance(adapter, str):
        return load(adapter)
    if callable(adapter):
        name = f"{getattr(adapter, '__module__', '?')}:{getattr(adapter, '__qualname__', repr(adapter))}"
        return PassAdapter(name=name, expectations=SEMANTICS_ONLY, apply_fx=adapter)
    raise ValueError(f"adapter must be a name, 'module:object', a PassAdapter or a callable, got {adapter!r}")


def load_many(specs: str) -> list[PassAdapter]:
    """`--bucketing-pass=project,torch,pkg.mod:adapter`: one adapter per comma-separated spec."""
    return [load(spec.strip()) for spec in specs.split(",") if spec.strip()]
