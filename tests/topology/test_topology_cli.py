"""``toposcope topology``: every input, both formats, and exit code 2 on bad input."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import FIXTURES, HWLOC_XML
from toposcope.cli import main

KEYS = {
    "packages": {"id", "cpus"},
    "numa_nodes": {"id", "package", "cpus", "memory_bytes", "distances"},
    "pci_devices": {"bus_id", "vendor", "device", "class", "numa_node", "local_cpus"},
    "gpus": {"index", "pci_bus_id", "numa_node", "local_cpus"},
    "gpu_links": {"gpu", "peer_gpu", "link"},
    "nics": {"name", "pci_bus_id", "kind", "numa_nodes", "cpus", "interfaces", "ports"},
    "gpu_nic_links": {"gpu", "nic", "link"},
}


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, Any]:
    assert main(["topology", *argv, "--format", "json"]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert list(data) == list(KEYS)
    for key, fields in KEYS.items():
        for item in data[key]:
            assert set(item) == fields, key
    return data


def test_json_from_a_snapshot_root(
    capsys: pytest.CaptureFixture[str], snapshot: Callable[[str], Path]
) -> None:
    data = _json(capsys, ["--root", str(snapshot("32intel64-2p8co2t+8ve"))])
    assert [n["id"] for n in data["numa_nodes"]] == [0, 1]
    assert data["numa_nodes"][0]["distances"] == [10, 21]
    assert data["numa_nodes"][0]["cpus"] == [*range(8), *range(16, 24)]
    assert [p["id"] for p in data["packages"]] == [0, 1]
    nic = next(d for d in data["pci_devices"] if d["bus_id"] == "0000:1a:00.0")
    assert nic == {
        "bus_id": "0000:1a:00.0",
        "vendor": "0x15b3",
        "device": "0x1013",
        "class": "0x0207",
        "numa_node": 0,
        "local_cpus": [*range(8), *range(16, 24)],
    }
    assert data["gpus"] == [] and data["gpu_links"] == []


def test_path_options_select_sysfs_and_procfs(
    capsys: pytest.CaptureFixture[str], snapshot: Callable[[str], Path]
) -> None:
    root = snapshot("2arm-2c")
    argv = ["--path.sysfs", str(root / "sys"), "--path.procfs", str(root / "proc")]
    data = _json(capsys, argv)
    assert data["numa_nodes"][0]["memory_bytes"] == 280840 * 1024


def test_text_format(capsys: pytest.CaptureFixture[str], snapshot: Callable[[str], Path]) -> None:
    assert main(["topology", "--root", str(snapshot("16amd64-8n2c"))]) == 0
    out = capsys.readouterr().out
    assert "NUMA node 7: package 7, cpus 14-15" in out
    assert "NUMA distances:" in out


def test_missing_root_exits_2_with_a_clear_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "--root", "/nonexistent-toposcope-root", "--format", "json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "sysfs root /nonexistent-toposcope-root/sys does not exist" in captured.err


def test_hwloc_xml(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, ["--hwloc-xml", str(HWLOC_XML / "power8gpudistances.xml")])
    assert [g["numa_node"] for g in data["gpus"]] == [0, 0, 1, 1]
    assert data["numa_nodes"][1]["distances"] == [40, 10]
    links = {(link["gpu"], link["peer_gpu"]): link["link"] for link in data["gpu_links"]}
    assert links[(0, 1)] == links[(2, 3)] == "NV2" and links[(1, 2)] == "SYS"


def test_hwloc_xml_text_shows_the_nvlink_matrix(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "--hwloc-xml", str(HWLOC_XML / "power8gpudistances.xml")]) == 0
    out = capsys.readouterr().out
    rows = out.split("GPU links:\n", 1)[1].splitlines()
    assert rows[0].split() == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert rows[1].split() == ["GPU0", "X", "NV2", "SYS", "SYS"]
    assert rows[4].split() == ["GPU3", "SYS", "SYS", "NV2", "X"]


def test_hwloc_xml_text_names_the_nvswitch_set(capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "topology" / "hgx-nvswitch.xml"
    assert main(["topology", "--hwloc-xml", str(path)]) == 0
    out = capsys.readouterr().out
    assert "NV18" in out and "PHB" in out and "NODE" in out
    assert "NVSwitch: GPU0, GPU1, GPU4, GPU5 reach each other through NVSwitches" in out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<topology><object", "is not well-formed XML"),
        ("<topology/>", "no <object> under <topology>"),
    ],
)
def test_malformed_hwloc_xml_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "bad.xml"
    path.write_text(text, encoding="utf-8")
    assert main(["topology", "--hwloc-xml", str(path)]) == 2
    err = capsys.readouterr().err
    assert "toposcope topology: error:" in err and "bad.xml" in err and message in err


def test_missing_hwloc_xml_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["topology", "--hwloc-xml", str(tmp_path / "none.xml")]) == 2
    assert "none.xml does not exist" in capsys.readouterr().err


def test_nvidia_smi_topo_file(capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "nvidia-smi" / "dgx-a100.txt"
    data = _json(capsys, ["--nvidia-smi-topo", str(path)])
    assert len(data["gpus"]) == 8 and len(data["gpu_links"]) == 56
    assert data["gpus"][7] == {
        "index": 7,
        "pci_bus_id": None,
        "numa_node": 5,
        "local_cpus": [*range(80, 96), *range(208, 224)],
    }


def test_nvidia_smi_topo_text_format(capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "nvidia-smi" / "pcie-4gpu-2socket.txt"
    assert main(["topology", "--nvidia-smi-topo", str(path)]) == 0
    out = capsys.readouterr().out
    assert "GPU links:" in out and "NODE" in out
    assert f"Topology from nvidia-smi:{path}" in out


def test_nvidia_smi_topo_from_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (FIXTURES / "nvidia-smi" / "legacy-soc.txt").read_text(encoding="utf-8")
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    data = _json(capsys, ["--nvidia-smi-topo", "-"])
    assert {link["link"] for link in data["gpu_links"]} == {"PIX", "PXB", "SYS"}


def test_malformed_nvidia_smi_topo_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "topo.txt"
    path.write_text("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\n", encoding="utf-8")
    assert main(["topology", "--nvidia-smi-topo", str(path)]) == 2
    err = capsys.readouterr().err
    assert "topo.txt line 3: row GPU1 has 1 cells, expected 2" in err


def test_missing_nvidia_smi_topo_file_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["topology", "--nvidia-smi-topo", str(tmp_path / "none.txt")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_inputs_are_mutually_exclusive(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["topology", "--root", str(tmp_path), "--hwloc-xml", str(tmp_path / "x.xml")])
    assert exited.value.code == 2
