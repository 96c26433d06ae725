"""A measured communication model: the time of one NCCL collective from published
nccl-tests figures, beside torch's analytical NCCL model.

    collective_ms("all_gather", 2 * 2**30, 256, "h100")   # ms for a 2 GiB gather on 32 nodes
    bus_gbps("all_gather", 2 * 2**30, 256, "h100")        # ~200, nccl-tests' busbw

The machine: nodes of `GPUS_PER_NODE` GPUs on NVLink/NVSwitch; between nodes one NIC
per GPU ("rails": A100 8 x 200 Gb/s HDR, H100/H200 8 x 400 Gb/s NDR InfiniBand), NCCL's
rings crossing nodes. A group of n <= gpus_per_node ranks is taken to sit in one node;
a larger one spans ceil(n / gpus_per_node) nodes with gpus_per_node of its ranks each.

Definitions are nccl-tests' (doc/PERFORMANCE.md): `nbytes` is the collective's larger
side (all-gather: the gathered output; reduce-scatter: its input; all-reduce: the tensor),
algbw = nbytes / time, busbw = algbw * (n-1)/n for all-gather and reduce-scatter and
algbw * 2(n-1)/n for all-reduce. Here

    time = latency + nbytes * factor / (peak * ramp(nbytes))

- `peak`: the bandwidth term's asymptote, solved so that the model reproduces a published
  busbw at the size it was published for (`_ANCHORS`). Inside a node: one figure per GPU
  and collective. Across nodes: figures at a few node counts, interpolated linearly in
  log(nodes) between them and clamped beyond the first and last.
- `ramp`: how the bandwidth term grows with message size, taken from a published size
  sweep of the same GPU generation (Azure's 8-GPU all-reduce sweeps, `_SWEEPS`) with its
  latency removed, normalised to 1 at 8 GiB, interpolated in log-log between the sweep's
  sizes and held flat outside them. Collectives and node counts without a sweep of their
  own borrow that shape (an assumption).
- `latency`: published small-message times inside a node and on two nodes
  (`_LATENCY_ANCHORS`); its growth with ring length and node count follows NCCL's own
  low-latency (LL protocol) cost model (src/graph/tuning.cc), shifted to go through the
  published points.

`bus_gbps` is what nccl-tests would print for that run (the latency included), so at
large sizes it is the published figure, and at small sizes `collective_ms` is the latency.
Every figure used is in `SOURCES` with where it was published; derived figures and
assumptions are marked at the tables below.
"""

from __future__ import annotations

import math
import operator

GPUS_PER_NODE = 8

KINDS = ("all_gather", "reduce_scatter", "all_reduce")

# H200: the H100's NVLink 4 / NVSwitch fabric and, assumed here, the same 8 x 400 Gb/s
# NDR rails, so it shares the H100's network figures (the Azure sweep used for both is an
# H200's). No H200-only difference is modelled.
_NETWORK = {"a100": "a100", "h100": "hopper", "h200": "hopper"}

KiB, MiB, GiB = 2**10, 2**20, 2**30

_AZURE = "https://github.com/Azure/AI-benchmarking-guide/blob/main/Azure_Results"
_NCCL = "https://github.com/NVIDIA/nccl/issues"
_TESTS = "https://github.com/NVIDIA/nccl-tests/issues"

