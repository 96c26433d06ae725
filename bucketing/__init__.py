"""Merge many small collectives into few, all-gathers of mixed dtypes included.

Importing the package registers the custom ops the rewrite emits, so a graph
compiled with the pass can be loaded from a cache and run without running it.
"""

import logging

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
