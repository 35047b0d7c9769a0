"""The gpu collector over the fake NVML: families, labels, faults, lost GPUs, re-init, threads."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.gpu.conftest import gpu_series, scrape
from toposcope.catalogue import CATALOGUE, GPU_KEYS
from toposcope.config import ExporterConfig, HostPaths
from toposcope.exporters.collectors import topology as topology_collector
from toposcope.exporters.collectors.gpu import ENTRY, GpuCollector, node_hostname
from toposcope.exporters.context import CollectorContext
from toposcope.exporters.gpu_source import (
    GpuSource,
    attach_gpu_source,
    close_gpu_source,
    open_gpu_source,
)
from toposcope.fake_nvml import FakeNvml, ManualClock
from toposcope.topology.model import Gpu, Topology

Machine = Callable[[str], tuple[FakeNvml, GpuSource, GpuCollector]]

#: Labels dcgm-exporter puts on DCGM_FI_DEV_GPU_UTIL (and every per-GPU field), as of
#: dcgm-exporter 3.x: identity on every series, MIG and Kubernetes labels when they apply.
DCGM_GPU_UTIL_LABELS = (
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "Hostname",
    "DCGM_FI_DRIVER_VERSION",
    "GPU_I_ID",
    "GPU_I_PROFILE",
    "container",
    "namespace",
    "pod",
)
#: The identity labels toposcope shares with dcgm-exporter on toposcope_gpu_info.
SHARED_IDENTITY = (*GPU_KEYS, "GPU_I_ID", "GPU_I_PROFILE")
#: Families a healthy dgx-a100 GPU does not publish: A100s remap rows and retire no pages,
#: and have no GPM (Hopper and later), the only source of the activity ratios.
NOT_ON_A100 = (
    "toposcope_gpu_retired_pages",
    "toposcope_gpu_retired_pages_pending",
    "toposcope_gpu_sm_active_ratio",
    "toposcope_gpu_sm_occupancy_ratio",
    "toposcope_gpu_tensor_active_ratio",
    "toposcope_gpu_dram_active_ratio",
)


def test_every_gpu_family_is_published(collector_for: Machine) -> None:
    _, source, collector = collector_for("dgx-a100")
    source.start_background()
    assert source.pcie is not None and source.pcie.wait_for_rounds(1, 10)
    registry = scrape(("gpu", collector))
    names = {s.name for f in registry.collect() for s in f.samples}
    expected = {
        name
        for name in CATALOGUE
        if name.startswith("toposcope_gpu_")
        # sysfs-side family (topology collector); XIDs only once one happened
        and name
        not in (
            "toposcope_gpu_locality_info",
            "toposcope_gpu_nic_link_info",
            "toposcope_gpu_pcie_link_speed_transfers_per_second",  # pcie_link collector
            "toposcope_gpu_pcie_link_width_lanes",
            "toposcope_gpu_xid_errors_total",
        )
        and name not in NOT_ON_A100
    }
    assert expected <= names, expected - names
    assert not names & set(NOT_ON_A100), "not supported must mean absent, not zero"
    get = registry.get_sample_value
    assert get("toposcope_scrape_collector_success", {"collector": "gpu"}) == 1.0
    assert get("toposcope_gpu_up", {"gpu": "7"}) == 1.0
    assert get("toposcope_gpu_utilization_ratio", {"gpu": "0"}) == pytest.approx(0.35)
    assert get("toposcope_gpu_memory_total_bytes", {"gpu": "0"}) == 85899345920
    assert get("toposcope_gpu_power_watts", {"gpu": "0"}) == pytest.approx(182.0)
    assert get("toposcope_gpu_power_limit_watts", {"gpu": "0"}) == pytest.approx(400.0)
    assert get("toposcope_gpu_energy_joules_total", {"gpu": "0"}) == pytest.approx(5e6)
    assert get("toposcope_gpu_clock_hertz", {"gpu": "0", "clock": "sm"}) == 1.41e9
    assert get("toposcope_gpu_clock_hertz", {"gpu": "0", "clock": "memory"}) == 1.593e9
    assert get("toposcope_gpu_clock_event_active", {"gpu": "5", "reason": "sw_power_cap"}) == 1
    assert get("toposcope_gpu_clock_event_active", {"gpu": "4", "reason": "sw_power_cap"}) == 0
    assert get("toposcope_gpu_pcie_bytes_per_second", {"gpu": "0", "direction": "tx"}) == (
        1250000 * 1024
    )
    assert get("toposcope_gpu_pcie_sample_age_seconds", {"gpu": "0"}) == 0.0
    assert (
        get(
            "toposcope_gpu_ecc_errors_total",
            {"gpu": "0", "error_type": "corrected", "counter": "aggregate"},
        )
        == 2
    )
    assert get("toposcope_gpu_nvlink_up", {"gpu": "3", "link": "11"}) == 1
    assert get("toposcope_gpu_link_info", {"gpu": "0", "peer_gpu": "7", "link": "NV12"}) == 1
    assert get("toposcope_gpu_locality_mismatch_total", {"gpu": "0"}) == 0
    info = {
        "gpu": "0",
        "UUID": "GPU-5d1a8c2e-07a1-4f3e-9b6c-1e0d2a3b4c01",
        "pci_bus_id": "00000000:07:00.0",
        "device": "nvidia0",
        "modelName": "NVIDIA A100-SXM4-80GB",
        "Hostname": node_hostname(),
        "numa_node": "1",
        "cpu_affinity": "32-63,160-191",
        "driver_version": "535.129.03",
        "mig_mode": "disabled",
        "GPU_I_ID": "",
        "GPU_I_PROFILE": "",
    }
    assert get("toposcope_gpu_info", info) == 1.0


def test_label_names_match_dcgm_exporter(collector_for: Machine) -> None:
    _, _, collector = collector_for("mig")
    registry = scrape(("gpu", collector))
    info_labels = [
        set(s.labels)
        for f in registry.collect()
        for s in f.samples
        if s.name == "toposcope_gpu_info"
    ]
    assert info_labels
    for labels in info_labels:
        assert set(SHARED_IDENTITY) <= labels
        assert set(SHARED_IDENTITY) <= set(DCGM_GPU_UTIL_LABELS)
    dcgm_lower = {name.lower(): name for name in DCGM_GPU_UTIL_LABELS}
    for family in registry.collect():
        for sample in family.samples:
            for label in sample.labels:
                # where a label means a dcgm-exporter one it is spelled exactly the same
                if label.lower() in dcgm_lower and label != "hostname":
                    assert label == dcgm_lower[label.lower()], (sample.name, label)
            if sample.name.startswith("toposcope_gpu_"):
                # every GPU series carries dcgm-exporter's join keys, declared in its order
                assert set(GPU_KEYS) <= set(sample.labels), sample
                assert CATALOGUE[sample.name].labels[: len(GPU_KEYS)] == GPU_KEYS
                assert sample.labels["device"] == f"nvidia{sample.labels['gpu']}"
                assert re.fullmatch(
                    r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]", (sample.labels["pci_bus_id"])
                ), sample


def test_mig_instances_get_dcgm_style_labels(collector_for: Machine) -> None:
    _, _, collector = collector_for("mig")
    registry = scrape(("gpu", collector))
    rows = [
        s.labels for f in registry.collect() for s in f.samples if s.name == "toposcope_gpu_info"
    ]
    instances = sorted((r["GPU_I_ID"], r["GPU_I_PROFILE"]) for r in rows if r["gpu"] == "0")
    assert instances == [("", ""), ("1", "3g.40gb"), ("13", "1g.10gb"), ("5", "2g.20gb")]
    assert {r["mig_mode"] for r in rows if r["gpu"] == "0"} == {"enabled"}
    assert {r["UUID"] for r in rows if r["gpu"] == "0"} == {
        "GPU-1f2e3d4c-0001-4a5b-8c7d-9e0f1a2b3c01"
    }
    assert [(r["GPU_I_ID"], r["mig_mode"]) for r in rows if r["gpu"] == "1"] == [("", "disabled")]
    # a GPU in MIG mode has no whole-GPU utilization: the sample is skipped, never NaN
    assert registry.get_sample_value("toposcope_gpu_utilization_ratio", {"gpu": "0"}) is None
    assert registry.get_sample_value("toposcope_gpu_utilization_ratio", {"gpu": "1"}) == 0.4
    assert registry.get_sample_value("toposcope_gpu_up", {"gpu": "0"}) == 1


@pytest.mark.parametrize("error", ["GPU_IS_LOST", "UNKNOWN", "TIMEOUT"])
def test_unhealthy_gpu_drops_all_its_series(collector_for: Machine, error: str) -> None:
    fake, _, collector = collector_for("dgx-a100")
    fake.add_fault("nvmlDeviceGetTemperatureV", error, gpu=3, after=1)
    first = scrape(("gpu", collector))
    assert first.get_sample_value("toposcope_gpu_temperature_celsius", {"gpu": "3"}) == 41
    second = scrape(("gpu", collector))
    get = second.get_sample_value
    assert get("toposcope_scrape_collector_success", {"collector": "gpu"}) == 1
    assert get("toposcope_gpu_up", {"gpu": "3"}) == 0
    assert gpu_series(second, "3") == {"toposcope_gpu_up", "toposcope_gpu_info"}
    assert get("toposcope_gpu_up", {"gpu": "2"}) == 1
    assert get("toposcope_gpu_temperature_celsius", {"gpu": "2"}) == 41
    assert len(gpu_series(second, "2")) > 10


def test_gpu_lost_between_two_scrapes_and_back(collector_for: Machine) -> None:
    fake, source, collector = collector_for("dgx-a100")
    before = scrape(("gpu", collector))
    assert before.get_sample_value("toposcope_gpu_up", {"gpu": "6"}) == 1
    assert "toposcope_gpu_power_watts" in gpu_series(before, "6")
    fake.lose_gpu(6)
    lost = scrape(("gpu", collector))
    assert lost.get_sample_value("toposcope_gpu_up", {"gpu": "6"}) == 0
    assert gpu_series(lost, "6") == {"toposcope_gpu_up", "toposcope_gpu_info"}
    # identity stays joinable while the GPU is lost
    uuid_rows = [
        s.labels["UUID"]
        for f in lost.collect()
        for s in f.samples
        if s.name == "toposcope_gpu_info" and s.labels["gpu"] == "6"
    ]
    assert uuid_rows == ["GPU-5d1a8c2e-b7a1-4f3e-9b6c-1e0d2a3b4c07"]
    for other in ("0", "5", "7"):
        assert lost.get_sample_value("toposcope_gpu_up", {"gpu": other}) == 1
        assert "toposcope_gpu_power_watts" in gpu_series(lost, other)
    # links of a lost GPU are not served either
    assert (
        lost.get_sample_value(
            "toposcope_gpu_link_info", {"gpu": "6", "peer_gpu": "0", "link": "NV12"}
        )
        is None
    )
    assert source.gpu_processes() and {p.gpu for p in source.gpu_processes()} == {
        0,
        1,
        2,
        3,
        4,
        5,
        7,
    }
    fake.clear_faults()
    back = scrape(("gpu", collector))
    assert back.get_sample_value("toposcope_gpu_up", {"gpu": "6"}) == 1
    assert "toposcope_gpu_power_watts" in gpu_series(back, "6")


@pytest.mark.parametrize("error", ["NOT_SUPPORTED", "NO_PERMISSION"])
def test_absent_value_is_skipped_and_logged_once(
    collector_for: Machine, error: str, caplog: pytest.LogCaptureFixture
) -> None:
    fake, _, collector = collector_for("pcie-4gpu")
    fake.add_fault("nvmlDeviceGetPowerUsage", error, gpu=2)
    with caplog.at_level(logging.INFO, logger="toposcope.exporter.nvml"):
        registries = [scrape(("gpu", collector)) for _ in range(3)]
    for registry in registries:
        assert registry.get_sample_value("toposcope_gpu_power_watts", {"gpu": "2"}) is None
        assert registry.get_sample_value("toposcope_gpu_power_watts", {"gpu": "1"}) == 95
        assert registry.get_sample_value("toposcope_gpu_up", {"gpu": "2"}) == 1
        assert (
            registry.get_sample_value("toposcope_scrape_collector_success", {"collector": "gpu"})
            == 1
        )
    logged = [r for r in caplog.records if "nvmlDeviceGetPowerUsage" in r.getMessage()]
    assert len(logged) == 1 and "gpu=2" in logged[0].getMessage()
    calls = fake.call_count("nvmlDeviceGetPowerUsage", 2)
    # NOT_SUPPORTED is remembered; a permission may be granted later, so it is asked again
    assert calls == (1 if error == "NOT_SUPPORTED" else 3)


def test_function_not_found_falls_back_or_goes_absent(
    collector_for: Machine, caplog: pytest.LogCaptureFixture
) -> None:
    fake, _, collector = collector_for("dgx-a100")
    fake.add_fault("nvmlDeviceGetCurrentClocksEventReasons", "FUNCTION_NOT_FOUND")
    fake.add_fault("nvmlDeviceGetTotalEnergyConsumption", "FUNCTION_NOT_FOUND")
    fake.add_fault("nvmlDeviceGetTemperatureV", "FUNCTION_NOT_FOUND")
    with caplog.at_level(logging.INFO, logger="toposcope.exporter.nvml"):
        first = scrape(("gpu", collector))
        scrape(("gpu", collector))
    # the older ...ThrottleReasons call answers instead
    assert (
        first.get_sample_value(
            "toposcope_gpu_clock_event_active", {"gpu": "5", "reason": "sw_power_cap"}
        )
        == 1
    )
    assert fake.call_count("nvmlDeviceGetCurrentClocksThrottleReasons") == 16
    assert fake.call_count("nvmlDeviceGetCurrentClocksEventReasons") == 1
    assert first.get_sample_value("toposcope_gpu_temperature_celsius", {"gpu": "7"}) == 41
    assert fake.call_count("nvmlDeviceGetTemperatureV") == 1
    # a function the driver lacks is absent on every GPU and never asked again
    assert first.get_sample_value("toposcope_gpu_energy_joules_total", {"gpu": "0"}) is None
    assert fake.call_count("nvmlDeviceGetTotalEnergyConsumption") == 1
    assert len([r for r in caplog.records if "TotalEnergy" in r.getMessage()]) == 1


def test_nvml_library_missing_leaves_the_rest_of_the_exporter(
    hwloc_root: Callable[[str], Path], caplog: pytest.LogCaptureFixture
) -> None:
    # the real bindings on a host without libnvidia-ml raise NVMLError_LibraryNotFound
    config = ExporterConfig(paths=HostPaths.under(hwloc_root("16amd64-8n2c")), nvml="auto")
    ctx = CollectorContext(config)
    with caplog.at_level(logging.INFO):
        attach_gpu_source(ctx)
    try:
        assert ctx.nvml is not None and ctx.nvml.devices is None
        assert "not found" in ctx.nvml.reason
        assert ctx.gpu_processes is None
        assert len([r for r in caplog.records if "collector=gpu" in r.getMessage()]) == 1
        registry = scrape(
            ("topology", topology_collector.ENTRY.factory(ctx)), ("gpu", ENTRY.factory(ctx))
        )
        get = registry.get_sample_value
        assert get("toposcope_scrape_collector_success", {"collector": "gpu"}) == 0
        assert get("toposcope_scrape_collector_success", {"collector": "topology"}) == 1
        published = {f.name for f in registry.collect() if f.name.startswith("toposcope_gpu_")}
        assert published <= {"toposcope_gpu_locality_info"}  # the sysfs side, not NVML
    finally:
        close_gpu_source(ctx)


def test_nvml_off_reports_no_data() -> None:
    source = open_gpu_source("off")
    registry = scrape(("gpu", GpuCollector(source)))
    assert (
        registry.get_sample_value("toposcope_scrape_collector_success", {"collector": "gpu"}) == 0
    )
    assert source.gpu_processes() == []


@pytest.mark.parametrize("error", ["DRIVER_NOT_LOADED", "UNINITIALIZED", "LIB_RM_VERSION_MISMATCH"])
def test_reinitialisation_with_backoff(
    fake_machine: Callable[[str], FakeNvml],
    gpu_source: Callable[..., GpuSource],
    clock: ManualClock,
    error: str,
) -> None:
    fake = fake_machine("pcie-4gpu")
    source = gpu_source(fake)
    collector = GpuCollector(source)

    def success() -> float | None:
        return scrape(("gpu", collector)).get_sample_value(
            "toposcope_scrape_collector_success", {"collector": "gpu"}
        )

    assert success() == 1 and fake.call_count("nvmlInit") == 1
    fake.add_fault("nvmlDeviceGetPowerUsage", error, gpu=1, times=1)
    fake.add_fault("nvmlInit", "DRIVER_NOT_LOADED", times=1)
    assert success() == 0  # marked for re-initialisation at t=0
    clock.advance(0.5)
    assert success() == 0 and fake.call_count("nvmlInit") == 1  # back-off: not yet
    clock.advance(0.5)
    assert success() == 0 and fake.call_count("nvmlInit") == 2  # t=1: tried, failed
    clock.advance(1.9)
    assert success() == 0 and fake.call_count("nvmlInit") == 2  # next try waits 2 s
    clock.advance(0.1)
    assert success() == 1 and fake.call_count("nvmlInit") == 3  # t=3: back
    assert fake.call_count("nvmlShutdown") >= 1


def test_pcie_sampling_never_delays_the_scrape(
    fake_machine: Callable[[str], FakeNvml],
    gpu_source: Callable[..., GpuSource],
    clock: ManualClock,
) -> None:
    fake = fake_machine("pcie-4gpu")
    gate = fake.hold("nvmlDeviceGetPcieThroughput")
    source = gpu_source(fake, pcie_period=1.0)
    collector = GpuCollector(source)
    source.start_background()
    assert source.pcie is not None
    assert gate.entered.wait(10)  # the sampler is now stuck inside the NVML call
    registry = scrape(("gpu", collector))
    # the scrape came back while the sampler is still blocked, without PCIe rates
    assert not gate.released and source.pcie.rounds == 0
    assert registry.get_sample_value("toposcope_gpu_up", {"gpu": "0"}) == 1
    assert (
        registry.get_sample_value(
            "toposcope_gpu_pcie_bytes_per_second", {"gpu": "0", "direction": "tx"}
        )
        is None
    )
    gate.release()
    assert source.pcie.wait_for_rounds(1, 10)
    fresh = scrape(("gpu", collector))
    assert (
        fresh.get_sample_value(
            "toposcope_gpu_pcie_bytes_per_second", {"gpu": "2", "direction": "rx"}
        )
        == 1500000 * 1024
    )
    assert fresh.get_sample_value("toposcope_gpu_pcie_sample_age_seconds", {"gpu": "2"}) == 0
    assert source.pcie.stop()
    clock.advance(source.pcie.max_age + 0.5)
    stale = scrape(("gpu", collector))
    # an old sample is not served as a rate; its age still is
    assert (
        stale.get_sample_value(
            "toposcope_gpu_pcie_bytes_per_second", {"gpu": "2", "direction": "rx"}
        )
        is None
    )
    assert stale.get_sample_value(
        "toposcope_gpu_pcie_sample_age_seconds", {"gpu": "2"}
    ) == pytest.approx(source.pcie.max_age + 0.5)


def test_xid_counter_from_fake_events(
    fake_machine: Callable[[str], FakeNvml], gpu_source: Callable[..., GpuSource]
) -> None:
    fake = fake_machine("dgx-a100")
    source = gpu_source(fake, xid_wait_ms=20)
    collector = GpuCollector(source)
    source.start_background()
    assert source.xid is not None and source.xid.wait_until_watching(10)
    fake.emit_xid(3, 79)
    fake.emit_xid(3, 79)
    fake.emit_xid(1, 48)
    assert source.xid.wait_for_events(3, 10)
    registry = scrape(("gpu", collector))
    get = registry.get_sample_value
    assert get("toposcope_gpu_xid_errors_total", {"gpu": "3", "xid": "79"}) == 2
    assert get("toposcope_gpu_xid_errors_total", {"gpu": "1", "xid": "48"}) == 1
    assert get("toposcope_gpu_xid_errors_total", {"gpu": "0", "xid": "79"}) is None
    # XID 79 (fallen off the bus) and then lost: the count is still served with gpu_up 0
    fake.lose_gpu(3)
    lost = scrape(("gpu", collector))
    assert lost.get_sample_value("toposcope_gpu_up", {"gpu": "3"}) == 0
    assert lost.get_sample_value("toposcope_gpu_xid_errors_total", {"gpu": "3", "xid": "79"}) == 2


def test_xid_watcher_survives_nvml_errors(
    fake_machine: Callable[[str], FakeNvml], gpu_source: Callable[..., GpuSource]
) -> None:
    fake = fake_machine("pcie-4gpu")
    fake.add_fault("nvmlEventSetCreate", "UNKNOWN", times=1)
    source = gpu_source(fake, xid_wait_ms=20)
    source.start_background()
    assert source.xid is not None
    # the first event set fails; the watcher backs off (1 s) and builds a new one
    assert source.xid.wait_until_watching(10)
    fake.emit_xid(2, 31)
    assert source.xid.wait_for_events(1, 10)
    assert source.xid.counts() == {(2, 31): 1}
    assert fake.call_count("nvmlEventSetCreate") == 2


def test_locality_mismatch_counts_and_sysfs_wins(
    fake_machine: Callable[[str], FakeNvml], clock: ManualClock
) -> None:
    fake = fake_machine("pcie-4gpu")
    # sysfs puts GPU 2 (0000:ca:00.0) on node 0 while NVML says node 1
    sysfs = Topology(
        gpus=(
            Gpu(0, "0000:17:00.0", 0, tuple(range(24)) + tuple(range(48, 72))),
            Gpu(1, "0000:ca:00.0", 0, tuple(range(24)) + tuple(range(48, 72))),
        )
    )
    source = open_gpu_source("fake", backend=fake, clock=clock, topology=lambda: sysfs)
    try:
        collector = GpuCollector(source)
        for _ in range(2):
            registry = scrape(("gpu", collector))
        get = registry.get_sample_value
        assert get("toposcope_gpu_locality_mismatch_total", {"gpu": "2"}) == 2
        assert get("toposcope_gpu_locality_mismatch_total", {"gpu": "0"}) == 0
        rows = {
            s.labels["gpu"]: s.labels
            for f in registry.collect()
            for s in f.samples
            if s.name == "toposcope_gpu_info"
        }
        assert rows["2"]["numa_node"] == "0" and rows["2"]["cpu_affinity"] == "0-23,48-71"
        assert rows["3"]["numa_node"] == "1"  # sysfs does not know it: NVML's view
    finally:
        source.close()


def test_attach_gives_the_workloads_collector_gpu_processes(
    hwloc_root: Callable[[str], Path],
) -> None:
    config = ExporterConfig(paths=HostPaths.under(hwloc_root("16amd64-8n2c")), nvml="fake:mig")
    ctx = CollectorContext(config)
    attach_gpu_source(ctx)
    try:
        assert ctx.gpu_processes is ctx.nvml
        assert ctx.gpu_processes is not None
        processes = sorted(ctx.gpu_processes.gpu_processes(), key=lambda p: p.pid)
        assert [(p.pid, p.gpu, p.used_bytes) for p in processes] == [
            (7001, 0, 12884901888),
            (7002, 0, None),
        ]
        collector = ENTRY.factory(ctx)
        assert ctx.nvml is not None and ctx.nvml.pcie is not None and ctx.nvml.pcie.running
        registry = scrape(("gpu", collector))
        assert registry.get_sample_value("toposcope_gpu_up", {"gpu": "1"}) == 1
    finally:
        close_gpu_source(ctx)
    assert ctx.nvml.pcie is not None and not ctx.nvml.pcie.running
