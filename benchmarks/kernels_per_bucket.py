"""Launches per bucket in the code Inductor generates for a GPU, ours vs torch's vs unbucketed.

    python -m benchmarks.kernels_per_bucket [--arch sm90] [--members 2 8 64]

One program of N all-gathers, members alternating bf16 and f32, each used
directly as an output (the case where copy-outs show: nothing downstream to fuse
them into). Sizes are multiples of 16 elements so that torch's built-in pass,
which views the bucket through one dtype, can bucket them at all. Generated for
the GPU preset on this machine (conformance/fake_cuda.py), nothing compiled or
run. Prints a Markdown table: per bucket, the Triton kernels Inductor launches,
the ops that pack or unpack a bucket outside Inductor's kernels, the
collectives, and host-to-device copies.
"""

from __future__ import annotations

import argparse
import ast
import re

import torch

from bucketing import ops
from conformance import adapters, catalog, fake_cuda
from conformance.codegen import census, generate
from conformance.compiled import fake_group
from conformance.programs import build, make_inputs

WORLD = 4
PASSES = {"ours": "project", "torch built-in": "torch", "unbucketed": "identity"}


def steps(n: int) -> tuple:
    return tuple(catalog.ag(torch.bfloat16 if i % 2 else torch.float32, 16 * (1 + i % 4)) for i in range(n))


_OP_CALL = re.compile(r"torch\.ops\.bucketing_ops\.(all_gather_copy_in|copy_out)\.default\((.*)\)$", re.M)


def _literal(node):
    try:
        return ast.literal_eval(node)
    except ValueError:  # a buffer name
        return None


def kernels_inside_our_ops(code: str) -> int:
    """Device kernels our copy-in and copy-out ops launch: one `cat` per dtype span and one
    `split_with_sizes_copy` per run of same-dtype members (bucketing/ops.py), from their arguments."""
    total = 0
    for name, args in _OP_CALL.findall(code):
        literal = [_literal(v) for v in ast.parse(f"f({args})").body[0].value.args]
        if name == "all_gather_copy_in":
            _, offsets, numels, dtypes, _ = literal
            total += len(ops._copy_plan(dtypes, tuple(offsets), tuple(numels)))
        else:
            _, _, offsets, row_bytes, dtypes, _, _ = literal
            total += len(ops._copy_out_stretches(tuple(offsets), tuple(row_bytes), dtypes))
    return total


def measure(n: int, adapter_spec: str, arch: str) -> dict[str, int] | str:
    groups = fake_group(WORLD)
    program_steps = steps(n)
    adapter = adapters.load(adapter_spec)
    custom = adapter.inductor_pass() if adapter.inductor_pass else None
    try:
        code = generate(build(program_steps, groups), make_inputs(program_steps, groups, f"kpb-{n}", 0), custom,
                        "cuda", arch)
    except Exception as e:  # a pass that fails here is reported in the table, not hidden
        return f"fails: {type(e).__name__}"
    counts = census(code)
    counts["inside_ops"] = kernels_inside_our_ops(code)
    return counts


def _cell(c) -> str:
    if isinstance(c, str):
        return c
    ops_part = f" ({c['inside_ops']} kernels)" if c["inside_ops"] else ""
    return f"{c['triton']} + {c['extern_copy']} op{ops_part} + {c['collective']} coll" + (
        f" + {c['host_to_device']} H2D" if c["host_to_device"] else "")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="sm90", choices=sorted(fake_cuda.PRESETS))
    parser.add_argument("--members", type=int, nargs="+", default=[2, 8, 64])
    args = parser.parse_args(argv)
    print(f"Launches in the generated step, {args.arch} ({fake_cuda.PRESETS[args.arch].name}), torch "
          f"{torch.__version__}, {WORLD} ranks: Triton kernels + bucket pack/unpack ops + collectives\n")
    print("| members | " + " | ".join(PASSES) + " |")
    print("|---|" + "---|" * len(PASSES))
    for n in args.members:
        print(f"| {n} | " + " | ".join(_cell(measure(n, spec, args.arch)) for spec in PASSES.values()) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
