"""Simulated nodes' NICs: placed beside their GPUs on PCIe, in ``class/infiniband`` with port
counters that follow the multi-node jobs, read by node_exporter as by toposcope.

``builtin:demo``'s multi-node job ``llm-pretrain`` runs a part on ``dgx-03`` (8 GPUs at
comm_intensity 0.9): each of the node's eight HCAs is nearest to two GPUs and carries half of
each one's 9 GB/s, 9 GB/s per HCA in each direction.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.exporters.test_infiniband import node_exporter_samples, registry_for
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import SimCluster
from toposcope.sim.nicfs import NET_BYTES_PER_GPU
from toposcope.sim.nodefs import SimExporters
from toposcope.sim.scenarios import build_cluster, load_scenario
from toposcope.topology.sysfs import build_from_sysfs

MINUTE = 60.0


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[tuple[SimCluster, SimExporters]]:
    """The demo cluster at time 0, its exporters told which workloads use the network."""
    scenario = load_scenario("builtin:demo")
    assert scenario.fabric is not None
    network = frozenset(p for parts in scenario.fabric.multi_node_jobs.values() for p in parts)
    cluster = build_cluster(scenario, SimClock(seed=0, speed=0))
    exporters = SimExporters(cluster, tmp_path / "state", background=False, network=network)
    yield cluster, exporters
    exporters.close()


def test_ports_count_the_multi_node_jobs_traffic_as_node_exporter_reads_it(
    demo: tuple[SimCluster, SimExporters], tmp_path: Path
) -> None:
    cluster, exporters = demo
    exporters.scrape("dgx-03")
    exporters.scrape("dgx-01")
    cluster.advance(MINUTE)
    exporters.scrape("dgx-03")
    exporters.scrape("dgx-01")
    sysfs = exporters.state_dir / "nodes" / "dgx-03" / "sys"
    ours = registry_for(sysfs).get_sample_value
    expected = 2 * NET_BYTES_PER_GPU * 0.9 / 2 * MINUTE
    for nic in range(8):
        port = {"device": f"mlx5_{nic}", "port": "1"}
        for direction in ("tx", "rx"):
            value = ours("toposcope_nic_port_bytes_total", {**port, "direction": direction})
            assert value == pytest.approx(expected, rel=1e-9), (nic, direction)
        assert ours("toposcope_nic_port_state_id", port) == 4
        assert ours("toposcope_nic_port_rate_bytes_per_second", port) == 200e9 / 8
    theirs = node_exporter_samples(sysfs, tmp_path)
    sent = dict(
        (labels["device"], value)
        for labels, value in theirs["node_infiniband_legacy_data_transmitted_bytes_total"]
    )
    for device, value in sent.items():
        assert (
            ours(
                "toposcope_nic_port_bytes_total", {"device": device, "port": "1", "direction": "tx"}
            )
            == value
        )
    assert len(sent) == 8
    # dgx-01 runs no multi-node job: its ports are up and idle
    idle = registry_for(exporters.state_dir / "nodes" / "dgx-01" / "sys").get_sample_value
    tx = {"device": "mlx5_0", "port": "1", "direction": "tx"}
    assert idle("toposcope_nic_port_bytes_total", tx) == 0


def test_each_hca_sits_behind_the_pcie_switch_of_two_gpus(
    demo: tuple[SimCluster, SimExporters],
) -> None:
    _, exporters = demo
    exporters.scrape("dgx-03")
    exporters.scrape("pcie4-01")
    root = exporters.state_dir / "nodes"
    dgx = build_from_sysfs(root / "dgx-03" / "sys", root / "dgx-03" / "proc")
    links = {(link.gpu, link.nic): link.link for link in dgx.gpu_nic_links}
    assert {nic.name for nic in dgx.nics} == {f"mlx5_{n}" for n in range(8)}
    assert links[(0, "mlx5_0")] == links[(1, "mlx5_1")] == "PIX"
    assert links[(0, "mlx5_2")] == "SYS"  # the other socket's switch
    # the PCIe 4-GPU server's HCAs hang off root ports: no GPU has one nearer than NODE
    pcie = build_from_sysfs(root / "pcie4-01" / "sys", root / "pcie4-01" / "proc")
    assert {link.link for link in pcie.gpu_nic_links} == {"NODE", "SYS"}


def test_each_rank_of_the_multi_node_job_opens_the_hcas_and_uses_its_gpus_nearest(
    demo: tuple[SimCluster, SimExporters],
) -> None:
    _, exporters = demo
    families = text_string_to_metric_families(exporters.scrape("dgx-03").decode())
    used = [
        s.labels
        for family in families
        for s in family.samples
        if s.name == "toposcope_workload_nic_used_info"
    ]
    assert {u["workload"] for u in used} == {"llm-pretrain-a.service"}
    assert {(u["nic"], u["source"], u["link"], u["near"]) for u in used} == {
        (f"mlx5_{n}", "uverbs", "PIX", "true") for n in range(8)
    }


def test_nics_the_fabric_leaves_uncabled_are_disabled_and_carry_nothing(tmp_path: Path) -> None:
    """A node whose fabric cables two of its eight HCAs: those two carry all of the part's
    traffic (each GPU's nearest cabled HCA), the other six are down and administratively
    disabled (physical state 3, which the unhealthy-port rule leaves out).
    """
    scenario = load_scenario("builtin:demo")
    assert scenario.fabric is not None
    network = frozenset(p for parts in scenario.fabric.multi_node_jobs.values() for p in parts)
    cluster = build_cluster(scenario, SimClock(seed=0, speed=0))
    cabled = {"dgx-03": frozenset({"mlx5_0", "mlx5_1"})}
    exporters = SimExporters(
        cluster, tmp_path / "state", background=False, network=network, cabled=cabled
    )
    try:
        exporters.scrape("dgx-03")
        cluster.advance(MINUTE)
        exporters.scrape("dgx-03")
        ours = registry_for(exporters.state_dir / "nodes" / "dgx-03" / "sys").get_sample_value
        sent: dict[int, float] = {}
        for nic in range(8):
            port = {"device": f"mlx5_{nic}", "port": "1"}
            value = ours("toposcope_nic_port_bytes_total", {**port, "direction": "tx"})
            assert value is not None, nic
            sent[nic] = value
            up = nic < 2
            assert ours("toposcope_nic_port_state_id", port) == (4 if up else 1), nic
            assert ours("toposcope_nic_port_physical_state_id", port) == (5 if up else 3), nic
        assert all(sent[nic] == 0 for nic in range(2, 8))
        assert sent[0] > 0 and sent[1] > 0
        total = 8 * NET_BYTES_PER_GPU * 0.9 * MINUTE
        assert sent[0] + sent[1] == pytest.approx(total, rel=1e-9)
    finally:
        exporters.close()
