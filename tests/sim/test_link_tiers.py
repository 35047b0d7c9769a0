"""Imported templates price each GPU pair by the truth's link tier of its real link."""

from __future__ import annotations

import pytest

from tests.helpers import FIXTURES, HWLOC_XML
from toposcope.rm import Allocation
from toposcope.sim.jobs import JobKind, make_job
from toposcope.sim.model import evaluate, pair_bandwidth
from toposcope.sim.nodetemplate import NodeTemplate
from toposcope.sim.templates import (
    builtin_template,
    template_from_hwloc_xml,
    template_from_topology,
)
from toposcope.sim.truth_params import truth
from toposcope.topology.model import Gpu, NumaNode, Package, PciDevice, Topology
from toposcope.topology.pcie import gpu_links


def _tiers(template: NodeTemplate) -> dict[tuple[int, int], str]:
    return {
        (a.index, b.index): template.link_tier(a.index, b.index)[0]
        for a in template.gpus
        for b in template.gpus
        if a.index < b.index
    }


def test_power8_nvlink_pairs_have_two_links_and_the_rest_cross_sockets() -> None:
    power = template_from_hwloc_xml(HWLOC_XML / "power8gpudistances.xml")
    tiers = _tiers(power)
    assert tiers == {
        (0, 1): "nvlink",
        (2, 3): "nvlink",
        (0, 2): "cross-socket",
        (0, 3): "cross-socket",
        (1, 2): "cross-socket",
        (1, 3): "cross-socket",
    }
    assert power.link_tier(0, 1) == ("nvlink", 2)
    links = truth().links
    assert pair_bandwidth(power, 0, 1) == pytest.approx(2 * links["nvlink"].value)
    assert pair_bandwidth(power, 1, 2) == pytest.approx(links["cross-socket"].value)
    assert power.link_class(0, 1) == "nvlink" and power.link_class(1, 2) == "cross-socket"
    assert {g.nvlink_group for g in power.gpus} == {"nvlink"}


def test_hgx_nvswitch_pairs_host_bridge_and_sockets() -> None:
    hgx = template_from_hwloc_xml(FIXTURES / "topology" / "hgx-nvswitch.xml")
    tiers = _tiers(hgx)
    h100 = (0, 1, 4, 5)
    for a in h100:
        for b in h100:
            if a < b:
                assert tiers[(a, b)] == "nvswitch"
    assert tiers[(0, 2)] == "host-bridge"  # PHB: the L40S under the H100s' host bridge
    assert tiers[(2, 3)] == "host-bridge"  # NODE: another root complex of NUMA node 0
    assert tiers[(2, 4)] == tiers[(3, 5)] == "cross-socket"
    assert pair_bandwidth(hgx, 0, 5) == pytest.approx(truth().links["nvswitch"].value)
    assert hgx.pcie_label(0, 2) == "PHB" and hgx.pcie_label(2, 4) == "SYS"
    assert {hgx.gpu(i).nvlink_group for i in h100} == {"nvswitch"}
    assert hgx.gpu(2).nvlink_group is None


def _switched_machine() -> Topology:
    """Four GPUs on one host bridge: 0 and 1 on one switch, 2 below a second switch
    cascaded under the first, 3 on a root port of its own."""
    node = NumaNode(0, 0, (0, 1, 2, 3), 64 * 2**30, {0: 10})
    paths = {
        "0000:03:00.0": ("0000:02:00.0", "0000:01:00.0", "0000:00:01.0"),
        "0000:04:00.0": ("0000:02:01.0", "0000:01:00.0", "0000:00:01.0"),
        "0000:07:00.0": ("0000:06:00.0", "0000:05:00.0", "0000:02:02.0", "0000:01:00.0",
                         "0000:00:01.0"),
        "0000:09:00.0": ("0000:00:02.0",),
    }  # fmt: skip
    devices = tuple(
        PciDevice(bus, 0x10DE, 0x20B5, 0x0302, 0, node.cpus, bridges, "0000:[00-0f]")
        for bus, bridges in paths.items()
    )
    gpus = tuple(Gpu(i, d.bus_id, 0, node.cpus) for i, d in enumerate(devices))
    return Topology(
        packages=(Package(0, node.cpus),),
        numa_nodes=(node,),
        pci_devices=devices,
        gpus=gpus,
        gpu_links=gpu_links(gpus, devices),
        source="test:switched",
    )


def test_pcie_switches_are_the_switch_tier_and_the_root_complex_the_host_bridge() -> None:
    template = template_from_topology("switched", _switched_machine())
    labels = {(a, b): template.pcie_label(a, b) for a, b in [(0, 1), (0, 2), (0, 3)]}
    assert labels == {(0, 1): "PIX", (0, 2): "PXB", (0, 3): "PHB"}
    assert template.link_tier(0, 1)[0] == "pcie-switch"
    assert template.link_tier(0, 2)[0] == "pcie-switch"
    assert template.link_tier(0, 3)[0] == "host-bridge"
    assert template.link_class(0, 1) == "same-switch"
    assert template.link_class(1, 3) == "cross-switch"


def test_the_model_prices_an_imported_pair_by_its_tier() -> None:
    power = template_from_hwloc_xml(HWLOC_XML / "power8gpudistances.xml")
    job = make_job("allreduce", JobKind.GPU_TRAIN, gpus=2, comm_intensity=0.8)
    linked = evaluate(job, Allocation("p8", [], [], [0, 1]), power)
    across = evaluate(job, Allocation("p8", [], [], [1, 2]), power)
    assert linked.link_class == "nvlink" and across.link_class == "cross-socket"
    assert 1.0 < linked.factors["link"] < across.factors["link"]


def test_builtin_templates_keep_their_tiers() -> None:
    pcie8 = builtin_template("pcie-8gpu-2sw")
    assert pcie8.link_tier(0, 1)[0] == "pcie-switch"
    assert pcie8.link_tier(0, 2)[0] == "host-bridge"
    assert pcie8.link_tier(0, 7)[0] == "cross-socket"
    dgx = builtin_template("dgx-a100")
    assert {dgx.link_tier(0, b)[0] for b in range(1, 8)} == {"nvswitch"}
    assert all(link.nvswitch for link in dgx.topology.gpu_links)
