"""A collective's time from published nccl-tests figures (the `measured` comm model).

nccl-tests report a bus bandwidth (busbw) per message size: algbw = bytes /
time, busbw = algbw x (n-1)/n for all-gather and reduce-scatter, x 2(n-1)/n for
all-reduce, so that busbw compares with a link's speed whatever the group
size. Here a collective of `nbytes` (its larger side) on n ranks takes

    latency + nbytes x factor(n) / plateau busbw(scope)

so a small message reaches only part of the plateau, as nccl-tests curves do
(8 H100s: about 60 GB/s at 1 MiB, 300 at 32 MiB); the cross-node plateau is
interpolated in log(nodes) between published node counts (clamped beyond the
last).

Scopes:
- inside one node (every rank of the group in one node of 8): NVLink/NVSwitch;
- across nodes with `ranks_per_node` ranks of the group in each node: NCCL
  rings cross nodes on rails (one NIC per GPU), so the group's bus bandwidth is
  the cross-node figure (measured with 8 ranks a node) times ranks_per_node / 8,
  and never above the NVLink figure. An HSDP replica group (one rank per node)
  runs at about one NIC's share.

Every figure is in SOURCES with where it comes from; the H200 shares the H100's
NVLink 4 and NDR network (its NCCL figures are the H100's).
"""

from __future__ import annotations

import bisect
import math

GPUS_PER_NODE = 8
KINDS = ("all_gather", "reduce_scatter", "all_reduce")

# Large-message busbw (GB/s) inside one node of 8, per GPU and kind.
INTRA_NODE_GBPS = {
    "h100": {"all_gather": 360.0, "reduce_scatter": 360.0, "all_reduce": 450.0},
    "a100": {"all_gather": 230.0, "reduce_scatter": 230.0, "all_reduce": 235.0},
}
# Large-message busbw (GB/s) across nodes of 8 GPUs (8 NICs a node) by node count.
INTER_NODE_GBPS = {
    "h100": ((2, 340.0), (4, 320.0), (32, 200.0), (128, 160.0)),
    "a100": ((2, 190.0), (4, 185.0), (32, 150.0), (128, 120.0)),
}
# Small-message time (us): a node, then growing with the ring's node count.
LATENCY_US = {"intra": 12.0, "inter_base": 25.0, "inter_per_log2_node": 8.0}

SOURCES = [
    {"figure": "8x H100 SXM busbw at large messages (all_reduce with NVLink SHARP)", "value": "~476-480 GB/s",
     "url": "https://github.com/NVIDIA/nccl-tests/issues/290 (NVIDIA's reply: 476 GB/s expected for H100)",
     "note": "all_reduce taken as 450 (ring and NVLS mixed by size); all-gather and reduce-scatter run without "
             "NVLS at ~360 GB/s, the figure this project's issue 39 quotes for one H100 node"},
    {"figure": "NDR 400 Gb/s NIC, nccl-tests busbw per NIC", "value": "46-48 GB/s",
     "url": "https://github.com/NVIDIA/nccl-tests/issues/290", "note": "the one-rank-per-node share below"},
    {"figure": "4 nodes of 8 H100 (32 GPU-NIC pairs) all_reduce busbw", "value": "365.84 GB/s",
     "url": "https://github.com/NVIDIA/nccl-tests/issues/309",
     "note": "all-gather taken as 320 at 4 nodes, 340 at 2"},
    {"figure": "32 nodes of 8 H100 (256 GPUs) all_gather busbw at 2 GiB", "value": "~200 GB/s",
     "url": "https://github.com/NVIDIA/nccl/issues/1218",
     "note": "128 nodes extrapolated to 160 GB/s (ring latency grows with nodes)"},
    {"figure": "8x A100 SXM4 NVLink 3 busbw, large messages", "value": "230-250 GB/s",
     "url": "https://docs.alayanew.com/en/docs/tech-blog/2026-05-06-nccl-tests", "note": ""},
    {"figure": "A100 across nodes, 8x200 Gb/s HDR (DGX A100 SuperPOD)", "value": "~185-190 GB/s at 2-4 nodes",
     "url": "https://docs.alayanew.com/en/docs/tech-blog/2026-05-06-nccl-tests",
     "note": "an HDR NIC is half an NDR one; larger node counts scaled as the H100's"},
    {"figure": "small-message time", "value": "~10-15 us inside a node, tens of us across nodes",
     "url": "https://github.com/NVIDIA/nccl-tests/issues/232 (2 MiB across 2 nodes: 93-113 us)",
     "note": "the growth per doubling of nodes (8 us) is an assumption"},
]