SOURCES: list[dict] = [
    {"figure": "busbw definitions: algbw = S/t; busbw = algbw*(n-1)/n (all-gather, reduce-scatter), "
               "algbw*2(n-1)/n (all-reduce)",
     "value": "formulas",
     "url": "https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md",
     "note": "nccl-tests' own definitions; S = the all-gather's output / reduce-scatter's input / all-reduce's tensor"},
    {"figure": "ND H200 v5 (8x H200, one VM), 'NCCL Bandwidth' table: all-reduce (NVLS) in-place busbw, 1 KB-8 GB",
     "value": "52.96 GB/s at 1 MiB ... 240.41 at 16 MiB ... 412.45 at 128 MiB ... 479.98 at 8 GiB",
     "url": f"{_AZURE}/ND_H200_v5_results.md",
     "note": "NCCL 2.20.5. The 1 MiB-8 GiB rows are the H100/H200 intra-node all-reduce curve and the size "
             "ramp for every Hopper entry; rows below 1 MiB (NVLS forced, ~30 us) are not used"},
    {"figure": "ND A100 v4 (8x A100-SXM4-80GB, one VM), 'NCCL Bandwidth' table: all-reduce in-place busbw, 1 KB-8 GB",
     "value": "36.22 GB/s at 1 MiB ... 109.22 at 16 MiB ... 174.18 at 128 MiB ... 231.58 at 8 GiB",
     "url": f"{_AZURE}/ND_A100_v4_results.md",
     "note": "NCCL 2.18.5; the 1 MiB-8 GiB rows are the A100 intra-node all-reduce curve and the A100 size ramp"},
    {"figure": "8x H100: effective NVLink bandwidth ~370 GB/s seen as busbw by non-allreduce collectives or "
               "NCCL_ALGO=RING; NVLS all-reduce peak busbw ~480 GB/s on 8 GPUs",
     "value": "370 / 480 GB/s",
     "url": f"{_TESTS}/212",
     "note": "maintainer (sjeaugey) comment; confirms the Azure 8 GiB all-reduce figure"},
    {"figure": "nccl-tests on H100 (one node): reduce-scatter busbw 360 GB/s, all-gather busbw 350 GB/s",
     "value": "RS 360, AG 350 GB/s",
     "url": f"{_NCCL}/1281",
     "note": "the Hopper intra-node all-gather / reduce-scatter peaks; size not stated, taken at 8 GiB"},
    {"figure": "8x H100, all_reduce_perf 2-4 GiB: Ring busbw 365-370 GB/s for 2..8 GPUs; NVLS ~370 for 2-4 GPUs, "
               "420/440/460/480 for 5/6/7/8 GPUs",
     "value": "NVLS 370,370,370,420,440,460,480 (n=2..8)",
     "url": f"{_NCCL}/1455",
     "note": "ring (all-gather, reduce-scatter) busbw taken independent of group size inside a node; "
             "Hopper intra-node all-reduce scaled by the NVLS figure for n < 8"},
    {"figure": "H100 nodes with one 400G NIC per GPU, all_reduce_perf -b 8 -e 16g, max busbw: 1 node 480, "
               "2 nodes 470, 4 nodes (32 GPU-NIC pairs) 365.84 GB/s",
     "value": "470 (2 nodes), 365.84 (4 nodes) GB/s",
     "url": f"{_TESTS}/309",
     "note": "NCCL's default algorithms (NVLS / NVLSTree); max of the sweep taken at 16 GiB. The 4-node figure "
             "also sets the 4-node all-gather / reduce-scatter peaks (derived, see _ANCHORS)"},
    {"figure": "32 nodes x 8 H100 (256 GPUs), 8x 400G NICs: all_gather_perf at 2 GiB ~200 GB/s busbw; "
               "all_reduce_perf with the same flags ~340 GB/s",
     "value": "AG 200, AR 340 GB/s at 2 GiB",
     "url": f"{_NCCL}/1218",
     "note": "issue title gives the 200; the 340 is the all-reduce figure as read from the issue text. "
             "NCCL_IB_GID_INDEX=3 in its command suggests RoCE rails rather than InfiniBand"},
    {"figure": "248 nodes x 8 H200, all_reduce_perf 512 MiB: busbw typically ~350 GB/s, occasionally < 300",
     "value": "~350 GB/s",
     "url": f"{_TESTS}/283",
     "note": "cross-check only: consistent with clamping the all-reduce figure beyond 32 nodes"},
    {"figure": "CX-7 NICs at NDR 400 Gb/s should reach 46-48 GB/s per NIC; single 8x H100 node all-reduce 476 GB/s",
     "value": "46-48 GB/s per NIC",
     "url": f"{_TESTS}/290",
     "note": "maintainer (AddyLaddy) comment; 47 GB/s per rail caps groups with < 8 ranks per node; "
             "8 rails (~376 GB/s) sit above the NVLink ring, so 2-4 node rings stay near the intra-node figure"},
    {"figure": "DGX-A100 with 8x 200 Gb/s IB: measured all-reduce busbw 192 GB/s",
     "value": "192 GB/s",
     "url": f"{_NCCL}/812",
     "note": "maintainer (AddyLaddy) comment; node count not stated, taken at 4 nodes, 8 GiB"},
    {"figure": "peak per 200G NIC ~24 GB/s (12 GB/s per 100G NIC)",
     "value": "24 GB/s per HDR NIC",
     "url": f"{_TESTS}/119",
     "note": "maintainer (sjeaugey) comment; 8 rails = 192 GB/s, the A100 cross-node all-gather / reduce-scatter "
             "peak, and 24 GB/s per rail caps A100 groups with < 8 ranks per node"},
    {"figure": "single node 8x A100 all_reduce_perf -b 8 -e 4G busbw 232.54 GB/s",
     "value": "232.54 GB/s",
     "url": f"{_TESTS}/175",
     "note": "cross-check of the Azure A100 8 GiB figure; A100 all-gather / reduce-scatter intra-node peak "
             "taken as the ring all-reduce figure, 230 GB/s (A100 has no NVLS)"},
    {"figure": "nccl-tests on one 8x H20 node (NVLink 4 / NVSwitch like the H100): all_gather 128 B-4 KB "
               "10.3-11.1 us; all_reduce 4 B-4 KB 12.5-16.7 us",
     "value": "AG 10.5 us, AR 12.5 us",
     "url": "https://github.com/deepseek-ai/DeepEP/issues/303",
     "note": "Hopper intra-node small-message latency; an H20 stands in for the H100 (same fabric)"},
    {"figure": "2 nodes x 8 H20, 8 NDR NICs per node, NCCL_ALGO=NVLSTree all_reduce 4 B-1 KB: 46.3-47.6 us",
     "value": "47 us",
     "url": f"{_NCCL}/1244",
     "note": "Hopper two-node small-message latency (all-reduce); all-gather / reduce-scatter get the same "
             "intra-to-two-node increase (assumption)"},
    {"figure": "DGX-A100, NCCL_ALGO=Ring NCCL_MAX_NCHANNELS=1 all_reduce 8-128 B: 10 us on 2 GPUs ... 33.7 us on "
               "8 GPUs; ring latency = 2(n-1) x the slowest hop's latency",
     "value": "33.7 us (8 GPUs)",
     "url": f"{_TESTS}/123",
     "note": "A100 intra-node small-message latency (all three collectives; forced ring, one channel)"},
    {"figure": "2 nodes x 1 A100, HDR InfiniBand, all_reduce 8-128 B: ~19 us",
     "value": "19 us",
     "url": f"{_TESTS}/150",
     "note": "A100 cross-node latency check; below the intra-node anchor, so A100 gets no extra two-node latency"},
    {"figure": "NCCL tuner constants (LL protocol): base latency Ring 6.6 us, Tree 6.8 us; per hop NVLink "
               "Ring/Tree 0.6 us; network Ring 2.7 us, Tree 5.0 us (Tree's also for rings with one rank per node)",
     "value": "6.6 / 6.8 / 0.6 / 2.7 / 5.0 us",
     "url": "https://github.com/NVIDIA/nccl/blob/master/src/graph/tuning.cc",
     "note": "read at commit 5067397c; used only for how latency grows with ranks and nodes "
             "(ring: per step; all-reduce: the cheaper of ring and tree)"},
]

