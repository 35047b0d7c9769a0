"""``gpu`` collector: NVIDIA GPUs over NVML, with dcgm-exporter's label names.

Identity and locality go on ``toposcope_gpu_info`` only (``gpu``, ``UUID``, ``pci_bus_id``,
``modelName``, ``numa_node``, ``cpu_affinity``, ``driver_version``, ``mig_mode``, and
``GPU_I_ID`` / ``GPU_I_PROFILE`` on one extra row per MIG instance); value series carry
``gpu`` and the one label they need, so PromQL joins them to ``_info`` or to dcgm-exporter's
``DCGM_FI_*`` series on ``gpu`` or ``UUID``. ``pci_bus_id`` is written as sysfs writes it
(``0000:07:00.0``), so that it also joins ``toposcope_gpu_locality_info`` and
``toposcope_pci_device_info``.

A reading NVML does not have is skipped (never NaN). A GPU that is lost, times out or
fails with an unknown error shows ``toposcope_gpu_up 0`` and none of its readings that
scrape; its identity row and the XID counter (kept by the exporter, and most wanted exactly
then) stay. With ``--nvml off`` or no NVML library the collector reports no data.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from toposcope.catalogue import nonempty, spec
from toposcope.cpulist import format_cpulist
from toposcope.errors import NoDataError
from toposcope.exporters.context import CollectorContext
from toposcope.exporters.gpu_source import GpuSource, attach_gpu_source
from toposcope.exporters.registry import CollectorEntry
from toposcope.exporters.sources.nvml import GpuSnapshot

_VALUE_FAMILIES = (
    "toposcope_gpu_up",
    "toposcope_gpu_utilization_ratio",
    "toposcope_gpu_memory_utilization_ratio",
    "toposcope_gpu_memory_used_bytes",
    "toposcope_gpu_memory_total_bytes",
    "toposcope_gpu_power_watts",
    "toposcope_gpu_power_limit_watts",
    "toposcope_gpu_energy_joules_total",
    "toposcope_gpu_temperature_celsius",
    "toposcope_gpu_clock_hertz",
    "toposcope_gpu_clock_event_active",
    "toposcope_gpu_pcie_bytes_per_second",
    "toposcope_gpu_pcie_sample_age_seconds",
    "toposcope_gpu_xid_errors_total",
    "toposcope_gpu_ecc_errors_total",
    "toposcope_gpu_nvlink_up",
    "toposcope_gpu_link_info",
    "toposcope_gpu_locality_mismatch_total",
)


def _label(value: int | None) -> str:
    return "" if value is None else str(value)


def info_labels(snapshot: GpuSnapshot, driver_version: str) -> list[list[str]]:
    """Label values of the ``toposcope_gpu_info`` rows of one GPU, in the catalogue's order.

    One row for the GPU itself (empty ``GPU_I_ID``/``GPU_I_PROFILE``) and one per MIG
    instance, as dcgm-exporter reports MIG devices.
    """
    names = spec("toposcope_gpu_info").labels
    base = {
        "gpu": str(snapshot.index),
        "UUID": snapshot.uuid or "",
        "pci_bus_id": snapshot.pci_bus_id or "",
        "modelName": snapshot.name or "",
        "numa_node": _label(snapshot.numa_node),
        "cpu_affinity": format_cpulist(snapshot.cpu_affinity),
        "driver_version": driver_version,
        "mig_mode": snapshot.mig_mode or "",
        "GPU_I_ID": "",
        "GPU_I_PROFILE": "",
    }
    rows = [[base[name] for name in names]]
    for instance in snapshot.mig_instances:
        row = {
            **base,
            "GPU_I_ID": str(instance.gpu_instance_id),
            "GPU_I_PROFILE": instance.profile,
        }
        rows.append([row[name] for name in names])
    return rows


class GpuCollector:
    """Publishes every ``toposcope_gpu_*`` family from one snapshot per GPU per scrape."""

    def __init__(self, source: GpuSource) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        """Read each GPU once and yield this scrape's GPU families."""
        devices = self._source.require()
        found = devices.ensure_ready()
        if not found:
            raise NoDataError("NVML reports no GPU")
        snapshots = devices.read_snapshots(found)
        up_indices = {s.index for s in snapshots if s.up}
        links = devices.gpu_links() if up_indices else ()
        driver = devices.driver_version or ""
        info = spec("toposcope_gpu_info").family()
        values = {name: spec(name).family() for name in _VALUE_FAMILIES}
        for snapshot in snapshots:
            for row in info_labels(snapshot, driver):
                info.add_metric(row, 1.0)
            values["toposcope_gpu_up"].add_metric(
                [str(snapshot.index)], 1.0 if snapshot.up else 0.0
            )
        for snapshot in snapshots:
            if snapshot.up:
                self._add_readings(values, snapshot)
        mismatches = devices.mismatch_counts()
        for index in sorted(up_indices):
            values["toposcope_gpu_locality_mismatch_total"].add_metric(
                [str(index)], float(mismatches.get(index, 0))
            )
        self._add_pcie(values, sorted(up_indices))
        if self._source.xid is not None:
            for (gpu, xid), count in sorted(self._source.xid.counts().items()):
                values["toposcope_gpu_xid_errors_total"].add_metric(
                    [str(gpu), str(xid)], float(count)
                )
        for link in links:
            if link.gpu in up_indices:
                values["toposcope_gpu_link_info"].add_metric(
                    [str(link.gpu), str(link.peer_gpu), link.link], 1.0
                )
        yield from nonempty([info, *values.values()])

    @staticmethod
    def _add_readings(
        values: dict[str, GaugeMetricFamily | CounterMetricFamily], snapshot: GpuSnapshot
    ) -> None:
        gpu = str(snapshot.index)
        single = (
            ("toposcope_gpu_utilization_ratio", snapshot.utilization_ratio),
            ("toposcope_gpu_memory_utilization_ratio", snapshot.memory_utilization_ratio),
            ("toposcope_gpu_memory_used_bytes", snapshot.memory_used_bytes),
            ("toposcope_gpu_memory_total_bytes", snapshot.memory_total_bytes),
            ("toposcope_gpu_power_watts", snapshot.power_watts),
            ("toposcope_gpu_power_limit_watts", snapshot.power_limit_watts),
            ("toposcope_gpu_energy_joules_total", snapshot.energy_joules),
            ("toposcope_gpu_temperature_celsius", snapshot.temperature_celsius),
        )
        for name, value in single:
            if value is not None:
                values[name].add_metric([gpu], float(value))
        for clock, hertz in (
            ("sm", snapshot.sm_clock_hertz),
            ("memory", snapshot.memory_clock_hertz),
        ):
            if hertz is not None:
                values["toposcope_gpu_clock_hertz"].add_metric([gpu, clock], hertz)
        for reason, active in snapshot.clock_events or ():
            values["toposcope_gpu_clock_event_active"].add_metric(
                [gpu, reason], 1.0 if active else 0.0
            )
        for error_type, counter, count in snapshot.ecc_errors:
            values["toposcope_gpu_ecc_errors_total"].add_metric(
                [gpu, error_type, counter], float(count)
            )
        for link, up in snapshot.nvlink_up:
            values["toposcope_gpu_nvlink_up"].add_metric([gpu, str(link)], 1.0 if up else 0.0)

    def _add_pcie(
        self, values: dict[str, GaugeMetricFamily | CounterMetricFamily], gpus: list[int]
    ) -> None:
        sampler = self._source.pcie
        if sampler is None:
            return
        now = sampler.devices.clock()
        for index in gpus:
            sample = sampler.latest(index)
            if sample is None:
                continue
            age = max(now - sample.taken_at, 0.0)
            values["toposcope_gpu_pcie_sample_age_seconds"].add_metric([str(index)], age)
            if age > sampler.max_age:
                continue
            for direction, rate in (
                ("tx", sample.tx_bytes_per_second),
                ("rx", sample.rx_bytes_per_second),
            ):
                if rate is not None:
                    values["toposcope_gpu_pcie_bytes_per_second"].add_metric(
                        [str(index), direction], rate
                    )


def build(ctx: CollectorContext) -> GpuCollector:
    """Factory: reuse (or attach) the context's GPU source and start its threads."""
    if ctx.nvml is None:
        attach_gpu_source(ctx)
    source = ctx.nvml
    if source is None:
        raise NoDataError("no GPU source")
    source.start_background()
    return GpuCollector(source)


ENTRY = CollectorEntry(
    name="gpu",
    default_enabled=True,
    factory=build,
    description="NVIDIA GPUs over NVML: use, memory, power, clocks, ECC, XID, NVLink, PCIe",
)