def _gpu(gpu: str) -> str:
    if gpu not in ("a100", "h100", "h200"):
        raise ValueError(f"gpu: {gpu!r} is not one of a100, h100, h200")
    return "h100" if gpu == "h200" else gpu


def _interp_log(points, x: float) -> float:
    """Piecewise linear in log(x) through (x, y) points, clamped at both ends."""
    xs = [p[0] for p in points]
    if x <= xs[0]:
        return points[0][1]
    if x >= xs[-1]:
        return points[-1][1]
    i = bisect.bisect_right(xs, x)
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    t = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return y0 + t * (y1 - y0)


def _check(kind: str, nbytes: int, group_size: int, ranks_per_node: int | None) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind: {kind!r} is not one of {KINDS}")
    if nbytes < 0:
        raise ValueError(f"nbytes: expected a byte count >= 0, got {nbytes}")
    if group_size < 1:
        raise ValueError(f"group_size: expected at least 1 rank, got {group_size}")
    if ranks_per_node is not None and not 1 <= ranks_per_node <= GPUS_PER_NODE:
        raise ValueError(f"ranks_per_node: expected 1 to {GPUS_PER_NODE}, got {ranks_per_node}")


def plateau_gbps(kind: str, group_size: int, gpu: str, ranks_per_node: int | None = None) -> float:
    """The large-message bus bandwidth (GB/s) of a group of `group_size` ranks;
    `ranks_per_node`: how many of the group's ranks share a node (default: as many as fit)."""
    _check(kind, 0, group_size, ranks_per_node)
    g = _gpu(gpu)
    per_node, nodes = _layout(group_size, ranks_per_node)
    intra = INTRA_NODE_GBPS[g][kind]
    if nodes == 1:
        return intra
    return min(intra, _interp_log(INTER_NODE_GBPS[g], nodes) * per_node / GPUS_PER_NODE)


def bus_gbps(kind: str, nbytes: int, group_size: int, gpu: str, ranks_per_node: int | None = None) -> float:
    """The bus bandwidth nccl-tests would report for this collective (latency included)."""
    ms = collective_ms(kind, nbytes, group_size, gpu, ranks_per_node)
    return nbytes * _factor(kind, group_size) / (ms / 1e3) / 1e9 if ms > 0 else 0.0


def _layout(group_size: int, ranks_per_node: int | None) -> tuple[int, int]:
    per_node = min(group_size, GPUS_PER_NODE) if ranks_per_node is None else min(ranks_per_node, group_size)
    return per_node, math.ceil(group_size / per_node)


def _factor(kind: str, group_size: int) -> float:
    return (group_size - 1) / group_size * (2 if kind == "all_reduce" else 1)


def latency_us(group_size: int, ranks_per_node: int | None = None) -> float:
    """A small message's time (us): one node, or growing with the ring's nodes."""
    _, nodes = _layout(group_size, ranks_per_node)
    if nodes == 1:
        return LATENCY_US["intra"]
    return LATENCY_US["inter_base"] + LATENCY_US["inter_per_log2_node"] * math.log2(nodes)


def collective_ms(kind: str, nbytes: int, group_size: int, gpu: str, ranks_per_node: int | None = None) -> float:
    """The time (ms) of one collective: latency plus its bus traffic at the plateau."""
    _check(kind, nbytes, group_size, ranks_per_node)
    if group_size == 1:
        return 0.0
    plateau = plateau_gbps(kind, group_size, gpu, ranks_per_node)
    return latency_us(group_size, ranks_per_node) / 1e3 + nbytes * _factor(kind, group_size) / (plateau * 1e9) * 1e3
