"""Our pass planning with stand-in estimates, on gloo ranks.

torch's estimates exist on CUDA only, so on the CPU the default policy never
groups blocks, never weighs copies against latency and prefetches one bucket
ahead. This adapter hands the pass a fixed latency-bandwidth model instead
(`AlphaBeta`), chosen so that every one of those paths acts on the family's
small models: blocks merge (a collective's latency outweighs any block's
compute), members moving more than 100 KB stay alone (their copies cost more
than the latency merging saves), and every bucket is issued at once (twice
its time of compute lies before no use). Results are then checked byte for
byte on real process groups where there is no GPU.
"""

import dataclasses
from unittest import mock

from conformance import adapters

LATENCY_MS = 1000.0
HBM_BYTES_PER_MS = 200.0  # a member moving 100 KB copies in 1000 ms: no merge saves that


def _with_estimates() -> adapters.PassAdapter:
    import bucketing.core as bc
    import bucketing.planning as planning
    from bucketing.costs import DeviceCosts
    from bucketing.timeline import node_flops

    @dataclasses.dataclass(frozen=True)
    class AlphaBeta(DeviceCosts):
        def collective_ms(self, kind, nbytes, group_size):
            return 0.0 if group_size < 2 else LATENCY_MS + nbytes / self.hbm_bytes_per_ms

        def node_ms(self, node):
            return node_flops(node) / self.peak_flops_per_ms

    costs = AlphaBeta(peak_flops_per_ms=1e9, hbm_bytes_per_ms=HBM_BYTES_PER_MS)

    class EstimatingPass(bc.BucketingPass):
        def __call__(self, graph):
            with mock.patch.object(planning, "device_costs", lambda device: costs):
                super().__call__(graph)

        def uuid(self):
            return super().uuid() + "-alpha-beta"

    project = adapters.load("project")
    return dataclasses.replace(project, name="project-estimates", expectations=adapters.SEMANTICS_ONLY,
                               inductor_pass=EstimatingPass)


ADAPTER = _with_estimates()
