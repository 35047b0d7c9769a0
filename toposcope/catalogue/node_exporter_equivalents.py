"""node_exporter's ``node_infiniband_*`` series and the toposcope series with the same value.

The ``infiniband`` collector reads the same sysfs files as node_exporter's, so on the same
tree each node_exporter sample has a toposcope sample of equal value: the family below,
with node_exporter's ``device`` and ``port`` labels and the extra matchers listed. The test
that runs node_exporter beside toposcope on a fixture tree compares them through this
table, and ``docs/metrics.md`` prints it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class NodeExporterEquivalent:
    """One node_exporter metric and the toposcope family (and label matchers) equal to it.

    ``note`` says when they differ (node_exporter publishes both the 32-bit and the 64-bit
    traffic counters; toposcope publishes the 64-bit one where it exists).
    """

    node_exporter: str
    family: str
    matchers: Mapping[str, str] = field(default_factory=dict)
    note: str = ""


_NO_EXT = "where the port has no counters_ext (else toposcope gives the legacy_* figure)"


def _error(node_exporter: str, counter: str) -> NodeExporterEquivalent:
    return NodeExporterEquivalent(
        f"node_infiniband_{node_exporter}", "toposcope_nic_port_errors_total", {"counter": counter}
    )


#: Every per-port ``node_infiniband_*`` metric of node_exporter 1.5.0 that toposcope
#: publishes, and where. ``node_infiniband_info`` (per device) is ``toposcope_nic_info``.
INFINIBAND_EQUIVALENTS: tuple[NodeExporterEquivalent, ...] = (
    NodeExporterEquivalent("node_infiniband_state_id", "toposcope_nic_port_state_id"),
    NodeExporterEquivalent(
        "node_infiniband_physical_state_id", "toposcope_nic_port_physical_state_id"
    ),
    NodeExporterEquivalent(
        "node_infiniband_rate_bytes_per_second", "toposcope_nic_port_rate_bytes_per_second"
    ),
    NodeExporterEquivalent(
        "node_infiniband_port_data_transmitted_bytes_total",
        "toposcope_nic_port_bytes_total",
        {"direction": "tx"},
        _NO_EXT,
    ),
    NodeExporterEquivalent(
        "node_infiniband_port_data_received_bytes_total",
        "toposcope_nic_port_bytes_total",
        {"direction": "rx"},
        _NO_EXT,
    ),
    NodeExporterEquivalent(
        "node_infiniband_port_packets_transmitted_total",
        "toposcope_nic_port_packets_total",
        {"direction": "tx"},
        _NO_EXT,
    ),
    NodeExporterEquivalent(
        "node_infiniband_port_packets_received_total",
        "toposcope_nic_port_packets_total",
        {"direction": "rx"},
        _NO_EXT,
    ),
    NodeExporterEquivalent(
        "node_infiniband_legacy_data_transmitted_bytes_total",
        "toposcope_nic_port_bytes_total",
        {"direction": "tx"},
    ),
    NodeExporterEquivalent(
        "node_infiniband_legacy_data_received_bytes_total",
        "toposcope_nic_port_bytes_total",
        {"direction": "rx"},
    ),
    NodeExporterEquivalent(
        "node_infiniband_legacy_packets_transmitted_total",
        "toposcope_nic_port_packets_total",
        {"direction": "tx"},
    ),
    NodeExporterEquivalent(
        "node_infiniband_legacy_packets_received_total",
        "toposcope_nic_port_packets_total",
        {"direction": "rx"},
    ),
    _error("symbol_error_total", "symbol_error"),
    _error("link_downed_total", "link_downed"),
    _error("link_error_recovery_total", "link_error_recovery"),
    _error("port_errors_received_total", "port_rcv_errors"),
    _error("port_receive_remote_physical_errors_total", "port_rcv_remote_physical_errors"),
    _error("port_receive_switch_relay_errors_total", "port_rcv_switch_relay_errors"),
    _error("port_discards_transmitted_total", "port_xmit_discards"),
    _error("port_discards_received_total", "port_rcv_discards"),
    _error("port_constraint_errors_transmitted_total", "port_xmit_constraint_errors"),
    _error("port_constraint_errors_received_total", "port_rcv_constraint_errors"),
    _error("local_link_integrity_errors_total", "local_link_integrity_errors"),
    _error("excessive_buffer_overrun_errors_total", "excessive_buffer_overrun_errors"),
    _error("vl15_dropped_total", "VL15_dropped"),
)


def infiniband_markdown() -> list[str]:
    """The ``docs/metrics.md`` section mapping node_exporter's InfiniBand series."""
    lines = [
        "## node_exporter's InfiniBand series",
        "",
        "The `infiniband` collector reads the files node_exporter's `infiniband` collector "
        "reads, and on the same sysfs tree gives the same values under these names (each "
        "with node_exporter's `device` and `port` labels). `node_infiniband_info` is "
        "`toposcope_nic_info`. node_exporter's transmit-wait, unicast and multicast packet "
        "counters are not published; toposcope adds the `hw_counters` error counters, the "
        "port's link layer and state names (`toposcope_nic_port_info`) and "
        "`toposcope_nic_port_counter_saturated`.",
        "",
        "| node_exporter metric | toposcope series | when |",
        "|---|---|---|",
    ]
    for equivalent in INFINIBAND_EQUIVALENTS:
        matchers = ",".join(f'{k}="{v}"' for k, v in equivalent.matchers.items())
        series = f"{equivalent.family}{{{matchers}}}" if matchers else equivalent.family
        lines.append(f"| `{equivalent.node_exporter}` | `{series}` | {equivalent.note or '-'} |")
    return [*lines, ""]
