"""``nvidia-smi topo -m`` parsing on sample outputs of several driver generations."""

from __future__ import annotations

import itertools
import re

import pytest

from tests.helpers import FIXTURES
from toposcope.errors import ConfigError
from toposcope.topology.model import LinkType, Topology
from toposcope.topology.nvidia_smi import build_from_nvidia_smi_topo

SAMPLES = FIXTURES / "nvidia-smi"


def _load(name: str) -> Topology:
    return build_from_nvidia_smi_topo((SAMPLES / name).read_text(encoding="utf-8"), source=name)


def _links(topo: Topology) -> dict[tuple[int, int], str]:
    return {(link.gpu, link.peer_gpu): link.link for link in topo.gpu_links}


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES.glob("*.txt")))
def test_every_ordered_gpu_pair_has_one_link(name: str) -> None:
    topo = _load(name)
    indices = [g.index for g in topo.gpus]
    assert indices == list(range(len(indices)))
    assert sorted(_links(topo)) == sorted(itertools.permutations(indices, 2))
    assert len(topo.gpu_links) == len(indices) * (len(indices) - 1)
    assert all(g.pci_bus_id is None for g in topo.gpus)
    assert all(n.memory_bytes == 0 for n in topo.numa_nodes)


def test_dgx_a100_nvlink_mesh_nics_skipped() -> None:
    topo = _load("dgx-a100.txt")
    assert len(topo.gpus) == 8  # ten mlx5 NIC rows and columns are not GPUs
    assert set(_links(topo).values()) == {"NV12"}
    assert all(link.type is LinkType.NVLINK for link in topo.gpu_links)
    assert [g.numa_node for g in topo.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert topo.gpus[0].local_cpus == (*range(48, 64), *range(176, 192))
    nodes = {n.id: n for n in topo.numa_nodes}
    assert sorted(nodes) == [1, 3, 5, 7]
    assert nodes[5].cpus == (*range(80, 96), *range(208, 224))
    assert all(n.package is None and not n.distances for n in topo.numa_nodes)


def test_pcie_box_across_two_sockets() -> None:
    topo = _load("pcie-4gpu-2socket.txt")
    links = _links(topo)
    assert links[(0, 1)] == links[(1, 0)] == "PIX"
    assert links[(2, 3)] == links[(3, 2)] == "NODE"
    assert links[(0, 2)] == links[(3, 1)] == "SYS"
    link = topo.gpu_link(0, 2)
    assert link is not None and link.type is LinkType.SYS
    assert [g.numa_node for g in topo.gpus] == [0, 0, 1, 1]
    assert [(n.id, n.cpus) for n in topo.numa_nodes] == [
        (0, (*range(24), *range(48, 72))),
        (1, (*range(24, 48), *range(72, 96))),
    ]
    assert topo.cpu_to_node()[50] == 0


def test_legacy_soc_is_sys_and_no_node_is_invented() -> None:
    topo = _load("legacy-soc.txt")
    links = _links(topo)
    assert links[(0, 2)] == "SYS"  # printed as SOC by drivers before 2017
    assert links[(2, 3)] == "PXB" and links[(1, 0)] == "PIX"
    assert all(g.numa_node is None for g in topo.gpus)
    assert topo.numa_nodes == ()
    assert topo.gpus[2].local_cpus == (*range(10, 20), *range(30, 40))


def test_no_legend_no_nic() -> None:
    topo = _load("no-legend-no-nic.txt")
    assert _links(topo) == {(0, 1): "NV4", (1, 0): "NV4"}
    assert [(n.id, len(n.cpus)) for n in topo.numa_nodes] == [(0, 32)]


def test_gpu_numa_id_adds_memory_only_nodes() -> None:
    topo = _load("gh200-2gpu-gpu-numa-id.txt")
    assert [g.numa_node for g in topo.gpus] == [0, 1]
    nodes = {n.id: n for n in topo.numa_nodes}
    assert sorted(nodes) == [0, 1, 2, 10]
    assert nodes[2].cpu_less and nodes[10].cpu_less
    assert nodes[1].cpus == tuple(range(72, 144))
    assert _links(topo)[(1, 0)] == "NV18"


def test_ansi_colours_and_crlf_do_not_matter() -> None:
    plain = (SAMPLES / "pcie-4gpu-2socket.txt").read_text(encoding="utf-8")
    coloured = re.sub(r"\b(GPU\d|mlx5_\d)\b", "\x1b[1m\\1\x1b[0m", plain)
    coloured = coloured.replace(" X ", "\x1b[4m X \x1b[0m").replace("\n", "\r\n")
    assert coloured != plain
    assert build_from_nvidia_smi_topo(coloured).to_dict() == (
        build_from_nvidia_smi_topo(plain).to_dict()
    )


def test_text_around_the_matrix_is_ignored() -> None:
    text = "$ nvidia-smi topo -m\n\n" + (SAMPLES / "no-legend-no-nic.txt").read_text()
    topo = build_from_nvidia_smi_topo(text + "\n$ echo done\ndone\n", source="ticket-1234")
    assert len(topo.gpus) == 2 and topo.source == "ticket-1234"


def test_json_contract() -> None:
    data = _load("no-legend-no-nic.txt").to_dict()
    # the original keys first, in their order; NICs were added after them (none here)
    assert list(data) == [
        "packages",
        "numa_nodes",
        "pci_devices",
        "gpus",
        "gpu_links",
        "nics",
        "gpu_nic_links",
    ]
    assert data["nics"] == [] and data["gpu_nic_links"] == []
    assert data["gpus"][0] == {
        "index": 0,
        "pci_bus_id": None,
        "numa_node": 0,
        "local_cpus": list(range(32)),
    }
    assert data["gpu_links"][0] == {"gpu": 0, "peer_gpu": 1, "link": "NV4"}


# ------------------------------------------------------------------------------ errors

HEADER = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no header line starting with GPU0"),
        ("No devices were found\n", "no header line starting with GPU0"),
        ("GPU0\t X \tNV4\t0-31\t0\n", "line 1: matrix row before any header"),
        (HEADER + "GPU0\t X \tNV4\t0-31\n", "line 2: row GPU0 has 3 cells, expected 4"),
        (HEADER + "GPU0\t X \tNV4\t0-31\t0\nGPU1\tNV4\t X \t0-31\n", "line 3: row GPU1"),
        (HEADER + "GPU0\t X \tFOO\t0-31\t0\nGPU1\tNV4\t X \t0-31\t0\n", "line 2: unknown link"),
        (HEADER + "GPU0\t X \tNV4\t0-31\t0\nGPU7\tNV4\t X \t0-31\t0\n", "line 3: row 'GPU7'"),
        (HEADER + "GPU0\tNV4\tNV4\t0-31\t0\n", "line 2: row GPU0 has no X on the diagonal"),
        (HEADER + "GPU0\t X \tNV4\t0-31\t0\n", "no row for GPU1"),
        (HEADER + "GPU0\t X \tNV4\tall\t0\nGPU1\tNV4\t X \t0-31\t0\n", "line 2: CPU Affinity"),
        (HEADER + "GPU0\t X \tNV4\t0-31\tzero\nGPU1\tNV4\t X \t0-31\t0\n", "line 2: NUMA"),
        ("\tGPU0\tCPU Affinity\tGPU1\n", "line 1: column 'GPU1' after the affinity columns"),
    ],
)
def test_malformed_text_raises_config_error_with_the_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        build_from_nvidia_smi_topo(text, source="topo.txt")
    assert str(raised.value).startswith("topo.txt")
    assert message in str(raised.value)


def test_nic_rows_may_stop_after_the_link_columns() -> None:
    text = (
        "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tSYS\tPIX\t0-7\t0\t\tN/A\n"
        "GPU1\tSYS\t X \tSYS\t8-15\t1\t\tN/A\n"
        "NIC0\tPIX\tSYS\t X \n"
    )
    topo = build_from_nvidia_smi_topo(text)
    assert [g.numa_node for g in topo.gpus] == [0, 1]
    assert [n.id for n in topo.numa_nodes] == [0, 1]


def test_affinity_spanning_nodes_or_not_available() -> None:
    text = HEADER + "GPU0\t X \tSYS\t0-15\t0-1\nGPU1\tSYS\t X \tN/A\tN/A\n"
    topo = build_from_nvidia_smi_topo(text)
    assert [g.numa_node for g in topo.gpus] == [None, None]
    assert topo.gpus[1].local_cpus == ()
    assert topo.numa_nodes == ()