# ---------------------------------------------------------------------------
# Size sweeps: busbw (GB/s) at 2**20 .. 2**33 bytes, 8 GPUs in one node, all-reduce.

_SWEEP_SIZES = tuple(2**k for k in range(20, 34))
_SWEEPS = {
    # Azure ND H200 v5 (SOURCES[1]).
    "hopper": (52.96, 88.78, 138.44, 181.94, 240.41, 300.91, 368.11, 412.45, 432.24, 442.72,
               467.58, 472.57, 477.41, 479.98),
    # Azure ND A100 v4 (SOURCES[2]).
    "a100": (36.22, 53.54, 71.43, 89.99, 109.22, 132.77, 166.63, 174.18, 213.87, 221.58,
             228.10, 230.22, 230.48, 231.58),
}

# ---------------------------------------------------------------------------
# Published busbw anchors: (nodes, nbytes, busbw GB/s), nodes = 1 meaning inside a node
# (8 ranks), otherwise nodes x 8 ranks. Derived entries say how.

_H100_AR_4N = 365.84  # nccl-tests#309, 4 nodes
_H100_RING_INTRA = 370.0  # nccl-tests#212 / nccl#1455: ring all-reduce inside a node

_ANCHORS = {
    ("hopper", "all_gather"): [
        (1, 8 * GiB, 350.0),  # nccl#1281
        # Derived: the 4-node all-reduce (nccl-tests#309) times the intra-node all-gather /
        # ring ratio (350/370): 8 rails x 47 GB/s (nccl-tests#290) exceed the NVLink ring, so
        # a 4-node ring is NVLink-bound like one node, and somewhat below it.
        (4, 16 * GiB, _H100_AR_4N * 350.0 / _H100_RING_INTRA),
        (32, 2 * GiB, 200.0),  # nccl#1218, 256 H100
    ],
    ("hopper", "reduce_scatter"): [
        (1, 8 * GiB, 360.0),  # nccl#1281
        (4, 16 * GiB, _H100_AR_4N * 360.0 / _H100_RING_INTRA),  # derived as for all-gather
        (32, 2 * GiB, 200.0 * 360.0 / 350.0),  # assumed: all-gather's 256-GPU figure, RS/AG ratio
    ],
    ("hopper", "all_reduce"): [
        (1, 8 * GiB, _SWEEPS["hopper"][-1]),  # Azure H200 sweep (its whole curve is reproduced)
        (2, 16 * GiB, 470.0),  # nccl-tests#309 (NVLSTree)
        (4, 16 * GiB, _H100_AR_4N),  # nccl-tests#309
        (32, 2 * GiB, 340.0),  # nccl#1218
    ],
    ("a100", "all_gather"): [
        (1, 8 * GiB, 230.0),  # = the ring all-reduce figure (Azure 231.58, nccl-tests#175 232.54)
        (4, 8 * GiB, 8 * 24.0),  # derived: 8 rails x 24 GB/s per HDR NIC (nccl-tests#119)
        # Assumed: the H100's relative drop from 4 to 32 nodes (200 / 346.2 at 2 GiB).
        (32, 2 * GiB, 8 * 24.0 * 200.0 / (_H100_AR_4N * 350.0 / _H100_RING_INTRA)),
    ],
    ("a100", "reduce_scatter"): [
        (1, 8 * GiB, 230.0),
        (4, 8 * GiB, 8 * 24.0),
        (32, 2 * GiB, 8 * 24.0 * 200.0 / (_H100_AR_4N * 350.0 / _H100_RING_INTRA)),
    ],
    ("a100", "all_reduce"): [
        (1, 8 * GiB, _SWEEPS["a100"][-1]),  # Azure A100 sweep (its whole curve is reproduced)
        (4, 8 * GiB, 192.0),  # nccl#812 (node count not stated: taken at 4, so 2-4 nodes get it)
        (32, 2 * GiB, 192.0 * 340.0 / _H100_AR_4N),  # assumed: the H100's relative drop, 4 -> 32 nodes
    ],
}

