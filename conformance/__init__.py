"""Conformance suite for collective-bucketing passes.

    pytest --pyargs conformance --bucketing-pass=project|torch|identity|module:object

The catalog (catalog.py) is data; the tests in multiproc/ and codegen_checks/
check every case against the selected pass (adapters.py). What a user writes
against is importable from here: a `PassAdapter` for their pass (or a built-in
adapter), `Case` and `register` (with the step builders `ag`, `rs`, `ar`) for
cases of their own, and `FxConformance` / `InductorConformance` for unittest
classes.
"""

from __future__ import annotations

import importlib

# Public name -> the module that defines it. Imported on first use: pytest imports
# this package for the plugin in every session, which must load neither torch nor
# the suite.
_EXPORTS = {
    **dict.fromkeys(("PassAdapter", "TorchInductorPass", "BUCKETING", "SEMANTICS_ONLY", "PROJECT", "TORCH_BUILTIN",
                     "TORCH_MANUAL", "TORCH_OVERLAP", "IDENTITY"), "adapters"),
    **dict.fromkeys(("Case", "register", "ag", "rs", "ar"), "catalog"),
    **dict.fromkeys(("FxConformance", "InductorConformance"), "unittest_front"),
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
