"""Session-wide test order for this repository's own runs."""

from __future__ import annotations


def _cost_rank(item) -> int:
    # xdist hands tests out in collection order; the model family's compiled
    # training runs take minutes each, so start them first and let the short
    # tests fill the other worker instead of one worker ending alone on them.
    if item.path.name == "test_models.py":
        return 0
    if item.get_closest_marker("inductor") is not None:
        return 1
    return 2


def pytest_collection_modifyitems(config, items):
    items.sort(key=_cost_rank)  # stable: each group keeps its own order
