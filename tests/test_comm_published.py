"""The measured comm model (benchmarks/comm_published.py) against its own published
figures: large messages reach the published bus bandwidth, small ones cost the latency,
time grows with bytes, groups across nodes are slower than inside one, an H200 is an
H100 on the network, and bad arguments name themselves."""

from __future__ import annotations

import pytest

from benchmarks import comm_published as cp

KiB, MiB, GiB = 2**10, 2**20, 2**30
GPUS = ("a100", "h100", "h200")
SIZES = sorted([0, 1, 8, 1 * KiB, 64 * KiB, 3 * MiB, 3 * GiB, 10**11] + [2**k for k in range(19, 36)])


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("kind", cp.KINDS)
@pytest.mark.parametrize("group, per_node", [(2, 8), (8, 8), (16, 8), (32, 8), (96, 8), (256, 8),
                                             (2048, 8), (32, 1), (24, 4), (16, 16)])
def test_time_grows_with_bytes(gpu, kind, group, per_node):
    times = [cp.collective_ms(kind, n, group, gpu, per_node) for n in SIZES]
    assert all(t1 >= t0 for t0, t1 in zip(times, times[1:]))
    busbw = [cp.bus_gbps(kind, n, group, gpu, per_node) for n in SIZES]
    assert all(0 <= b < 500 for b in busbw)


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("kind", cp.KINDS)
def test_across_nodes_is_slower_than_inside_one(gpu, kind):
    for size in (16 * MiB, GiB, 8 * GiB):
        inside = cp.bus_gbps(kind, size, 8, gpu)
        for group in (16, 32, 256, 1024):
            assert cp.bus_gbps(kind, size, group, gpu) < inside
    # more nodes: no faster, and a longer small-message time
    assert cp.bus_gbps(kind, 8 * GiB, 256, gpu) <= cp.bus_gbps(kind, 8 * GiB, 32, gpu)
    assert cp._latency_us(kind, 256, gpu) > cp._latency_us(kind, 16, gpu) > cp._latency_us(kind, 8, gpu)


@pytest.mark.parametrize("kind, nbytes, group, gpu, published", [
    ("all_gather", 8 * GiB, 8, "h100", 350.0),  # nccl#1281
    ("reduce_scatter", 8 * GiB, 8, "h100", 360.0),  # nccl#1281
    ("all_reduce", 8 * GiB, 8, "h200", 479.98),  # Azure ND H200 v5
    ("all_reduce", 1 * MiB, 8, "h200", 52.96),  # Azure ND H200 v5, a point of the curve
    ("all_reduce", 16 * MiB, 8, "h100", 240.41),
    ("all_reduce", 16 * GiB, 16, "h100", 470.0),  # nccl-tests#309, 2 nodes
    ("all_reduce", 16 * GiB, 32, "h100", 365.84),  # nccl-tests#309, 4 nodes
    ("all_gather", 2 * GiB, 256, "h100", 200.0),  # nccl#1218, 32 nodes
    ("all_reduce", 2 * GiB, 256, "h100", 340.0),  # nccl#1218
    ("all_reduce", 8 * GiB, 8, "a100", 231.58),  # Azure ND A100 v4
    ("all_reduce", 128 * MiB, 8, "a100", 174.18),
    ("all_gather", 8 * GiB, 8, "a100", 230.0),
    ("all_reduce", 8 * GiB, 32, "a100", 192.0),  # nccl#812
    ("reduce_scatter", 8 * GiB, 32, "a100", 192.0),  # 8 rails x 24 GB/s (nccl-tests#119)
])
def test_published_figures_are_reproduced(kind, nbytes, group, gpu, published):
    assert cp.bus_gbps(kind, nbytes, group, gpu) == pytest.approx(published, rel=0.02)


def test_large_messages_plateau_and_clamp_beyond_the_last_node_count():
    assert cp.bus_gbps("all_gather", 64 * GiB, 8, "h100") == pytest.approx(350.0, rel=0.02)
    at_32 = cp.bus_gbps("all_gather", 8 * GiB, 256, "h100")
    assert cp.bus_gbps("all_gather", 64 * GiB, 4096, "h100") == pytest.approx(at_32, rel=0.05)
    # between published node counts: between their figures
    assert 200 < cp.bus_gbps("all_gather", 8 * GiB, 128, "h100") < 346


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("kind", cp.KINDS)
@pytest.mark.parametrize("group", [2, 8, 16, 64, 512])
def test_small_messages_cost_the_latency(gpu, kind, group):
    latency_ms = cp._latency_us(kind, group, gpu) / 1e3
    assert 0.003 < latency_ms < 1.0
    for nbytes in (1, 8, 1 * KiB):
        assert cp.collective_ms(kind, nbytes, group, gpu) == pytest.approx(latency_ms, rel=0.02)
    assert cp.collective_ms(kind, 8, group, gpu) == cp.collective_ms(kind, 8, group, gpu, 8)


