"""The fake NVML of a simulated node describes its NVLinks as the machine has them: direct
peers with their link counts where there is no NVSwitch, NVSwitches where there are."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import HWLOC_XML
from tests.sim.test_metrics import parse
from toposcope.sim.cluster import SimCluster
from toposcope.sim.nodefs import SimExporters
from toposcope.sim.nvml_descriptions import fake_nvml_description
from toposcope.sim.templates import builtin_template, template_from_hwloc_xml


def _link_info(tmp_path: Path, template_name: str, node: str) -> dict[tuple[str, str], str]:
    cluster = SimCluster(scheduler="none")
    if template_name == "power8":
        template = template_from_hwloc_xml(HWLOC_XML / "power8gpudistances.xml", "power8")
    else:
        template = builtin_template(template_name)
    cluster.add_node(node, template)
    exporters = SimExporters(cluster, tmp_path, background=False)
    try:
        samples = parse(exporters.scrape(node))
    finally:
        exporters.close()
    return {
        (labels["gpu"], labels["peer_gpu"]): labels["link"]
        for labels, _ in samples["toposcope_gpu_link_info"]
    }


def test_imported_power8_shows_nv2_pairs_and_no_nvswitch(tmp_path: Path) -> None:
    links = _link_info(tmp_path, "power8", "p8-01")
    assert links[("0", "1")] == links[("2", "3")] == "NV2"
    assert links[("1", "0")] == links[("3", "2")] == "NV2"
    for a, b in (("0", "2"), ("0", "3"), ("1", "2"), ("1", "3")):
        assert links[(a, b)] == "SYS"
    template = template_from_hwloc_xml(HWLOC_XML / "power8gpudistances.xml", "power8")
    description = fake_nvml_description(template)
    assert description["nvswitches"] == []
    peers = {g["pci_bus_id"]: g["nvlinks"] for g in description["gpus"]}
    assert all(len(links) == 2 and len(set(links)) == 1 for links in peers.values())
    assert all(links[0] in peers for links in peers.values())  # every remote is a GPU


def test_dgx_keeps_its_nvswitches(tmp_path: Path) -> None:
    links = _link_info(tmp_path, "dgx-a100", "dgx-01")
    nv = {pair: label for pair, label in links.items() if label.startswith("NV")}
    assert len(nv) == 8 * 7 and set(nv.values()) == {"NV12"}
    assert len(fake_nvml_description(builtin_template("dgx-a100"))["nvswitches"]) == 6
