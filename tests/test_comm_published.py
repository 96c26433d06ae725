"""The measured comm model (benchmarks/comm_published.py) against its own table:
large messages reach the published plateau, small ones cost the latency, groups
across nodes are slower than inside one, and a replica group with one rank per
node gets one NIC's share."""

from __future__ import annotations

import pytest

from benchmarks import comm_published as cp

GiB = 2**30


def test_large_messages_reach_the_published_plateau():
    for gpu, kind in (("h100", "all_gather"), ("a100", "reduce_scatter"), ("h100", "all_reduce")):
        assert cp.bus_gbps(kind, 8 * GiB, 8, gpu) == pytest.approx(cp.INTRA_NODE_GBPS[gpu][kind], rel=0.01)
    assert cp.bus_gbps("all_gather", 8 * GiB, 32, "h100") == pytest.approx(320.0, rel=0.01)  # 4 nodes
    assert cp.bus_gbps("all_gather", 8 * GiB, 256, "h100") == pytest.approx(200.0, rel=0.01)  # 32 nodes


def test_small_messages_cost_the_latency():
    assert cp.collective_ms("all_gather", 1024, 8, "h100") == pytest.approx(cp.LATENCY_US["intra"] / 1e3, rel=0.01)
    assert cp.collective_ms("all_gather", 1024, 64, "h100") > cp.collective_ms("all_gather", 1024, 8, "h100")
    # nccl-tests' 8-H100 curve: far below the plateau at 1 MiB, most of it at 32 MiB.
    assert cp.bus_gbps("all_gather", 1 << 20, 8, "h100") < 100
    assert cp.bus_gbps("all_gather", 32 << 20, 8, "h100") > 250


def test_time_grows_with_bytes_and_across_nodes():
    sizes = [1 << k for k in range(10, 34, 2)]
    times = [cp.collective_ms("reduce_scatter", n, 64, "a100") for n in sizes]
    assert times == sorted(times)
    assert cp.plateau_gbps("all_gather", 64, "h100") < cp.plateau_gbps("all_gather", 8, "h100")
    assert cp.collective_ms("all_reduce", GiB, 1, "h100") == 0.0


def test_a_replica_group_gets_one_nics_share():
    full = cp.plateau_gbps("all_reduce", 32, "h100")  # 4 nodes, 8 ranks each
    replicas = cp.plateau_gbps("all_reduce", 32, "h100", ranks_per_node=1)  # 32 nodes, 1 rank each
    assert replicas < full / 8 * 1.01
    assert cp.plateau_gbps("all_gather", 16, "h200") == cp.plateau_gbps("all_gather", 16, "h100")


@pytest.mark.parametrize("call, parameter", [
    (lambda: cp.collective_ms("broadcast", 1, 8, "h100"), "kind"),
    (lambda: cp.collective_ms("all_gather", -1, 8, "h100"), "nbytes"),
    (lambda: cp.collective_ms("all_gather", 1, 0, "h100"), "group_size"),
    (lambda: cp.collective_ms("all_gather", 1, 8, "v100"), "gpu"),
    (lambda: cp.collective_ms("all_gather", 1, 8, "h100", ranks_per_node=9), "ranks_per_node"),
])
def test_bad_input_names_the_parameter(call, parameter):
    with pytest.raises(ValueError, match=parameter):
        call()


def test_every_figure_has_a_source():
    assert cp.SOURCES and all(s["url"] and s["value"] for s in cp.SOURCES)
