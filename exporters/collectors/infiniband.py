"""``infiniband`` collector: RDMA NIC ports (InfiniBand HCAs, RoCE NICs) from sysfs.

Publishes, per port of every device under ``/sys/class/infiniband``, what node_exporter's
``infiniband`` collector does (the same values on the same tree; the name mapping is in
``docs/metrics.md``, from :mod:`toposcope.catalogue.node_exporter_equivalents`): state,
physical state and rate, bytes and packets sent and received, and the error counters, with
three differences. Bytes and packets come from the 64-bit ``counters_ext`` where it exists
(node_exporter publishes both, as ``legacy_*`` and ``port_*``); a fixed-width counter stuck
at its maximum (a 32-bit ``port_xmit_data`` at 4294967295) is flagged in
``toposcope_nic_port_counter_saturated``; and a malformed file drops that value only, not
the whole collector. The ``hw_counters`` error counters (``out_of_buffer``, ...) are
published too.

A host without RDMA (no ``class/infiniband``) gives :class:`NoDataError`, so the collector
is on by default: it costs one failed ``listdir`` there.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from toposcope.catalogue import spec
from toposcope.errors import NoDataError
from toposcope.exporters.exposition import FamilyWriter, plain_nonempty
from toposcope.exporters.registry import CollectorEntry
from toposcope.host.infiniband import (
    ERROR_COUNTERS,
    HW_ERROR_COUNTERS,
    IbPort,
    InfiniBandClass,
    port_traffic,
)

#: The families, in exposition order.
FAMILIES = (
    "toposcope_nic_info",
    "toposcope_nic_port_info",
    "toposcope_nic_port_state_id",
    "toposcope_nic_port_physical_state_id",
    "toposcope_nic_port_rate_bytes_per_second",
    "toposcope_nic_port_bytes_total",
    "toposcope_nic_port_packets_total",
    "toposcope_nic_port_errors_total",
    "toposcope_nic_port_counter_saturated",
)


class InfiniBandCollector:
    """Turns :class:`InfiniBandClass` readings into the ``toposcope_nic_*`` families."""

    def __init__(self, ports: InfiniBandClass) -> None:
        self._ports = ports

    def collect(self) -> Iterator[Metric]:
        """Yield every device's info and every port's state, rate, traffic and errors.

        Raises :class:`NoDataError` when the host has no ``class/infiniband`` directory or
        no device in it.
        """
        if not self._ports.present():
            raise NoDataError(f"no RDMA device: {self._ports.root} is missing")
        devices = self._ports.devices()
        if not devices:
            raise NoDataError(f"no RDMA device under {self._ports.root}")
        writers = {name: FamilyWriter(spec(name)) for name in FAMILIES}
        for device in devices:
            writers["toposcope_nic_info"].add_metric(
                (device.name, device.board_id, device.firmware_version, device.hca_type), 1.0
            )
            for port in device.ports:
                self._add_port(writers, port)
        yield from plain_nonempty(writers.values())

    @staticmethod
    def _add_port(writers: dict[str, FamilyWriter], port: IbPort) -> None:
        where = (port.device, str(port.port))
        writers["toposcope_nic_port_info"].add_metric(
            (*where, port.link_layer, port.state, port.phys_state), 1.0
        )
        writers["toposcope_nic_port_state_id"].add_metric(where, port.state_id)
        if port.phys_state_id is not None:
            writers["toposcope_nic_port_physical_state_id"].add_metric(where, port.phys_state_id)
        if port.rate_bytes_per_second is not None:
            writers["toposcope_nic_port_rate_bytes_per_second"].add_metric(
                where, port.rate_bytes_per_second
            )
        traffic = port_traffic(port)
        for (quantity, direction), value in sorted(traffic.values.items()):
            writers[f"toposcope_nic_port_{quantity}_total"].add_metric((*where, direction), value)
        errors = writers["toposcope_nic_port_errors_total"]
        for name in ERROR_COUNTERS:
            if name in port.counters:
                errors.add_metric((*where, name), port.counters[name])
        for name in HW_ERROR_COUNTERS:
            if name in port.hw_counters:
                errors.add_metric((*where, name), port.hw_counters[name])
        saturated = writers["toposcope_nic_port_counter_saturated"]
        for name, stuck in traffic.saturated.items():
            saturated.add_metric((*where, name), 1.0 if stuck else 0.0)


ENTRY = CollectorEntry(
    name="infiniband",
    default_enabled=True,
    factory=lambda ctx: InfiniBandCollector(InfiniBandClass(ctx.config.paths.sysfs)),
    description="RDMA NIC ports: state, rate, bytes, packets and errors (sysfs class/infiniband)",
)
