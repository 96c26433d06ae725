"""What the suite does differently per torch release, all in one place.

Tested: torch 2.11 (the GPU machines'), 2.13 (CI) and 2.14 (bucketing.TESTED_TORCH_RELEASES).
Anything here is keyed by the release that behaves differently, with what differs.
"""

from __future__ import annotations

import torch
from torch.torch_version import TorchVersion

RELEASE = TorchVersion(torch.__version__.split("+")[0])

# torch 2.11's eager `_c10d_functional` collectives check
# `input.is_contiguous()`; 2.13 accepts strided inputs. Post-grad graphs never
# feed a collective a strided tensor (Inductor requires contiguous inputs), so
# on 2.11 the suite's programs make a sliced input contiguous before the collective.
COLLECTIVES_TAKE_STRIDED_INPUTS = RELEASE >= "2.13"
