"""The code Inductor generates for a catalog case, for the CPU or a GPU preset.

    python -m conformance.codegen --device cuda --arch sm90 --case ag-bf16-f32-odd-w2 [--bucketing-pass NAME]

prints the generated module (wrapper and kernels). For `--device cuda` nothing
needs a GPU: the program is traced on the CPU, its post-autograd graph moved to
`cuda`, and lowered inside `fake_cuda.target(arch)`, codegen only (no kernel is
compiled or run). The pass under test runs where it runs in a user's compile:
Inductor's post-grad custom pass, on the `cuda` graph.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import re
import sys
from unittest import mock

import torch
import torch._dynamo
from torch.utils._pytree import tree_map

from . import adapters, catalog, fake_cuda
from .compiled import fake_group
from .programs import build, make_inputs

DEVICES = ("cpu", "cuda")


class CodegenError(RuntimeError):
    """Inductor generated no code for the graph (nothing is returned that was not generated)."""


def _to_cuda(x):
    """A CPU tensor or fake tensor as a fake tensor of the same layout on `cuda`."""
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(x, torch.device):
        return torch.device("cuda", 0) if x.type == "cpu" else x
    if not isinstance(x, torch.Tensor):
        return x
    mode = x.fake_mode if isinstance(x, FakeTensor) else torch._guards.detect_fake_mode()
    with mode:
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="cuda")


def retarget_to_cuda(gm: torch.fx.GraphModule, inputs):
    """Move an aten graph and its example inputs from the CPU to `cuda`, in place."""
    for node in gm.graph.nodes:
        if "val" in node.meta:
            node.meta["val"] = tree_map(_to_cuda, node.meta["val"])
        node.args = tree_map(_to_cuda, node.args)
        node.kwargs = tree_map(_to_cuda, node.kwargs)
    gm.recompile()
    return [_to_cuda(x) for x in inputs]


@contextlib.contextmanager
def _codegen_only(sink: list[str]):
    """Lowering writes the module's source into `sink` and compiles nothing."""
    from torch._inductor.graph import GraphLowering

    def compile_to_module(self):
        wrapper, kernels = self.codegen_with_cpp_wrapper() if self.cpp_wrapper else self.codegen()
        sink.append(wrapper.value)
        if kernels:
            sink.append(kernels.value)
        return mock.Mock()

    with mock.patch.object(GraphLowering, "compile_to_module", compile_to_module):
        yield


def _backend(sink: list[str], arch: str | None):
    """A Dynamo backend: Inductor's pipeline up to code generation, then the program runs eagerly.

    With `arch`, only lowering sees the GPU preset: Dynamo and AOTAutograd trace on
    the CPU (a CPU build cannot trace on `cuda`), then the graph moves to `cuda`."""
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    def inner_compile(gm, example_inputs, **kwargs):
        target = contextlib.nullcontext()
        if arch is not None:
            target = fake_cuda.target(arch)
            example_inputs = retarget_to_cuda(gm, example_inputs)
        with target, _codegen_only(sink):
            compile_fx_inner(gm, example_inputs, **kwargs)
        return gm  # never run: the backend below runs the Dynamo graph itself

    def backend(gm, example_inputs):
        compile_fx(gm, example_inputs, inner_compile=inner_compile)
        return gm.forward

    return backend


def _no_caches():
    # Codegen-only results must never be written to, or read from, Inductor's caches.
    return torch._inductor.config.patch(fx_graph_cache=False, fx_graph_remote_cache=False,
                                        autotune_local_cache=False, autotune_remote_cache=False)


@functools.cache
def _warm_up_cpu() -> None:
    """Inductor traces its pattern libraries once per process, on `cuda` when it believes one
    exists; a CPU build cannot run those traces, so they happen here first, on the CPU."""
    torch._dynamo.reset()
    x = torch.ones(8, 8)
    with _no_caches():
        torch.compile(lambda a: (a @ a).relu().sum(), backend=_backend([], None), fullgraph=True)(x)
    torch._dynamo.reset()


def generate(program, inputs, custom_pass, device: str = "cpu", arch: str | None = None) -> str:
    """Inductor's generated source for `program(*inputs)` on `device`: CPU inputs lowered for
    the CPU, or for the GPU preset `arch`; with `arch=None` and CUDA inputs, for the real GPU."""
    if device not in DEVICES:
        raise ValueError(f"device: {device!r} is not one of {DEVICES}")
    if device == "cuda" and arch is None and not torch.cuda.is_available():
        raise ValueError("arch: a GPU preset is needed for device 'cuda' without a GPU ("
                         + ", ".join(fake_cuda.PRESETS) + ")")
    _warm_up_cpu()
    sink: list[str] = []
    torch._dynamo.reset()
    with _no_caches(), torch._inductor.config.patch(post_grad_custom_post_pass=custom_pass):
        torch.compile(program, backend=_backend(sink, arch if device == "cuda" else None), fullgraph=True)(*inputs)
    torch._dynamo.reset()
    if not sink:
        raise CodegenError(f"Inductor generated no code for {device} {arch or ''}".strip())
    return "\n".join(sink)


