"""The suite's multi-process test files. `FxConformance` and `InductorConformance`
(conformance/unittest_front.py) are imported from `conformance`; they stay importable
from here for unittest files written against this earlier path."""

from ..unittest_front import FxConformance, InductorConformance

__all__ = ["FxConformance", "InductorConformance"]
