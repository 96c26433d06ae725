"""Merge many small collectives into few, all-gathers of mixed dtypes included.

Importing the package registers the custom ops the rewrite emits, so a graph
compiled with the pass can be loaded from a cache and run without running it.
"""

import logging

import torch

from . import ops  # noqa: F401  (registers bucketing_ops::*)
from .core import (
    BucketingPass,
    Plan,
    bucket_all_gather,
    bucket_all_reduce,
    bucket_collectives,
    bucket_reduce_scatter,
    explain,
)
from .options import BucketingOptions

try:  # lets TORCH_LOGS=+bucketing show the plan lines
    import torch._logging._internal as _torch_logging

    _torch_logging.register_log("bucketing", "bucketing")
except Exception:  # pragma: no cover - older torch without the registry
    logging.getLogger("bucketing").debug("could not register the bucketing log with torch._logging")

# The torch releases the pass is tested on (noxfile.TORCH_RELEASES runs each).
# A newer one installs and runs; it is only untested, so say so once.
TESTED_TORCH_RELEASES = ("2.11", "2.13", "2.14")


def _release(version: str) -> tuple[int, int]:
    major, minor = version.split("+")[0].split(".")[:2]
    return int(major), int(minor)


if _release(torch.__version__) > max(map(_release, TESTED_TORCH_RELEASES)):
    logging.getLogger("bucketing").warning(
        "bucketing: torch %s is newer than the newest tested release (%s); it should work but is untested",
        torch.__version__, TESTED_TORCH_RELEASES[-1])

__all__ = [
    "BucketingOptions",
    "BucketingPass",
    "Plan",
    "bucket_all_gather",
    "bucket_all_reduce",
    "bucket_collectives",
    "bucket_reduce_scatter",
    "explain",
]
