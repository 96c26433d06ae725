"""What the GPU path needs: an SM80+ CUDA device (bf16), and which backend fits."""

from __future__ import annotations

import torch


def suitable_gpu() -> tuple[bool, str]:
    """(usable, description): CUDA available and compute capability >= 8.0."""
    if not torch.cuda.is_available():
        return False, "torch.cuda.is_available() is False"
    major, minor = torch.cuda.get_device_capability(0)
    name = torch.cuda.get_device_name(0)
    if major < 8:
        return False, f"{name} is SM{major}{minor}; bf16 needs SM80 or newer"
    return True, f"{torch.cuda.device_count()} x {name} (SM{major}{minor}), torch {torch.__version__}"


def backend_for(world_size: int) -> str:
    """NCCL when every rank can own a GPU; otherwise gloo moving CUDA tensors."""
    return "nccl" if torch.cuda.device_count() >= world_size else "gloo"