def case_code(case_id: str, adapter="project", device: str = "cpu", arch: str | None = None) -> str:
    """The generated code of a catalog case id (`NAME-wN`) under an adapter's pass
    (a name, "module:object" or a PassAdapter; one without an Inductor pass: unbucketed)."""
    case, world = catalog.get(case_id)
    adapter = adapters.resolve(adapter)
    groups = fake_group(world)
    program = build(case.steps, groups)
    real_gpu = device == "cuda" and arch is None
    inputs = make_inputs(case.steps, groups, case.name, 0, "cuda" if real_gpu else "cpu")
    custom = adapter.inductor_pass(**case.options_for(world)) if adapter.inductor_pass else None
    return generate(program, inputs, custom, device, arch)


# The targets every codegen check (codegen_checks/) reads code for: the CPU, and
# the GPU presets (fake_cuda.py) generated on this machine.
TARGETS = ("cpu", "sm80", "sm90")
CHECK_WORLD = 4  # the world size of the catalog cases the checks compile


def target_code(case_name: str, adapter, target: str = "cpu") -> str:
    """The generated code of catalog case `case_name` at CHECK_WORLD ranks for a target of TARGETS."""
    device, arch = ("cpu", None) if target == "cpu" else ("cuda", target)
    return case_code(f"{case_name}-w{CHECK_WORLD}", adapter, device, arch)


def target_param(*values, target: str, id: str):
    """A pytest parameter for a check on `target`: sm80 on the first release only, so later
    releases check the GPU machines' sm90 beside the CPU."""
    import pytest

    marks = [pytest.mark.first_release] if target == "sm80" else []
    return pytest.param(*values, marks=marks, id=id)


# What the wrapper of a generated module launches, by kind.
_LAUNCHES = {
    "triton": re.compile(r"^\s*triton_\w+\.run\(", re.M),
    "cpp": re.compile(r"^\s*cpp_fused_\w+\(", re.M),
    "collective": re.compile(r"torch\.ops\._c10d_functional\.(?:all_gather_into_tensor(?:_out)?|reduce_scatter_tensor"
                             r"(?:_out)?|all_reduce_?)\.default\("),
    "wait": re.compile(r"torch\.ops\._c10d_functional\.wait_tensor\.default\("),
    # Ops that pack or unpack a bucket outside Inductor's kernels (each runs eager kernels).
    "extern_copy": re.compile(r"torch\.ops\.(?:bucketing_ops\.(?:all_gather_copy_in|copy_out(?:_into)?)|bucketing\.\w*bucket\w*|"
                              r"fsdp\.\w+|aten\.split_with_sizes_copy|aten\.cat)\.\w+\("),
    # A tensor made on the host and copied to the device inside the step.
    "host_to_device": re.compile(r"empty_strided_cpu(?:_pinned)?\(|\.to\(device=|\.copy_\(.*cpu|torch\.tensor\("),
}


def census(code: str) -> dict[str, int]:
    """How many of each launch the generated module's `call` makes (kernels counted where launched)."""
    start = code.find("def call(")
    body = code[start:code.find("\nrunner = ", start)] if start >= 0 else code
    return {kind: len(pattern.findall(body)) for kind, pattern in _LAUNCHES.items()}


_COLLECTIVE_RESULT = re.compile(r"^\s*(buf\d+) = torch\.ops\._c10d_functional\.(?:all_gather_into_tensor|"
                                r"reduce_scatter_tensor|all_reduce)\.default\(", re.M)
_IN_PLACE_COLLECTIVE = re.compile(r"torch\.ops\._c10d_functional\.all_reduce_\.default\((buf\d+)")
_ASSIGNMENT = re.compile(r"^\s*(buf\d+) = (.*)$", re.M)
# A wrapper line that makes a view or an alias of a buffer (not an op's new result).
_ALIAS = re.compile(r"(?:(buf\d+)(?:;|$)|reinterpret_tensor\((buf\d+)|torch\.ops\.aten\.(?:view|alias|as_strided)\.\w+\((buf\d+))")
_KERNEL_LAUNCH = re.compile(r"^\s*((?:triton|cpp_fused)_\w+)(?:\.run)?\((.*)\)$", re.M)


def _merged_arguments(code: str) -> dict[str, set[int]]:
    """Per kernel launched in the wrapper, the positions of its arguments that are a
    collective's result or a view of it."""
    body = code[code.find("def call("):]
    merged = set(_COLLECTIVE_RESULT.findall(body)) | set(_IN_PLACE_COLLECTIVE.findall(body))
    for name, value in _ASSIGNMENT.findall(body):  # views and aliases, in wrapper order
        alias = _ALIAS.match(value)
        if alias and (alias.group(1) or alias.group(2) or alias.group(3)) in merged:
            merged.add(name)
    found: dict[str, set[int]] = {}
    for kernel, args in _KERNEL_LAUNCH.findall(body):
        positions = {i for i, arg in enumerate(a.strip() for a in args.split(",")) if arg in merged}
        if positions:
            found.setdefault(kernel, set()).update(positions)
    return found


