"""The NVML layer on its own: back-off schedule, parsing helpers, processes, GPU topology."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import pynvml
import pytest

from toposcope.errors import SourceError
from toposcope.exporters import topology_cli
from toposcope.exporters.gpu_source import merge_nvml_topology
from toposcope.fake_nvml import FakeNvml, FakeProcess, ManualClock
from toposcope.host.nvml import (
    NvmlDevices,
    NvmlNotReady,
    NvmlUnavailable,
    mig_profile,
    words_to_ids,
)
from toposcope.topology.model import Gpu, Topology
from toposcope.topology.nvml import (
    NvLinkRemote,
    NvmlGpuRecord,
    build_gpu_topology,
    level_label,
    normalise_pci_bus_id,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),
        (b"00000000:BD:00.0\x00", "0000:bd:00.0"),
        ("0000:07:00.0", "0000:07:00.0"),
        ("0001:C4:1F.7", "0001:c4:1f.7"),
        ("3b:00.0", "0000:3b:00.0"),
    ],
)
def test_pci_bus_ids_are_normalised_to_sysfs_form(raw: str | bytes, expected: str) -> None:
    assert normalise_pci_bus_id(raw) == expected


def test_parsing_helpers() -> None:
    assert words_to_ids([0b1011, 0, 1]) == (0, 1, 3, 128)
    assert mig_profile("NVIDIA A100-SXM4-80GB MIG 3g.40gb") == "3g.40gb"
    assert mig_profile("NVIDIA A100-SXM4-80GB") == ""
    assert level_label(pynvml.NVML_TOPOLOGY_HOSTBRIDGE) == "PHB"
    assert level_label(pynvml.NVML_TOPOLOGY_SYSTEM) == "SYS"


def test_backoff_doubles_up_to_the_cap(fake_machine: Callable[[str], FakeNvml]) -> None:
    clock = ManualClock()
    fake = fake_machine("pcie-4gpu")
    fake.add_fault("nvmlInit", "DRIVER_NOT_LOADED")
    devices = NvmlDevices(fake, clock=clock, backoff_initial=1.0, backoff_max=60.0)
    attempts: list[float] = []
    while clock() <= 250:
        before = fake.call_count("nvmlInit")
        with pytest.raises(NvmlNotReady):
            devices.ensure_ready()
        if fake.call_count("nvmlInit") > before:
            attempts.append(clock())
        clock.advance(0.5)
    assert attempts == [0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 63.0, 123.0, 183.0, 243.0]
    fake.clear_faults()
    clock.advance(60.0)
    assert len(devices.ensure_ready()) == 4


def test_missing_library_is_no_data_and_stays_so() -> None:
    devices = NvmlDevices(pynvml)
    for _ in range(2):
        with pytest.raises(NvmlUnavailable, match="not found"):
            devices.ensure_ready()
    assert devices.gpu_processes() == []


def test_unhealthy_error_without_a_gpu_fails_the_call(
    fake_machine: Callable[[str], FakeNvml],
) -> None:
    fake = fake_machine("pcie-4gpu")
    fake.add_fault("nvmlDeviceGetCount", "UNKNOWN", times=1)
    devices = NvmlDevices(fake, clock=ManualClock())
    with pytest.raises(NvmlNotReady) as caught:
        devices.ensure_ready()
    assert isinstance(caught.value.__cause__, SourceError)


def test_error_through_a_stale_handle_does_not_reinitialise_again(
    fake_machine: Callable[[str], FakeNvml],
) -> None:
    clock = ManualClock()
    fake = fake_machine("pcie-4gpu")
    devices = NvmlDevices(fake, clock=clock)
    old = devices.ensure_ready()[0]
    fake.add_fault("nvmlDeviceGetPowerUsage", "UNINITIALIZED", times=1)
    with pytest.raises(NvmlNotReady):
        devices.read_snapshot(old)
    clock.advance(1.0)
    devices.ensure_ready()
    fake.add_fault("nvmlDeviceGetTemperature", "UNINITIALIZED", times=1)
    # a thread still holding the old generation's handle hits the error: ignored as stale
    with pytest.raises(NvmlNotReady):
        devices.call(
            "nvmlDeviceGetTemperature",
            old.handle,
            0,
            gpu=0,
            generation=old.generation,
        )
    assert devices.devices_if_ready() != []


def test_processes_merge_compute_and_graphics(fake_machine: Callable[[str], FakeNvml]) -> None:
    fake = fake_machine("pcie-4gpu")
    fake.set_processes(
        1,
        [
            FakeProcess(10, 1000, "compute"),
            FakeProcess(10, 3000, "graphics"),
            FakeProcess(11, None, "compute"),
            FakeProcess(12, None, "compute"),
            FakeProcess(12, 500, "graphics"),
        ],
    )
    devices = NvmlDevices(fake, clock=ManualClock())
    found = {(p.pid, p.gpu, p.used_bytes) for p in devices.gpu_processes()}
    assert found == {(10, 1, 3000), (11, 1, None), (12, 1, 500)}


def test_older_driver_without_v3_process_calls(fake_machine: Callable[[str], FakeNvml]) -> None:
    fake = fake_machine("mig")
    fake.add_fault("nvmlDeviceGetComputeRunningProcesses", "FUNCTION_NOT_FOUND")
    devices = NvmlDevices(fake, clock=ManualClock())
    # the fake has no _v2 either: processes go absent, nothing fails
    assert devices.gpu_processes() == []


def test_gpu_topology_dgx_and_pcie(fake_machine: Callable[[str], FakeNvml]) -> None:
    dgx = NvmlDevices(fake_machine("dgx-a100"), clock=ManualClock())
    gpus, links = dgx.gpu_topology()
    assert len(gpus) == 8 and len(links) == 56
    assert {link.link for link in links} == {"NV12"}
    assert gpus[4].pci_bus_id == "0000:87:00.0" and gpus[4].numa_node == 3
    pcie = NvmlDevices(fake_machine("pcie-4gpu"), clock=ManualClock())
    matrix = {(link.gpu, link.peer_gpu): link.link for link in pcie.gpu_topology()[1]}
    assert matrix[(0, 1)] == "PIX" and matrix[(2, 3)] == "NODE"
    assert matrix[(0, 2)] == "SYS" and matrix[(3, 1)] == "SYS"


def test_nvlink_counts_direct_and_through_switches() -> None:
    a = NvmlGpuRecord(
        0,
        "0000:01:00.0",
        nvlinks=(
            *(NvLinkRemote(i, "0000:02:00.0", False) for i in range(4)),
            NvLinkRemote(4, "0000:99:00.0", True),
        ),
    )
    b = NvmlGpuRecord(
        1, "0000:02:00.0", nvlinks=tuple(NvLinkRemote(i, "0000:01:00.0", False) for i in range(4))
    )
    c = NvmlGpuRecord(2, "0000:03:00.0", nvlinks=(NvLinkRemote(0, "0000:99:00.0", None),))
    _, links = build_gpu_topology([a, b, c], {(0, 2): 50, (1, 2): 40})
    matrix = {(link.gpu, link.peer_gpu): link.link for link in links}
    assert matrix[(0, 1)] == "NV4" and matrix[(1, 0)] == "NV4"
    assert matrix[(0, 2)] == "NV1" and matrix[(2, 0)] == "NV1"
    assert matrix[(1, 2)] == "NODE"


def test_merge_keeps_sysfs_locality(fake_machine: Callable[[str], FakeNvml]) -> None:
    sysfs = Topology(
        gpus=(
            Gpu(0, "0000:17:00.0", 1, (24, 25), vendor=0x10DE),
            Gpu(1, "0000:05:00.0", 0, (0, 1), vendor=0x1002),
        ),
        source="sysfs:/x",
    )
    merged = merge_nvml_topology(sysfs, "fake:pcie-4gpu")
    assert merged.source == "sysfs:/x+nvml"
    by_bus = {g.pci_bus_id: g for g in merged.gpus}
    assert by_bus["0000:17:00.0"].numa_node == 1  # sysfs wins
    assert by_bus["0000:17:00.0"].model == "NVIDIA L40S"
    assert by_bus["0000:05:00.0"].index == 4  # a GPU NVML does not see is kept
    assert merged.gpu_link(0, 1) is not None and merged.gpu_link(0, 1).link == "PIX"  # type: ignore[union-attr]


def _topology_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    topology_cli.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_topology_command_merges_the_fake_nvml(
    hwloc_root: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(hwloc_root("16amd64-8n2c"))
    args = _topology_args("--root", root, "--nvml", "fake:pcie-4gpu", "--format", "json")
    assert topology_cli.run(args) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [g["pci_bus_id"] for g in shown["gpus"]][:4] == [
        "0000:17:00.0",
        "0000:18:00.0",
        "0000:ca:00.0",
        "0000:e1:00.0",
    ]
    assert {"gpu": 0, "peer_gpu": 1, "link": "PIX"} in shown["gpu_links"]
    # auto never merges this host's NVML into a snapshot; off never merges
    for mode in ("auto", "off"):
        assert (
            topology_cli.run(_topology_args("--root", root, "--nvml", mode, "--format", "json"))
            == 0
        )
        assert json.loads(capsys.readouterr().out)["gpu_links"] == []
