"""Real models, sharded SimpleFSDP-style, trained compiled with and without a bucketing pass."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .family import ModelSpec


def get(name: str) -> ModelSpec:
    """A model of the family (family.py), or a real client (clients.py, `nox -s clients`)."""
    # Imported on use: a module of this package (toy_fsdp, simple_fsdp) loads no model of the family.
    from .clients import CLIENTS
    from .family import MODELS

    spec = MODELS.get(name) or CLIENTS.get(name)
    if spec is None:
        raise ValueError(f"unknown model {name!r}; known: {sorted(MODELS) + sorted(CLIENTS)}")
    return spec