def test_latency_is_tens_of_microseconds_as_published():
    assert cp._latency_us("all_gather", 8, "h100") == pytest.approx(10.5)  # DeepEP#303
    assert cp._latency_us("all_reduce", 8, "h100") == pytest.approx(12.5)
    assert cp._latency_us("all_reduce", 16, "h100") == pytest.approx(47.0)  # nccl#1244
    assert cp._latency_us("all_reduce", 8, "a100") == pytest.approx(33.7)  # nccl-tests#123


def test_time_is_latency_plus_bytes_over_busbw():
    for kind, factor in (("all_gather", 15 / 16), ("reduce_scatter", 15 / 16), ("all_reduce", 30 / 16)):
        nbytes = 256 * MiB
        ms = cp.collective_ms(kind, nbytes, 16, "h100")
        assert ms == pytest.approx(nbytes * factor / (cp.bus_gbps(kind, nbytes, 16, "h100") * 1e9) * 1e3)
        assert ms > cp._latency_us(kind, 16, "h100") / 1e3


def test_h200_is_an_h100_on_the_network():
    for kind in cp.KINDS:
        for group, per_node in ((2, 8), (8, 8), (16, 8), (256, 8), (32, 1)):
            for nbytes in (8, MiB, 64 * MiB, 4 * GiB):
                assert cp.collective_ms(kind, nbytes, group, "h200", per_node) == \
                    cp.collective_ms(kind, nbytes, group, "h100", per_node)
    assert cp.bus_gbps("all_gather", GiB, 64, "a100") < cp.bus_gbps("all_gather", GiB, 64, "h100")


def test_a_group_of_one_costs_nothing_and_fits_in_a_node():
    assert cp.collective_ms("all_reduce", GiB, 1, "h100") == 0.0
    assert cp.bus_gbps("all_gather", GiB, 1, "a100") == 0.0
    assert cp.collective_ms("all_gather", 0, 8, "h100") == 0.0
    # n <= gpus_per_node: one node, whatever n
    assert cp.bus_gbps("reduce_scatter", 8 * GiB, 4, "h100") == pytest.approx(360.0, rel=0.02)
    assert cp.bus_gbps("all_gather", 8 * GiB, 8, "h100", 8) > cp.bus_gbps("all_gather", 8 * GiB, 8, "h100", 4)


def test_one_rank_per_node_runs_on_one_rail():
    for gpu, rail in (("h100", 47.0), ("a100", 24.0)):  # nccl-tests#290, #119
        for kind in cp.KINDS:
            assert cp.bus_gbps(kind, 8 * GiB, 32, gpu, 1) == pytest.approx(rail, rel=0.02)
            assert cp.bus_gbps(kind, 8 * GiB, 32, gpu, 1) < cp.bus_gbps(kind, 8 * GiB, 32, gpu, 8)


def test_nvls_all_reduce_inside_a_node_slows_for_small_groups():
    assert cp.bus_gbps("all_reduce", 8 * GiB, 4, "h100") == pytest.approx(370.0, rel=0.02)  # nccl#1455
    assert cp.bus_gbps("all_reduce", 8 * GiB, 4, "a100") == pytest.approx(231.58, rel=0.02)


@pytest.mark.parametrize("args, parameter", [
    (("broadcast", 1, 8, "h100"), "kind"),
    (("all_to_all", 1, 8, "h100"), "kind"),
    (("all_gather", -1, 8, "h100"), "nbytes"),
    (("all_gather", 1.5, 8, "h100"), "nbytes"),
    (("all_gather", 1, 0, "h100"), "group_size"),
    (("all_gather", 1, 8, "v100"), "gpu"),
    (("all_gather", 1, 8, None), "gpu"),
    (("all_gather", 1, 8, "h100", 0), "gpus_per_node"),
])
@pytest.mark.parametrize("fn", [cp.collective_ms, cp.bus_gbps])
def test_bad_arguments_name_the_parameter(fn, args, parameter):
    with pytest.raises(ValueError, match=parameter):
        fn(*args)


def test_every_figure_has_a_source():
    assert len(cp.SOURCES) >= 10
    for source in cp.SOURCES:
        assert set(source) == {"figure", "value", "url", "note"}
        assert source["url"].startswith("https://") and source["figure"] and source["value"]
    assert cp.GPUS_PER_NODE == 8
