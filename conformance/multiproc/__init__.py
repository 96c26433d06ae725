"""unittest front end of the suite (see conformance/unittest_front.py); the test_*.py files here use it too."""

from ..unittest_front import FxConformance, InductorConformance

__all__ = ["FxConformance", "InductorConformance"]
