"""Our pass planning with stand-in estimates, on gloo ranks.

torch's estimates exist on CUDA only, so on the CPU the default policy never
groups blocks, never weighs copies against latency and prefetches one bucket
ahead. These adapters hand the pass a fixed latency-bandwidth model instead
(`AlphaBeta`), chosen so that every one of those paths acts on the family's
small models:

- `COMMUNICATION_BOUND`: a collective's latency (1 s) outweighs any block's
  compute, so blocks merge, collectives outside the blocks join them, no copy
  is refused, and every bucket is issued at once (twice its time of compute
  lies before no use);
- `COMPUTE_BOUND`: a block computes for seconds and a collective takes 1 ms,
  so each block is its own bucket, and members moving more than 100 KB stay
  alone (their copies cost more than the latency merging saves).

Results are then checked byte for byte on real process groups where there is no GPU.
"""

import dataclasses
from unittest import mock

from conformance import adapters


def _with_estimates(name: str, latency_ms: float, flops_per_ms: float, hbm_bytes_per_ms: float) -> adapters.PassAdapter:
    import bucketing.core as bc
    import bucketing.plan.estimates as estimates
    from bucketing.plan.costs import DeviceCosts
    from bucketing.plan.timeline import node_flops

    @dataclasses.dataclass(frozen=True)
    class AlphaBeta(DeviceCosts):
        def collective_ms(self, kind, nbytes, group_size):
            return 0.0 if group_size < 2 else latency_ms + nbytes / self.hbm_bytes_per_ms

        def node_ms(self, node):
            return node_flops(node) / self.peak_flops_per_ms

    costs = AlphaBeta(peak_flops_per_ms=flops_per_ms, hbm_bytes_per_ms=hbm_bytes_per_ms)

    class EstimatingPass(bc.BucketingPass):
        def __call__(self, graph):
            with mock.patch.object(estimates, "device_costs", lambda device: costs):
                super().__call__(graph)

        def uuid(self):
            return super().uuid() + f"-{name}"

    project = adapters.load("project")
    return dataclasses.replace(project, name=f"project-{name}", expectations=adapters.SEMANTICS_ONLY,
                               inductor_pass=EstimatingPass)


# A latency of 1000 ms outlasts any block's compute; a member moving 100 KB copies in
# 1 ms, far less than merging it saves: no copy is refused.
COMMUNICATION_BOUND = _with_estimates("communication-bound", latency_ms=1000.0, flops_per_ms=1e9,
                                      hbm_bytes_per_ms=2e5)
# A block's tens of MFLOPs take seconds; a member moving 100 KB copies in 1 ms, the latency merging saves.
COMPUTE_BOUND = _with_estimates("compute-bound", latency_ms=1.0, flops_per_ms=1e4, hbm_bytes_per_ms=2e5)