# Per-rail busbw (GB/s): caps the cross-node bandwidth of a group with fewer than
# GPUS_PER_NODE ranks per node, which has only that many rails (nccl-tests#290, #119).
_RAIL_GBPS = {"hopper": 47.0, "a100": 24.0}

# Hopper intra-node all-reduce by group size, NVLS (nccl#1455); rings are flat in n.
_NVLS_BY_RANKS = {2: 370.0, 3: 370.0, 4: 370.0, 5: 420.0, 6: 440.0, 7: 460.0, 8: 480.0}

# ---------------------------------------------------------------------------
# Latency anchors (us): small-message times of nccl-tests runs.
# "ring" covers all-gather and reduce-scatter; absent -> the all-reduce offset is used.

_LATENCY_ANCHORS = {
    "hopper": {
        "intra": {"ring": (8, 10.5), "all_reduce": (8, 12.5)},  # DeepEP#303 (8x H20)
        "cross": {"all_reduce": (16, 2, 47.0)},  # nccl#1244 (2 x 8 H20)
    },
    "a100": {
        "intra": {"all_reduce": (8, 33.7)},  # nccl-tests#123 (DGX-A100, forced ring, 1 channel)
        "cross": {"all_reduce": (2, 2, 19.0)},  # nccl-tests#150 (2 x 1 A100)
    },
}

# NCCL tuner constants, LL protocol (src/graph/tuning.cc).
_BASE_RING, _BASE_TREE = 6.6, 6.8
_NVL_HOP = 0.6
_NET_RING, _NET_TREE = 2.7, 5.0


def _model_latency_us(kind: str, ranks: int, nodes: int) -> float:
    """NCCL's LL-protocol latency estimate for `kind` on `ranks` ranks over `nodes` nodes."""
    per_node = ranks / nodes
    net_hop = _NET_TREE if per_node <= 1 else _NET_RING  # tuning.cc: ppn == 1 uses Tree's
    if kind == "all_reduce":
        steps, inter = 2 * (ranks - 1), 2 * (nodes - 1)
        ring = _BASE_RING + (steps - inter) * _NVL_HOP + inter * net_hop
        tree = _BASE_TREE + 2 * ((per_node - 1) * _NVL_HOP + math.log2(nodes) * _NET_TREE)
        return min(ring, tree)
    steps, inter = ranks - 1, nodes - 1
    return _BASE_RING + (steps - inter) * _NVL_HOP + inter * net_hop


