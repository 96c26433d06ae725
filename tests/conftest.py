from __future__ import annotations

import pytest
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

import bucketing  # noqa: F401  (registers ops)

from .graphs import WORLD


@pytest.fixture(scope="session")
def group_name() -> str:
    """A fake process group of 4 ranks in this process: graphs, no communication."""
    if not dist.is_initialized():
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)
    return dist.group.WORLD.group_name
