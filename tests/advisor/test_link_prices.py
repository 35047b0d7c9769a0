"""Link prices: GPU pairs priced by their bandwidth (NVLink count and generation, PCIe
generation, width and path), measured prices from a file, and the tier fallback.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.advisor.builders import cluster, gpu, links_from_groups, numa_nodes, pcie8, workload
from toposcope.advisor.gpu_sets import LINK_FACTOR, place, rank_sets
from toposcope.advisor.link_prices import (
    REFERENCE_GBPS,
    Measured,
    generations,
    pcie_gbps,
    pcie_generation,
)
from toposcope.advisor.model import NodeModel, PendingWorkload
from toposcope.advisor.p2p_matrix import (
    P2pOption,
    parse_option,
    read_p2p_file,
    with_measured_links,
)
from toposcope.advisor.policies.gpu_placement import GpuPlacement
from toposcope.advisor.policies.job_migration import JobMigration
from toposcope.errors import UsageError
from toposcope.topology.model import LinkType

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "p2p"


def named(node: NodeModel, model: str) -> NodeModel:
    """``node`` with every GPU of ``model``."""
    return replace(node, gpus=tuple(replace(g, model=model) for g in node.gpus))


def nvlinked(labels: dict[tuple[int, int], str], model: str) -> NodeModel:
    """4 GPUs on one socket, PCIe NODE between all, NVLinks as ``labels`` say."""
    placement = {g: 0 for g in range(4)}
    links = links_from_groups(placement, [])
    for (a, b), label in labels.items():
        links[(a, b)] = links[(b, a)] = label
    gpus = tuple(gpu(g, 0, model=model) for g in placement)
    return NodeModel("nv", numa_nodes(), gpus, links)


def test_model_names_give_the_link_generations() -> None:
    assert generations("NVIDIA A100-SXM4-80GB") == (3, 4)
    assert generations("NVIDIA H100 80GB HBM3") == (4, 5)
    assert generations("Tesla V100-SXM2-16GB") == (2, 3)
    assert generations("NVIDIA L40S") == (None, 4)
    assert generations("some accelerator") == (None, None)
    assert pcie_generation(16.0) == 4 and pcie_generation(3.0) is None
    assert pcie_gbps(4, 16) == pytest.approx(31.5, abs=0.05)


def test_healthy_pcie_paths_of_the_reference_rate_keep_the_tier_factors() -> None:
    node = named(pcie8(), "NVIDIA A100-PCIE-40GB")
    pairs = {(0, 1): LinkType.PIX, (0, 2): LinkType.NODE, (0, 4): LinkType.SYS}
    for (a, b), link in pairs.items():
        price = node.prices.pair(a, b)
        assert price.source == "topology", price
        assert price.factor == LINK_FACTOR[link], (link, price)  # exactly: same decisions


def test_a_node_of_one_bond_width_keeps_the_nvlink_tier_price() -> None:
    node = nvlinked(
        {pair: "NV12" for pair in [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]}, "A100-SXM4"
    )
    assert {node.prices.pair(a, b).factor for a in range(4) for b in range(4) if a != b} == {
        LINK_FACTOR[LinkType.NVLINK]
    }


def test_without_a_model_or_pcie_figures_the_tier_prices_stand() -> None:
    price = pcie8().prices.pair(0, 4)
    assert (price.source, price.factor, price.gbps) == ("tier", 2.0, None)


def test_the_nvlink_count_prices_a_pair() -> None:
    node = nvlinked({(0, 1): "NV4", (2, 3): "NV12"}, "NVIDIA A100-SXM4-80GB")
    nv4, nv12 = node.prices.pair(0, 1), node.prices.pair(2, 3)
    assert (nv4.gbps, nv12.gbps) == (100.0, 300.0)
    assert nv12.factor < nv4.factor < LINK_FACTOR[LinkType.PIX]
    assert nv12.factor == LINK_FACTOR[LinkType.NVLINK]  # the node's widest bond: the tier
    assert nv4.factor == pytest.approx(
        0.8 * (0.6 + 0.4 * REFERENCE_GBPS / 100) / (0.6 + 0.4 * REFERENCE_GBPS / 300)
    )
    assert nv12.detail == "NV12: 12 x 25 GB/s (NVLink 3)"
    [best, *_] = rank_sets(node, range(4), 2)  # the lower indexes lose to the wider bond
    assert best.gpus == (2, 3) and best.price == nv12


def test_a_link_that_trained_down_is_priced_by_its_width_and_speed() -> None:
    node = named(pcie8(), "NVIDIA A100-PCIE-40GB")
    slow = replace(node.gpus[0], pcie_gts=8.0, pcie_lanes=8)
    node = replace(node, gpus=(slow, *node.gpus[1:]))
    narrow = node.prices.pair(0, 1)
    assert narrow.gbps == pytest.approx(pcie_gbps(3, 8))
    assert narrow.factor > 1.0 and "PCIe Gen3 x8" in narrow.detail
    free = [0, 1, 2, 3]
    [best, *_] = rank_sets(node, free, 2)
    assert best.gpus == (2, 3)  # the healthy switch pair, though (0, 1) comes first by index


def test_a_faster_pcie_generation_is_cheaper_across_nodes() -> None:
    gen4 = named(pcie8("a"), "NVIDIA A100-PCIE-40GB")
    gen5 = named(pcie8("b"), "NVIDIA H100 PCIe")
    assert gen5.prices.pair(0, 1).factor < gen4.prices.pair(0, 1).factor == pytest.approx(1.0)
    [best, *_] = place(cluster([gen4, gen5]), 2)
    assert best.node == "b"


def test_sys_within_one_package_costs_less_than_across_sockets() -> None:
    # 4 NUMA nodes on 2 packages: GPUs 0 and 1 on NUMA 0 and 1 (package 0), 2 on NUMA 2
    numa = tuple(replace(n, package=n.id // 2) for n in numa_nodes(4))
    placement = {0: 0, 1: 1, 2: 2}
    links = {(a, b): "SYS" for a in placement for b in placement if a != b}
    gpus = tuple(gpu(g, n, model="NVIDIA L40S") for g, n in placement.items())
    node = NodeModel("epyc", numa, gpus, links)
    die, socket = node.prices.pair(0, 1), node.prices.pair(0, 2)
    assert LINK_FACTOR[LinkType.NODE] < die.factor < socket.factor == pytest.approx(2.0)
    assert "within one package" in die.detail


def test_nvbandwidth_output_is_read_as_measured_pairs() -> None:
    found = read_p2p_file(FIXTURES / "nvbandwidth-a6000-d2d-read-ce.txt")
    assert len(found.pairs) == 30
    assert found.pairs[(0, 1)].gbps == 26.34 and found.pairs[(5, 1)].gbps == 22.67
    assert found.pairs[(3, 0)].origin.endswith("nvbandwidth-a6000-d2d-read-ce.txt:13")


def test_measured_prices_replace_the_topology_and_anchor_on_a_measured_switch_pair() -> None:
    node = named(pcie8(), "NVIDIA A100-PCIE-40GB")
    option = P2pOption("n8", read_p2p_file(FIXTURES / "pairs.txt"))
    model = with_measured_links(cluster([node]), [option])
    prices = model.nodes["n8"].prices
    switch, slow = prices.pair(0, 1), prices.pair(2, 3)
    assert switch.source == slow.source == "measured"
    assert switch.gbps == 23.5  # the slower direction
    assert switch.factor == pytest.approx(1.0)  # the best measured switch pair anchors 1.0
    assert slow.factor == pytest.approx(0.6 + 0.4 * 23.5 / 20.0)
    assert "pairs.txt:4" in switch.detail
    assert prices.pair(0, 2).source == "topology"  # N/A: not measured
    assert prices.nominal_gbps is not None
    assert prices.anchor_gbps == pytest.approx(23.5 * REFERENCE_GBPS / prices.nominal_gbps)


def test_a_measurement_naming_a_gpu_the_node_lacks_is_refused() -> None:
    option = P2pOption("n*", read_p2p_file(FIXTURES / "nvbandwidth-a6000-d2d-read-ce.txt"))
    small = NodeModel("n1", numa_nodes(), (gpu(0, 0), gpu(1, 0)), {})
    with pytest.raises(UsageError, match=r"\.txt:\d+: node n1 has no GPU 2"):
        with_measured_links(cluster([small]), [option])


def test_a_glob_matching_no_node_is_a_note() -> None:
    option = P2pOption("dgx-*", read_p2p_file(FIXTURES / "pairs.txt"))
    model = with_measured_links(cluster([pcie8()]), [option])
    assert any("no node with GPUs matches 'dgx-*'" in n for n in model.notes)
    assert not model.nodes["n8"].measured_bandwidth


def test_the_placement_gain_model_names_its_prices() -> None:
    node = nvlinked({(0, 1): "NV4", (2, 3): "NV12"}, "NVIDIA A100-SXM4-80GB")
    model = cluster([node], pending=[PendingWorkload("job", 2)])
    [rec] = GpuPlacement().evaluate(model).recommendations
    assert "first-fit topology (NV4: 4 x 25 GB/s (NVLink 3), against the node's" in rec.gain_model
    assert "ours topology (NV12: 12 x 25 GB/s (NVLink 3))" in rec.gain_model
    assert rec.proposed["link_price"]["source"] == "topology"
    assert rec.estimated_gain == pytest.approx(
        node.prices.pair(0, 1).factor / node.prices.pair(2, 3).factor - 1
    )


def test_a_move_from_nv4_to_nv12_is_priced_and_says_so() -> None:
    node = nvlinked({(0, 1): "NV4", (2, 3): "NV12"}, "NVIDIA A100-SXM4-80GB")
    job = workload("train", node="nv", gpus=[0, 1])
    evaluation = JobMigration().evaluate(cluster([node], [job]))
    [rec] = [r for r in evaluation.recommendations if r.target.workload == "train"]
    assert rec.proposed["gpus"] == [2, 3]
    assert rec.current["link_price"]["gbps"] == 100.0
    assert rec.proposed["link_price"]["gbps"] == 300.0
    assert "link prices: now topology (NV4" in rec.gain_model


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0 1 fast\n", r":1: 'fast' is not a bandwidth"),
        ("0 1 -3\n", r":1: '-3' is not a bandwidth between 0"),
        ("0 1 nan\n", r":1: 'nan' is not a bandwidth between"),
        ("0 1 0\n", r":1: 0 GB/s from GPU 0 to 1"),
        ("0 0 12\n", r":1: GPU 0 to itself"),
        ("0 1 12\n0 1 13\n", r":2: GPU 0 to 1 again \(.*:1\)"),
        ("# only comments\n", r"no GPU pair with a figure"),
        ("0 1 12 13\n", r":1: matrix header 0 1 12 13: not the GPU indexes 0-3"),
        ("0 1 12 x\n", r":1: not a pair line"),
        ("9999 1 12\n", r":1: '9999' is not a GPU index"),
        (
            "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)\n     0     1\n0  12  13\n",
            r":1: a host matrix",
        ),
        ("memcpy CE GPU(row) <-> GPU(column) bandwidth (GB/s)\n", r":1: a bidirectional"),
        ("Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)\n", r":1: Bidirectional P2P=En"),
        ("P2P=Enabled Latency (P2P Writes) Matrix (us)\n", r":1: a latency matrix"),
        ("   D\\D  0  1  2  3\n 0  N/A  1  2  3\n 1  1  N/A  2\n", r":3: GPU 1's row has 3"),
        ("   D\\D  0  2  1  3\n", r":1: matrix header 0 2 1 3: not the GPU"),
        (
            "   D\\D  0  1  2  3\n 0 N/A 1 2 3\n\n   D\\D  0  1  2  3\n",
            r":4: a second matrix",
        ),
    ],
)
def test_bad_files_are_refused_with_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(UsageError, match=message):
        read_p2p_file(path)


def test_bad_options_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is not NODE=FILE"):
        parse_option("n1")
    with pytest.raises(UsageError, match="is not a node name or glob"):
        parse_option(f"n/1={FIXTURES / 'pairs.txt'}")
    with pytest.raises(UsageError, match="not a file"):
        parse_option(f"n1={tmp_path}")


def test_measured_is_kept_per_direction() -> None:
    node = replace(
        pcie8(),
        measured_bandwidth={(4, 5): Measured(30.0, "f:1"), (5, 4): Measured(10.0, "f:2")},
    )
    assert node.prices.pair(5, 4).gbps == 10.0 and node.prices.pair(4, 5).detail.endswith("(f:2)")