def _latency_offsets(net: str) -> dict:
    """Per (scope, 'ring' | 'all_reduce'): measured minus NCCL's model at the anchors."""
    anchors = _LATENCY_ANCHORS[net]
    n, us = anchors["intra"]["all_reduce"]
    intra_ar = us - _model_latency_us("all_reduce", n, 1)
    if "ring" in anchors["intra"]:
        n, us = anchors["intra"]["ring"]
        intra_ring = us - _model_latency_us("all_gather", n, 1)
    else:
        intra_ring = intra_ar
    ranks, nodes, us = anchors["cross"]["all_reduce"]
    # The network's fixed cost beyond the model; never below the intra-node offset.
    extra = max(0.0, us - _model_latency_us("all_reduce", ranks, nodes) - intra_ar)
    return {("intra", "all_reduce"): intra_ar, ("intra", "ring"): intra_ring,
            ("cross", "all_reduce"): intra_ar + extra, ("cross", "ring"): intra_ring + extra}


_OFFSETS = {net: _latency_offsets(net) for net in _LATENCY_ANCHORS}


def _latency_of(net: str, kind: str, ranks: int, nodes: int) -> float:
    scope = "intra" if nodes == 1 else "cross"
    family = "all_reduce" if kind == "all_reduce" else "ring"
    return _model_latency_us(kind, ranks, nodes) + _OFFSETS[net][(scope, family)]


# ---------------------------------------------------------------------------
# The size ramp: the sweep's bandwidth term (its latency removed), relative to 8 GiB.

def _factor(kind: str, n: int) -> float:
    return (2.0 if kind == "all_reduce" else 1.0) * (n - 1) / n


def _ramp_table(net: str) -> tuple:
    lat_s = _latency_of(net, "all_reduce", GPUS_PER_NODE, 1) / 1e6
    f = _factor("all_reduce", GPUS_PER_NODE)
    wire = []
    for size, busbw in zip(_SWEEP_SIZES, _SWEEPS[net]):
        t = size * f / (busbw * 1e9)
        if t <= lat_s:
            raise AssertionError(f"{net} sweep at {size} B is faster than its latency")
        wire.append(size * f / (t - lat_s) / 1e9)
    for i in range(1, len(wire)):  # log-log interpolation keeps time monotone iff this holds
        if wire[i] / wire[i - 1] >= _SWEEP_SIZES[i] / _SWEEP_SIZES[i - 1]:
            raise AssertionError(f"{net} sweep: time falls between {_SWEEP_SIZES[i - 1]} and {_SWEEP_SIZES[i]} B")
    return tuple(w / wire[-1] for w in wire)


_RAMPS = {net: _ramp_table(net) for net in _SWEEPS}


def _ramp(net: str, nbytes: float) -> float:
    ramp = _RAMPS[net]
    if nbytes <= _SWEEP_SIZES[0]:
        return ramp[0]
    if nbytes >= _SWEEP_SIZES[-1]:
        return ramp[-1]
    x = math.log2(nbytes)
    i = int(x) - 20  # the sweep's sizes are 2**20 .. 2**33
    a = x - int(x)
    return math.exp((1 - a) * math.log(ramp[i]) + a * math.log(ramp[i + 1]))


# ---------------------------------------------------------------------------
# Peaks solved from the anchors.

def _solve_peak(net: str, kind: str, nodes: int, nbytes: int, busbw: float) -> float:
    ranks = GPUS_PER_NODE * nodes
    f = _factor(kind, ranks)
    t = nbytes * f / (busbw * 1e9)
    bw_time = t - _latency_of(net, kind, ranks, nodes) / 1e6
    return nbytes * f / (bw_time * _ramp(net, nbytes)) / 1e9


_PEAKS = {key: [(nodes, _solve_peak(key[0], key[1], nodes, size, bw)) for nodes, size, bw in rows]
          for key, rows in _ANCHORS.items()}