def copy_out_kernels(code: str) -> set[str]:
    """Names of the kernels that read a collective's result (or a view of it) in the wrapper.

    In a bucketed module these hold the bucket's copy-out: consumers read the
    dense members it writes, never the merged buffer itself. (A C++ kernel may
    also hold consumers' loops: the CPU backend puts consecutive loop nests in
    one function; `kernels(..., leaving_out_copies=True)` separates them.)
    """
    return set(_merged_arguments(code))


def differences(code_a: str, code_b: str) -> list[str]:
    """Lines that differ between two generated modules, comments and blank lines aside."""
    import difflib

    def lines(code):
        return [line for line in code.splitlines() if line.strip() and not line.lstrip().startswith("#")]

    return [d for d in difflib.unified_diff(lines(code_a), lines(code_b), "real", "target", lineterm="", n=0)
            if not d.startswith("@@")]


_KERNEL_DEF = re.compile(r"^(\w+) = async_compile\.(?:triton|cpp_pybinding|cpp)\((.*?)'{3}(?:, device_str='\w+')?\)$",
                         re.M | re.S)
_POINTER = re.compile(r"\b(?:in_out|in|out)_ptr\d+\b")
# Kernel text about the launch or the buffers, not the arithmetic: decorator
# metadata and parameter lists. (A consumer allowed to overwrite its dense input
# writes in place, `in_out_ptr0`; one reading a collective's output writes to a
# new buffer. Both compute the same values in the same order.)
_NOT_COMPUTE = re.compile(r"^\s*(?:#|triton_meta=|inductor_meta=|filename=|size_hints=|def KERNEL\(|extern \"C\"|"
                          r"(?:const )?[\w:<>]+\*\s+ptr[,)]|\[|'|\]|@triton\.jit|import |from |triton_helpers\.)")


_CPP_PARAMS = re.compile(r'extern "C"\s+void\s+kernel\((.*?)\)', re.S)


def _loop_nests(cpp_body: str) -> list[str]:
    """The top-level `{ ... }` blocks of a C++ kernel's function body: one per loop nest."""
    start = cpp_body.find("{", _CPP_PARAMS.search(cpp_body).end())
    nests, depth, opened = [], 0, None
    for i in range(start + 1, len(cpp_body)):
        ch = cpp_body[i]
        if ch == "{":
            depth += 1
            # A nest opens on a line of its own; `{0}` in a declaration does not.
            if depth == 1:
                line_start = cpp_body.rfind("\n", 0, i) + 1
                opened = i if not cpp_body[line_start:i].strip() else None
        elif ch == "}":
            if depth == 0:
                break
            depth -= 1
            if depth == 0 and opened is not None:
                nests.append(cpp_body[opened:i + 1])
    return nests


def _normalized(text: str, name: str) -> str:
    text = _POINTER.sub("ptr", text.replace(name, "KERNEL"))
    return "\n".join(line for line in text.splitlines() if line.strip() and not _NOT_COMPUTE.match(line))


def kernels(code: str, leaving_out_copies: bool = False) -> list[str]:
    """The generated kernels' arithmetic, distinct and sorted: each Triton kernel's source and
    each loop nest of a C++ kernel, without names, comments, launch metadata and parameter
    lists, every buffer named `ptr`. Two modules whose lists are equal run the same operations
    on the same indices in the same order. (Distinct: Inductor defines a kernel once however
    often it is launched, and the CPU backend may put several nests in one function.)

    `leaving_out_copies`: leave out the copies that read a collective's result (a bucketed
    module's copy-out), so what remains is the program's own compute.
    """
    merged = _merged_arguments(code) if leaving_out_copies else {}
    out = []
    for name, body in _KERNEL_DEF.findall(code):
        signature = _CPP_PARAMS.search(body)
        if signature is None:  # a Triton kernel: a copy-out kernel is one of its own
            if name not in merged:
                out.append(_normalized(body, name))
            continue
        params = [p.split()[-1].lstrip("*") for p in signature.group(1).split(",") if p.strip()]
        copied_from = {params[i] for i in merged.get(name, ()) if i < len(params)}
        for nest in _loop_nests(body):
            if not any(re.search(rf"\b{p}\b", nest) for p in copied_from):
                out.append(_normalized(nest, name))
    return sorted(set(out))


def compute_calls(code: str) -> list[str]:
    """Library calls the wrapper makes for the program's own compute (mm, addmm, ...), in order."""
    return re.findall(r"extern_kernels\.(\w+)\(", code)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.codegen", description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", required=True, help="catalog case id, e.g. ag-bf16-f32-odd-w2")
    parser.add_argument("--device", choices=DEVICES, default="cpu")
    parser.add_argument("--arch", choices=sorted(fake_cuda.PRESETS), help="GPU preset for --device cuda")
    parser.add_argument("--bucketing-pass", default="project", help="adapter: project | torch | identity | none | "
                                                                    "module:object")
    args = parser.parse_args(argv)
    if args.device == "cuda" and args.arch is None:
        parser.error("--device cuda needs --arch")
    spec = "identity" if args.bucketing_pass == "none" else args.bucketing_pass
    print(case_code(args.case, spec, args.device, args.arch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
