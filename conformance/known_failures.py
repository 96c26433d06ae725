"""Expected failures as data: how an adapter's entries are written and read.

An entry gives a reason once, with the check ids it explains (globs over
catalog case ids `NAME-wN`, `inductor:NAME-wN`, `model:ID-wN`, `codegen:CHECK`,
`fuzz`) and the torch releases where it holds. Each adapter keeps its entries
beside its definition (adapters.py); `manifest()` turns them into its expected
failures on the running release. `checking.expected_outcome` applies them for
every front end, strictly: a check that passes where failure is expected
fails, naming the entry to drop.
"""

from __future__ import annotations

import dataclasses
import fnmatch

import torch


@dataclasses.dataclass(frozen=True)
class Known:
    reason: str
    ids: tuple[str, ...]
    releases: tuple[str, ...] = ("*",)  # globs over torch.__version__ without a local suffix ("2.13.0")


def manifest(table: tuple[Known, ...], version: str | None = None) -> dict[str, str]:
    """{check-id glob: reason} for `version` (default: the running torch); reasons of one id joined."""
    version = (version or torch.__version__).split("+")[0]
    out: dict[str, str] = {}
    for known in table:
        if not any(fnmatch.fnmatchcase(version, r) for r in known.releases):
            continue
        for pattern in known.ids:
            out[pattern] = f"{out[pattern]}; {known.reason}" if pattern in out else known.reason
    return out
