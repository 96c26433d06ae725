"""A deliberately broken pass: swaps the first two bytes of the first all-gather's result.

The suite must catch it under every front end, naming the case, the rank, the
output and the byte offset.
"""

import torch

c10d = torch.ops._c10d_functional


def _swap_first_two_bytes(t: torch.Tensor) -> torch.Tensor:
    out = t.clone()
    flat = out.view(-1).view(torch.uint8)
    first, second = flat[0].clone(), flat[1].clone()
    flat[0], flat[1] = second, first
    return out


def swap_bytes(gm, **options):
    for node in gm.graph.nodes:
        if node.target is c10d.wait_tensor.default and node.args[0].target is c10d.all_gather_into_tensor.default:
            with gm.graph.inserting_after(node):
                swapped = gm.graph.call_function(_swap_first_two_bytes, (node,))
            node.replace_all_uses_with(swapped, delete_user_cb=lambda user, s=swapped: user is not s)
            break
    gm.recompile()
