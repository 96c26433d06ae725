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


@pytest.fixture
def fake_world():
    """A fake group's size: the session's if one exists (shared), else 8 ranks, removed after."""
    created = not dist.is_initialized()
    yield 8 if created else dist.get_world_size()
    if created and dist.is_initialized():
        dist.destroy_process_group()
