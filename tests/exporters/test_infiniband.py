"""The infiniband collector beside node_exporter's on one sysfs tree, and on broken trees.

``tests/fixtures/infiniband/sys/class/infiniband`` holds two HCAs shaped like real sysfs
(and like the infiniband section of node_exporter's own ``collector/fixtures/sys.ttar``,
Apache-2.0): ``mlx5_0``, an InfiniBand port with ``counters_ext`` whose 32-bit
``counters/port_xmit_data`` stands at 4294967295 and whose ``symbol_error`` is stuck at
65535; ``mlx5_1``, two Ethernet (RoCE) ports without ``counters_ext``, port 1 with a
saturated ``port_xmit_data``, port 2 down.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from tests.exporters.text_registry import text_registry
from tests.procs import free_port, http_get, poll, require_binary, running
from toposcope.catalogue.node_exporter_equivalents import INFINIBAND_EQUIVALENTS
from toposcope.config import ExporterConfig, HostPaths
from toposcope.errors import NoDataError
from toposcope.exporters.app import build_runner, render
from toposcope.exporters.collectors import default_table
from toposcope.exporters.collectors.infiniband import ENTRY, InfiniBandCollector
from toposcope.host.infiniband import MAX_DEVICES, MAX_FILE_BYTES, InfiniBandClass

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "infiniband"
SYSFS = FIXTURE / "sys"

#: node_exporter's per-port series toposcope does not publish (see docs/metrics.md)
NOT_PUBLISHED = {
    "node_infiniband_port_transmit_wait_total",
    "node_infiniband_unicast_packets_received_total",
    "node_infiniband_unicast_packets_transmitted_total",
    "node_infiniband_multicast_packets_received_total",
    "node_infiniband_multicast_packets_transmitted_total",
    "node_infiniband_legacy_unicast_packets_received_total",
    "node_infiniband_legacy_unicast_packets_transmitted_total",
    "node_infiniband_legacy_multicast_packets_received_total",
    "node_infiniband_legacy_multicast_packets_transmitted_total",
}


def registry_for(sysfs: Path) -> CollectorRegistry:
    return text_registry(InfiniBandCollector(InfiniBandClass(sysfs)))


def node_exporter_samples(
    sysfs: Path, tmp_path: Path
) -> dict[str, list[tuple[dict[str, str], float]]]:
    """node_exporter 1.5.0's ``node_infiniband_*`` samples on ``sysfs`` (only that collector)."""
    port = free_port()
    argv = [
        require_binary("prometheus-node-exporter"),
        f"--path.sysfs={sysfs}",
        "--collector.disable-defaults",
        "--collector.infiniband",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with running(argv, tmp_path / "node_exporter.log"):
        text = poll(
            lambda: http_get(f"http://127.0.0.1:{port}/metrics").decode(),
            deadline_s=20,
            what="node_exporter to answer",
        )
    assert 'node_scrape_collector_success{collector="infiniband"} 1' in text
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("node_infiniband_"):
                samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def test_every_node_exporter_value_is_ours(tmp_path: Path) -> None:
    theirs = node_exporter_samples(SYSFS, tmp_path)
    ours = registry_for(SYSFS)
    by_name = {e.node_exporter: e for e in INFINIBAND_EQUIVALENTS}
    legacy_ports = {
        (labels["device"], labels["port"])
        for labels, _ in theirs["node_infiniband_legacy_data_transmitted_bytes_total"]
    }
    assert legacy_ports == {("mlx5_0", "1")}
    compared = 0
    for name, samples in theirs.items():
        if name == "node_infiniband_info":
            for labels, value in samples:
                assert ours.get_sample_value("toposcope_nic_info", labels) == value, labels
                compared += 1
            continue
        if name in NOT_PUBLISHED:
            continue
        assert name in by_name, f"node_exporter's {name} has no toposcope equivalent"
        equivalent = by_name[name]
        for labels, value in samples:
            where = (labels["device"], labels["port"])
            mine = ours.get_sample_value(equivalent.family, {**labels, **equivalent.matchers})
            if equivalent.note and where in legacy_ports:
                # toposcope gives the 64-bit counters_ext figure there, not the stuck one
                assert mine != value, (name, labels)
                continue
            assert mine == value, (name, labels, mine, value)
            compared += 1
    assert set(by_name) <= set(theirs)
    # info; state, physical state, rate; traffic without and with counters_ext; errors
    assert compared == 2 + 3 * 3 + 4 * 2 + 4 * 1 + 13 * 3


def test_extended_counters_are_preferred_and_stuck_counters_flagged() -> None:
    value = registry_for(SYSFS).get_sample_value
    ib = {"device": "mlx5_0", "port": "1"}
    # counters_ext/port_xmit_data_64 x 4, not counters/port_xmit_data (4294967295) x 4
    assert value("toposcope_nic_port_bytes_total", {**ib, "direction": "tx"}) == 3181542301696 * 4
    assert value("toposcope_nic_port_packets_total", {**ib, "direction": "rx"}) == 9123458197
    assert (
        value("toposcope_nic_port_counter_saturated", {**ib, "counter": "port_xmit_data"}) is None
    )
    assert value("toposcope_nic_port_counter_saturated", {**ib, "counter": "symbol_error"}) == 1
    assert value("toposcope_nic_port_counter_saturated", {**ib, "counter": "link_downed"}) == 0
    roce = {"device": "mlx5_1", "port": "1"}
    assert value("toposcope_nic_port_bytes_total", {**roce, "direction": "tx"}) == 4294967295 * 4
    assert value("toposcope_nic_port_counter_saturated", {**roce, "counter": "port_xmit_data"}) == 1
    assert value("toposcope_nic_port_counter_saturated", {**roce, "counter": "port_rcv_data"}) == 0


def test_link_layer_state_rate_and_hw_counters() -> None:
    value = registry_for(SYSFS).get_sample_value
    info = {"device": "mlx5_1", "port": "2", "link_layer": "Ethernet"}
    assert (
        value("toposcope_nic_port_info", {**info, "state": "DOWN", "phys_state": "Disabled"}) == 1
    )
    assert value("toposcope_nic_port_state_id", {"device": "mlx5_1", "port": "2"}) == 1
    labels = {"device": "mlx5_0", "port": "1", "link_layer": "InfiniBand"}
    assert (
        value("toposcope_nic_port_info", {**labels, "state": "ACTIVE", "phys_state": "LinkUp"}) == 1
    )
    assert (
        value("toposcope_nic_port_rate_bytes_per_second", {"device": "mlx5_0", "port": "1"}) == 25e9
    )
    roce = {"device": "mlx5_1", "port": "1"}
    assert value("toposcope_nic_port_errors_total", {**roce, "counter": "out_of_buffer"}) == 12


def test_default_table_enables_the_collector() -> None:
    entry = default_table().get("infiniband")
    assert entry.default_enabled
    assert entry is ENTRY


def test_through_the_runner_on_the_fixture_and_without_rdma(tmp_path: Path) -> None:
    entries = [ENTRY]
    text = render(build_runner(ExporterConfig(paths=HostPaths.under(FIXTURE)), entries), "h")
    assert b'toposcope_scrape_collector_success{collector="infiniband"} 1.0' in text
    (tmp_path / "sys" / "class").mkdir(parents=True)
    bare = render(build_runner(ExporterConfig(paths=HostPaths.under(tmp_path)), entries), "h")
    assert b'toposcope_scrape_collector_success{collector="infiniband"} 0.0' in bare
    assert b"toposcope_nic_" not in bare


def test_missing_class_or_empty_class_is_no_data(tmp_path: Path) -> None:
    with pytest.raises(NoDataError, match="missing"):
        list(InfiniBandCollector(InfiniBandClass(tmp_path)).collect())
    (tmp_path / "class" / "infiniband").mkdir(parents=True)
    with pytest.raises(NoDataError, match="no RDMA device"):
        list(InfiniBandCollector(InfiniBandClass(tmp_path)).collect())


def broken_copy(tmp_path: Path) -> Path:
    sysfs = tmp_path / "sys"
    shutil.copytree(SYSFS, sysfs)
    return sysfs


def test_malformed_files_drop_only_their_value(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sysfs = broken_copy(tmp_path)
    port = sysfs / "class" / "infiniband" / "mlx5_1" / "ports" / "1"
    (port / "counters" / "symbol_error").write_text("N/A (no PMA)\n")
    (port / "counters" / "link_downed").write_text("-1\n")
    (port / "counters" / "port_rcv_errors").write_text(f"{2**64}\n")
    (port / "hw_counters" / "out_of_buffer").write_text("7" * (MAX_FILE_BYTES + 1))
    (port / "rate").write_text("fast\n")
    # a file nothing is published from is never read (each read queries the HCA)
    (port / "counters" / "port_xmit_wait").write_text("garbage\n")
    (sysfs / "class" / "infiniband" / "mlx5_1" / "ports" / "2" / "state").write_text("DOWN\n")
    caplog.set_level(logging.WARNING)
    value = registry_for(sysfs).get_sample_value
    roce = {"device": "mlx5_1", "port": "1"}
    for counter in ("symbol_error", "link_downed", "port_rcv_errors", "out_of_buffer"):
        assert value("toposcope_nic_port_errors_total", {**roce, "counter": counter}) is None
    assert value("toposcope_nic_port_errors_total", {**roce, "counter": "port_xmit_discards"}) == 0
    assert value("toposcope_nic_port_rate_bytes_per_second", roce) is None
    assert value("toposcope_nic_port_state_id", roce) == 4
    assert value("toposcope_nic_port_state_id", {"device": "mlx5_1", "port": "2"}) is None
    assert value("toposcope_nic_port_state_id", {"device": "mlx5_0", "port": "1"}) == 4
    warned = caplog.text
    assert "link_downed" in warned and "out_of_buffer" in warned and "rate" in warned
    assert "port_xmit_wait" not in warned
    assert "symbol_error" not in warned  # "N/A (no PMA)" is the kernel's way of saying none


def test_device_count_and_names_are_bounded(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    root = sysfs / "class" / "infiniband"
    for number in range(MAX_DEVICES + 3):
        port = root / f"mlx5_{number:03d}" / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text("4: ACTIVE\n")
    (root / "bad name\n").mkdir()
    devices = InfiniBandClass(sysfs).devices()
    assert len(devices) == MAX_DEVICES
    assert devices[-1].name == f"mlx5_{MAX_DEVICES - 1:03d}"
    assert all(d.ports[0].state == "ACTIVE" and d.board_id == "" for d in devices)
