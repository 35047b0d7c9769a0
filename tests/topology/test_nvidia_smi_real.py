"""``nvidia-smi topo -m`` parsing on real outputs quoted in public bug reports.

Each ``tests/fixtures/nvidia-smi/real-*.txt`` holds a matrix copied verbatim from the page
named on its first line (``# Source: URL``), after a few more ``#`` lines describing the
machine. The parser itself skips ``#`` lines, so the files are parsed as they are; a test
checks that stripping the comments changes nothing.

The expected values below are read off the quoted text, cell by cell: the GPU count, a few
links (both directions), one GPU's CPU affinity and every GPU's NUMA affinity (``None``
where the driver printed no such column).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from tests.helpers import FIXTURES
from toposcope.cpulist import parse_cpulist
from toposcope.errors import ConfigError
from toposcope.topology.model import LinkType, Topology
from toposcope.topology.nvidia_smi import build_from_nvidia_smi_topo

SAMPLES = FIXTURES / "nvidia-smi"
REAL = sorted(p.name for p in SAMPLES.glob("real-*.txt"))
SOURCE_LINE = re.compile(r"^# Source: https://github\.com/\S+")


@dataclass(frozen=True)
class Expected:
    """What the quoted matrix says about one machine."""

    name: str
    gpus: int
    links: dict[tuple[int, int], str]
    cpus_of: tuple[int, str]
    numa: tuple[int | None, ...]


CASES = [
    Expected(
        "real-2x-rtx5090-phb-tabs.txt",
        gpus=2,
        links={(0, 1): "PHB"},
        cpus_of=(1, "0-63"),
        numa=(0, 0),
    ),
    Expected(
        "real-2gpu-node-indented-paste.txt",
        gpus=2,
        links={(0, 1): "NODE"},
        cpus_of=(0, "0-15"),
        numa=(0, 0),
    ),
    Expected(
        "real-5gpu-two-sockets.txt",
        gpus=5,
        links={(0, 1): "SYS", (1, 2): "PHB", (2, 3): "NODE", (3, 4): "PHB", (4, 1): "NODE"},
        cpus_of=(0, "8-15,24-31"),
        numa=(1, 0, 0, 0, 0),
    ),
    Expected(
        "real-8x-h100-nv18.txt",
        gpus=8,
        links={(0, 1): "NV18", (0, 7): "NV18", (3, 4): "NV18"},
        cpus_of=(5, "48-95,144-191"),
        numa=(0, 0, 0, 0, 1, 1, 1, 1),
    ),
    Expected(
        "real-8x-rtx4090-2nic.txt",
        gpus=8,
        links={(0, 1): "SYS", (6, 7): "SYS", (3, 4): "SYS"},
        cpus_of=(6, "56-111,168-223"),
        numa=(0, 0, 0, 0, 1, 1, 1, 1),
    ),
    Expected(
        "real-8gpu-pcie-4numa-2nic.txt",
        gpus=8,
        links={(0, 1): "SYS", (4, 5): "SYS", (7, 0): "SYS"},
        cpus_of=(3, "16-31,80-95"),
        numa=(0, 0, 0, 1, 2, 2, 2, 3),
    ),
    Expected(
        "real-6gpu-2nic-2019.txt",
        gpus=6,
        links={(0, 1): "PIX", (0, 2): "NODE", (2, 3): "SYS", (3, 4): "PIX", (5, 4): "NODE"},
        cpus_of=(4, "14-27,42-55"),
        numa=(None,) * 6,
    ),
    Expected(
        "real-8gpu-pix-pxb-mlx5-2018.txt",
        gpus=8,
        links={(0, 1): "PIX", (0, 2): "PXB", (2, 3): "PIX", (3, 4): "SYS", (5, 6): "PXB"},
        cpus_of=(7, "14-27"),
        numa=(None,) * 8,
    ),
    Expected(
        "real-4x-k40m-soc-mlx4-2017.txt",
        gpus=4,
        # The text prints SOC, the pre-2017 name of SYS.
        links={(0, 1): "PHB", (0, 2): "SYS", (2, 3): "PHB", (3, 1): "SYS"},
        cpus_of=(2, "6-11"),
        numa=(None,) * 4,
    ),
]


def _text(name: str) -> str:
    return (SAMPLES / name).read_text(encoding="utf-8")


def _load(name: str) -> Topology:
    return build_from_nvidia_smi_topo(_text(name), source=name)


def _links(topo: Topology) -> dict[tuple[int, int], str]:
    return {(link.gpu, link.peer_gpu): link.link for link in topo.gpu_links}


def test_every_real_sample_has_a_case() -> None:
    assert len(REAL) >= 6
    assert sorted(case.name for case in CASES) == REAL


@pytest.mark.parametrize("name", REAL)
def test_real_sample_cites_its_source(name: str) -> None:
    first = _text(name).splitlines()[0]
    assert SOURCE_LINE.match(first), first


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_real_sample(case: Expected) -> None:
    topo = _load(case.name)
    assert [g.index for g in topo.gpus] == list(range(case.gpus))
    links = _links(topo)
    for (gpu, peer), label in case.links.items():
        assert links[(gpu, peer)] == links[(peer, gpu)] == label, (gpu, peer)
    gpu, cpulist = case.cpus_of
    assert topo.gpus[gpu].local_cpus == parse_cpulist(cpulist)
    assert tuple(g.numa_node for g in topo.gpus) == case.numa


@pytest.mark.parametrize("name", REAL)
def test_real_matrices_are_symmetric(name: str) -> None:
    links = _links(_load(name))
    assert all(links[(b, a)] == label for (a, b), label in links.items())


@pytest.mark.parametrize("name", REAL)
def test_comment_lines_change_nothing(name: str) -> None:
    text = _text(name)
    bare = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    assert build_from_nvidia_smi_topo(bare, source=name) == _load(name)


def test_numa_nodes_from_real_affinities() -> None:
    topo = _load("real-8gpu-pcie-4numa-2nic.txt")
    assert [(n.id, n.cpus) for n in topo.numa_nodes] == [
        (0, parse_cpulist("0-15,64-79")),
        (1, parse_cpulist("16-31,80-95")),
        (2, parse_cpulist("32-47,96-111")),
        (3, parse_cpulist("48-63,112-127")),
    ]
    two_sockets = _load("real-5gpu-two-sockets.txt")
    assert two_sockets.cpu_to_node()[24] == 1 and two_sockets.cpu_to_node()[16] == 0


def test_real_nvlink_and_legacy_types() -> None:
    h100 = _load("real-8x-h100-nv18.txt").gpu_link(2, 6)
    assert h100 is not None and h100.type is LinkType.NVLINK
    k40 = _load("real-4x-k40m-soc-mlx4-2017.txt").gpu_link(1, 3)
    assert k40 is not None and k40.type is LinkType.SYS


def test_nic_rows_and_columns_are_not_gpus() -> None:
    # mlx5_1 comes before mlx5_0 in this header; NIC rows end in an empty cell.
    topo = _load("real-6gpu-2nic-2019.txt")
    assert len(topo.gpus) == 6
    assert topo.numa_nodes == ()


def test_comment_between_rows_is_skipped() -> None:
    text = (
        "# a note\n\tGPU0\tGPU1\tCPU Affinity\n"
        "GPU0\t X \tNV4\t0-3\n  # between\nGPU1\tNV4\t X \t0-3\n"
    )
    topo = build_from_nvidia_smi_topo(text)
    assert _links(topo) == {(0, 1): "NV4", (1, 0): "NV4"}


def test_line_numbers_count_comment_lines() -> None:
    text = "# a note\n\tGPU0\tGPU1\nGPU0\t X \tNV4\n# between\nGPU1\tXYZ\t X \n"
    with pytest.raises(ConfigError, match="line 5: unknown link type 'XYZ'"):
        build_from_nvidia_smi_topo(text)
