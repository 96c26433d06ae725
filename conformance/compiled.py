"""Compiling a catalog program through Inductor, with or without the pass under test."""

from __future__ import annotations

import contextlib

import torch
import torch._dynamo
from torch._inductor.utils import run_and_get_code


@contextlib.contextmanager
def pass_in_config(custom_pass):
    with torch._inductor.config.patch(post_grad_custom_post_pass=custom_pass):
        yield


def compile_and_run(program, inputs, custom_pass=None, get_code: bool = False):
    """(outputs, generated code or None) of a fresh compile of `program`."""
    torch._dynamo.reset()  # a previous compile of the same code must not be reused
    compiled = torch.compile(program, fullgraph=True)
    with pass_in_config(custom_pass):
        if get_code:
            out, codes = run_and_get_code(compiled, *inputs)
            return out, "\n".join(codes)
        return compiled(*inputs), None


def fake_group(world_size: int) -> dict:
    """A single-process fake process group (codegen only, no communication), as a groups dict."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if not dist.is_initialized():
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    world = dist.group.WORLD
    size = dist.get_world_size()
    if size != world_size:
        raise RuntimeError(f"a fake process group of {size} ranks already exists; {world_size} requested")
    return {"world": (world.group_name, size, world), "alt": (world.group_name, size, world)}
