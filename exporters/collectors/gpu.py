"""``gpu`` collector: NVIDIA GPUs over NVML, labelled the way dcgm-exporter labels its series.

Every GPU series carries dcgm-exporter's join keys with its value formats
(:data:`~toposcope.catalogue.GPU_KEYS`): ``gpu`` (NVML index), ``UUID``, ``pci_bus_id`` in
NVML's form (``00000000:07:00.0``), ``device`` (``nvidia0``), ``modelName`` and ``Hostname``
(the node name the exporter reports, dcgm-exporter's ``NODE_NAME`` or host name), so that
``* on (UUID)`` or ``on (Hostname, gpu)`` joins a ``DCGM_FI_*`` series directly. Locality
and the rest of the identity (``numa_node``, ``cpu_affinity``, ``driver_version``,
``mig_mode``, and ``GPU_I_ID`` / ``GPU_I_PROFILE`` on one extra row per MIG instance) are on
``toposcope_gpu_info``.

Throughput and activity (PCIe and NVLink bytes, SM, tensor and DRAM activity) come from
the best source each GPU supports, labelled ``source``; see
:mod:`~toposcope.exporters.collectors.gpu_activity`.

Health signals (ECC, row remapping, retired pages, NVLink and PCIe replay error counters)
are published only where the GPU supports them: absent, never zero, otherwise. A reading
NVML does not have is skipped (never NaN). A GPU that is lost, times out or fails with an
unknown error shows ``toposcope_gpu_up 0`` and none of its readings that scrape; its identity
row and the XID counter (kept by the exporter, and most wanted exactly then) stay. With
``--nvml off`` or no NVML library the collector reports no data.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

from prometheus_client.core import Metric

from toposcope.catalogue import GPU_KEYS, spec
from toposcope.cpulist import format_cpulist
from toposcope.errors import NoDataError
from toposcope.exporters.collectors.gpu_activity import GPU_ACTIVITY_FAMILIES, add_gpu_activity
from toposcope.exporters.context import CollectorContext
from toposcope.exporters.exposition import FamilyLayout, FamilyWriter, plain_nonempty
from toposcope.exporters.gpu_source import GpuSource, attach_gpu_source
from toposcope.exporters.registry import CollectorEntry
from toposcope.host.nvml import GpuHealth, GpuSnapshot, nvml_bus_id

#: This scrape's writer of each value family, by catalogue name.
Families = dict[str, FamilyWriter]

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
    "toposcope_gpu_remapped_rows_total",
    "toposcope_gpu_row_remap_pending",
    "toposcope_gpu_row_remap_failed",
    "toposcope_gpu_retired_pages",
    "toposcope_gpu_retired_pages_pending",
    "toposcope_gpu_nvlink_errors_total",
    "toposcope_gpu_pcie_replays_total",
    "toposcope_gpu_nvlink_up",
    "toposcope_gpu_link_info",
    "toposcope_gpu_locality_mismatch_total",
)


def _label(value: int | None) -> str:
    return "" if value is None else str(value)


def node_hostname(configured: str = "") -> str:
    """The ``Hostname`` label: the configured name, else ``NODE_NAME``, else the host name.

    The order is dcgm-exporter's (its DaemonSet sets ``NODE_NAME`` to the node name), so
    both exporters on a node write the same ``Hostname``.
    """
    return configured or os.environ.get("NODE_NAME", "") or socket.gethostname()


def gpu_keys(snapshot: GpuSnapshot, hostname: str) -> list[str]:
    """The values of :data:`~toposcope.catalogue.GPU_KEYS` for one GPU, as dcgm-exporter
    writes them (``device`` is ``nvidia<gpu>``, ``pci_bus_id`` in NVML's form).
    """
    values = {
        "gpu": str(snapshot.index),
        "UUID": snapshot.uuid or "",
        "pci_bus_id": nvml_bus_id(snapshot.pci_bus_id) or "",
        "device": f"nvidia{snapshot.index}",
        "modelName": snapshot.name or "",
        "Hostname": hostname,
    }
    return [values[name] for name in GPU_KEYS]


def info_labels(snapshot: GpuSnapshot, driver_version: str, hostname: str) -> list[list[str]]:
    """Label values of the ``toposcope_gpu_info`` rows of one GPU, in the catalogue's order.

    One row for the GPU itself (empty ``GPU_I_ID``/``GPU_I_PROFILE``) and one per MIG
    instance, as dcgm-exporter reports MIG devices.
    """
    names = spec("toposcope_gpu_info").labels
    base = {
        **dict(zip(GPU_KEYS, gpu_keys(snapshot, hostname), strict=True)),
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


def add_health(values: Families, keys: list[str], health: GpuHealth) -> None:
    """Add one GPU's health signals; a signal the GPU does not support stays absent."""
    for error_type, rows in health.remapped_rows:
        values["toposcope_gpu_remapped_rows_total"].add_metric([*keys, error_type], float(rows))
    for name, flag in (
        ("toposcope_gpu_row_remap_pending", health.row_remap_pending),
        ("toposcope_gpu_row_remap_failed", health.row_remap_failed),
        ("toposcope_gpu_retired_pages_pending", health.retired_pages_pending),
    ):
        if flag is not None:
            values[name].add_metric(keys, 1.0 if flag else 0.0)
    for cause, pages in health.retired_pages:
        values["toposcope_gpu_retired_pages"].add_metric([*keys, cause], float(pages))
    for link, error_type, count in health.nvlink_errors:
        values["toposcope_gpu_nvlink_errors_total"].add_metric(
            [*keys, str(link), error_type], float(count)
        )
    if health.pcie_replays is not None:
        values["toposcope_gpu_pcie_replays_total"].add_metric(keys, float(health.pcie_replays))


class GpuCollector:
    """Publishes every ``toposcope_gpu_*`` family from one snapshot per GPU per scrape.

    ``hostname`` is the ``Hostname`` label (see :func:`node_hostname`). The families are
    written straight to text, each series' labels once and its value every scrape (a GPU's
    label sets recur scrape after scrape).
    """

    def __init__(self, source: GpuSource, hostname: str = "") -> None:
        self._source = source
        self._hostname = node_hostname(hostname)
        self._info = FamilyLayout(spec("toposcope_gpu_info"), remember=True)
        self._layouts = {
            name: FamilyLayout(spec(name), remember=True)
            for name in (*_VALUE_FAMILIES, *GPU_ACTIVITY_FAMILIES)
        }

    def collect(self) -> Iterator[Metric]:
        """Read each GPU once and yield this scrape's GPU families."""
        devices = self._source.require()
        found = devices.ensure_ready()
        if not found:
            raise NoDataError("NVML reports no GPU")
        snapshots = devices.read_snapshots(found)
        keys = {s.index: gpu_keys(s, self._hostname) for s in snapshots}
        up_indices = {s.index for s in snapshots if s.up}
        links = devices.gpu_links() if up_indices else ()
        driver = devices.driver_version or ""
        info = self._info.writer()
        values: Families = {name: layout.writer() for name, layout in self._layouts.items()}
        for snapshot in snapshots:
            for row in info_labels(snapshot, driver, self._hostname):
                info.add_metric(row, 1.0)
            values["toposcope_gpu_up"].add_metric(keys[snapshot.index], 1.0 if snapshot.up else 0.0)
        for snapshot in snapshots:
            if snapshot.up:
                self._add_readings(values, keys[snapshot.index], snapshot)
                add_health(values, keys[snapshot.index], snapshot.health)
        mismatches = devices.mismatch_counts()
        for index in sorted(up_indices):
            values["toposcope_gpu_locality_mismatch_total"].add_metric(
                keys[index], float(mismatches.get(index, 0))
            )
        self._add_pcie(values, {index: keys[index] for index in sorted(up_indices)})
        if self._source.xid is not None:
            for (gpu, xid), count in sorted(self._source.xid.counts().items()):
                values["toposcope_gpu_xid_errors_total"].add_metric(
                    [*self._keys_of(keys, gpu), str(xid)], float(count)
                )
        for link in links:
            if link.gpu in up_indices:
                values["toposcope_gpu_link_info"].add_metric(
                    [*keys[link.gpu], str(link.peer_gpu), link.link], 1.0
                )
        activity = self._source.read_activity([d for d in found if d.index in up_indices])
        for index in sorted(activity):
            add_gpu_activity(values, keys[index], activity[index])
        yield from plain_nonempty([info, *values.values()])

    def _keys_of(self, keys: dict[int, list[str]], gpu: int) -> list[str]:
        """The join keys of ``gpu``; an index NVML no longer lists keeps ``gpu`` and ``device``."""
        if gpu in keys:
            return keys[gpu]
        return gpu_keys(GpuSnapshot(index=gpu, up=False), self._hostname)

    @staticmethod
    def _add_readings(values: Families, keys: list[str], snapshot: GpuSnapshot) -> None:
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
                values[name].add_metric(keys, float(value))
        for clock, hertz in (
            ("sm", snapshot.sm_clock_hertz),
            ("memory", snapshot.memory_clock_hertz),
        ):
            if hertz is not None:
                values["toposcope_gpu_clock_hertz"].add_metric([*keys, clock], hertz)
        for reason, active in snapshot.clock_events or ():
            values["toposcope_gpu_clock_event_active"].add_metric(
                [*keys, reason], 1.0 if active else 0.0
            )
        for error_type, counter, count in snapshot.ecc_errors:
            values["toposcope_gpu_ecc_errors_total"].add_metric(
                [*keys, error_type, counter], float(count)
            )
        for link, up in snapshot.nvlink_up:
            values["toposcope_gpu_nvlink_up"].add_metric([*keys, str(link)], 1.0 if up else 0.0)

    def _add_pcie(self, values: Families, gpus: dict[int, list[str]]) -> None:
        sampler = self._source.pcie
        if sampler is None:
            return
        now = sampler.devices.clock()
        for index, keys in gpus.items():
            sample = sampler.latest(index)
            if sample is None:
                continue
            age = max(now - sample.taken_at, 0.0)
            values["toposcope_gpu_pcie_sample_age_seconds"].add_metric(keys, age)
            if age > sampler.max_age:
                continue
            for direction, rate in (
                ("tx", sample.tx_bytes_per_second),
                ("rx", sample.rx_bytes_per_second),
            ):
                if rate is not None:
                    values["toposcope_gpu_pcie_bytes_per_second"].add_metric(
                        [*keys, direction], rate
                    )


def build(ctx: CollectorContext) -> GpuCollector:
    """Factory: reuse (or attach) the context's GPU source and start its threads."""
    if ctx.nvml is None:
        attach_gpu_source(ctx)
    source = ctx.nvml
    if source is None:
        raise NoDataError("no GPU source")
    source.start_background()
    return GpuCollector(source, ctx.config.hostname)


ENTRY = CollectorEntry(
    name="gpu",
    default_enabled=True,
    factory=build,
    description="NVIDIA GPUs over NVML: use, memory, power, clocks, ECC, row remapping, XID, "
    "NVLink, PCIe (dcgm-exporter's labels)",
)