def _peak_gbps(net: str, kind: str, ranks: int, nodes: int, per_node: float) -> float:
    rows = _PEAKS[(net, kind)]
    if nodes == 1:
        peak = rows[0][1]
        if net == "hopper" and kind == "all_reduce" and ranks < GPUS_PER_NODE:
            peak *= _NVLS_BY_RANKS.get(ranks, _NVLS_BY_RANKS[2]) / _NVLS_BY_RANKS[GPUS_PER_NODE]
        return peak
    cross = rows[1:]
    if nodes <= cross[0][0]:
        peak = cross[0][1]
    elif nodes >= cross[-1][0]:
        peak = cross[-1][1]
    else:
        for (n0, p0), (n1, p1) in zip(cross, cross[1:]):
            if n0 <= nodes <= n1:
                a = math.log(nodes / n0) / math.log(n1 / n0)
                peak = (1 - a) * p0 + a * p1
                break
    if per_node < GPUS_PER_NODE:  # fewer rails in use than the anchors had
        peak = min(peak, per_node * _RAIL_GBPS[net])
    return peak


# ---------------------------------------------------------------------------
# The API.

def _check(kind, nbytes, group_size, gpu, gpus_per_node):
    if kind not in KINDS:
        raise ValueError(f"kind: {kind!r} is not one of {KINDS}")
    if not isinstance(gpu, str) or gpu.lower() not in _NETWORK:
        raise ValueError(f"gpu: {gpu!r} is not one of {tuple(_NETWORK)}")
    out = []
    for name, value, low in (("nbytes", nbytes, 0), ("group_size", group_size, 1),
                             ("gpus_per_node", gpus_per_node, 1)):
        try:
            if isinstance(value, bool):
                raise TypeError
            value = operator.index(value)
        except TypeError:
            raise ValueError(f"{name}: expected an integer, got {value!r}") from None
        if value < low:
            raise ValueError(f"{name}: expected an integer >= {low}, got {value}")
        out.append(value)
    return (_NETWORK[gpu.lower()], *out)


def _layout(group_size: int, gpus_per_node: int) -> tuple[int, float]:
    """(nodes, ranks per node) of a group: one node when it fits, else packed nodes."""
    if group_size <= gpus_per_node:
        return 1, float(group_size)
    nodes = math.ceil(group_size / gpus_per_node)
    return nodes, group_size / nodes


def _seconds(net: str, kind: str, nbytes: int, group_size: int, gpus_per_node: int) -> float:
    if group_size == 1 or nbytes == 0:
        return 0.0
    nodes, per_node = _layout(group_size, gpus_per_node)
    latency = _latency_of(net, kind, group_size, nodes) / 1e6
    peak = _peak_gbps(net, kind, group_size, nodes, per_node)
    return latency + nbytes * _factor(kind, group_size) / (peak * _ramp(net, nbytes) * 1e9)


def collective_ms(kind: str, nbytes: int, group_size: int, gpu: str, gpus_per_node: int = 8) -> float:
    """Milliseconds of one NCCL `kind` ("all_gather", "reduce_scatter", "all_reduce") whose
    larger side is `nbytes`, over `group_size` ranks of `gpu` ("a100", "h100", "h200") in
    nodes of `gpus_per_node` ranks of the group. A group of one costs nothing."""
    net, nbytes, group_size, gpus_per_node = _check(kind, nbytes, group_size, gpu, gpus_per_node)
    return _seconds(net, kind, nbytes, group_size, gpus_per_node) * 1e3


def bus_gbps(kind: str, nbytes: int, group_size: int, gpu: str, gpus_per_node: int = 8) -> float:
    """nccl-tests' bus bandwidth (GB/s, 1e9 bytes/s) of that collective: nbytes * factor /
    time, latency included; 0 for a group of one or no bytes."""
    net, nbytes, group_size, gpus_per_node = _check(kind, nbytes, group_size, gpu, gpus_per_node)
    seconds = _seconds(net, kind, nbytes, group_size, gpus_per_node)
    if seconds == 0.0:
        return 0.0
    return nbytes * _factor(kind, group_size) / seconds / 1e9


def _latency_us(kind: str, group_size: int, gpu: str, gpus_per_node: int = 8) -> float:
    """The latency term (us) of a group: its small-message time."""
    net, _, group_size, gpus_per_node = _check(kind, 0, group_size, gpu, gpus_per_node)
    if group_size == 1:
        return 0.0
    nodes, _ = _layout(group_size, gpus_per_node)
    return _latency_of(net, kind, group_size, nodes)
