"""Per-node metrics: the exporter's collectors over each simulated node, ground truth, file_sd
and the HTTP routes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from toposcope.catalogue import CATALOGUE
from toposcope.exporters.collectors.gpu_activity import (
    GPU_ACTIVITY_FAMILIES,
    WORKLOAD_ACTIVITY_FAMILIES,
)
from toposcope.rm import ActionKind, ActionRequest
from toposcope.sim.cluster import SimCluster
from toposcope.sim.nodefs import SimExporters
from toposcope.sim.scenarios import build_cluster, load_scenario
from toposcope.sim.server import file_sd_targets, make_sim_app, write_file_sd
from toposcope.sim.truth import render_truth

Samples = dict[str, list[tuple[dict[str, str], float]]]


def parse(text: bytes | str) -> Samples:
    """Family name -> (labels, value) of every sample (counters under their ``_total`` name)."""
    out: Samples = {}
    raw = text.decode() if isinstance(text, bytes) else text
    for family in text_string_to_metric_families(raw):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def label_names(samples: Samples) -> dict[str, set[frozenset[str]]]:
    return {name: {frozenset(labels) for labels, _ in rows} for name, rows in samples.items()}


def by(samples: Samples, name: str, key: str, **match: str) -> dict[str, float]:
    """Values of one family keyed by one label, for the samples matching ``match``."""
    return {
        labels[key]: value
        for labels, value in samples.get(name, [])
        if all(labels.get(k) == v for k, v in match.items())
    }


def exporter_print(root: Path, nvml: str) -> Samples:
    """One scrape of the real exporter, through its CLI, over a host tree."""
    output = subprocess.run(
        [sys.executable, "-m", "toposcope.cli", "exporter", "--root", str(root), "--nvml",
         nvml, "--cross-socket-source", "estimate", "--hostname", "ref", "--print"],
        check=True, capture_output=True, timeout=120,
    ).stdout  # fmt: skip
    return parse(output)


def test_node_metrics_have_the_exporters_families_and_labels(
    demo: tuple[SimCluster, SimExporters],
) -> None:
    _, exporters = demo
    sim = parse(exporters.scrape("dgx-01"))
    # the real exporter over the very tree the simulator generated for dgx-01, with the
    # shipped DGX A100 fake NVML description
    reference = exporter_print(exporters.state_dir / "nodes" / "dgx-01", "fake:dgx-a100")
    ref_labels, sim_labels = label_names(reference), label_names(sim)
    # NVML's process list: the shipped description's pids are not the simulated processes;
    # the shipped DGX A100 (driver 535) counts PCIe bytes only from the background sampler,
    # which has no sample yet in one --print scrape; the simulated one (driver 550) has the
    # PCIe byte counter field values; the shipped description's processes have no
    # per-process utilization samples, the simulated ones do
    assert set(sim_labels) - set(ref_labels) <= {
        "toposcope_workload_gpu_memory_used_bytes",
        "toposcope_workload_gpu_sm_utilization_ratio",
        "toposcope_gpu_pcie_bytes_total",
        *WORKLOAD_ACTIVITY_FAMILIES,
    }
    # the CLI runs the GPU background sampler (toposcope_gpu_pcie_bytes_per_second, ...); the
    # simulator does not at scale
    only_ref = {
        n
        for n in set(ref_labels) - set(sim_labels)
        if "_pcie_" not in n or n in GPU_ACTIVITY_FAMILIES
    }
    assert only_ref == set()
    for name, labels in sim_labels.items():
        if name in ref_labels:
            assert labels == ref_labels[name], name
        spec = CATALOGUE.get(name)
        assert spec is not None, name
        assert all(set(spec.labels) == set(names) for names in labels), name
    core = {
        "toposcope_numa_node_info",
        "toposcope_numa_memory_total_bytes",
        "toposcope_numa_allocations_total",
        "toposcope_numa_cpu_seconds_total",
        "toposcope_cross_socket_source_info",
        "toposcope_workload_info",
        "toposcope_workload_memory_bytes",
        "toposcope_workload_cpu_seconds_total",
        "toposcope_workload_gpu_info",
        "toposcope_workload_gpu_memory_used_bytes",
        "toposcope_workload_locality_ratio",
        "toposcope_gpu_info",
        "toposcope_gpu_utilization_ratio",
        "toposcope_gpu_memory_used_bytes",
        "toposcope_gpu_link_info",
        "toposcope_exporter_build_info",
        # an A100's throughput counters (field values; no SM activity before Hopper)
        "toposcope_gpu_activity_source_info",
        "toposcope_gpu_pcie_bytes_total",
        "toposcope_gpu_nvlink_bytes_total",
    }
    assert core <= set(sim)
    success = by(sim, "toposcope_scrape_collector_success", "collector")
    # a simulated node runs no kubelet: no data, as on a real node without one
    assert success.pop("kubelet") == 0
    assert [name for name, value in success.items() if value != 1] == []
    # the DGX's eight HCAs (sim/nicfs.py), each behind the PCIe switch of two GPUs
    ports = by(sim, "toposcope_nic_port_state_id", "device")
    assert ports == {f"mlx5_{n}": 4.0 for n in range(8)}
    assert {"toposcope_nic_port_bytes_total", "toposcope_gpu_nic_link_info"} <= set(sim)


def test_cpu_node_reports_no_gpu_like_a_real_cpu_node(
    demo: tuple[SimCluster, SimExporters],
) -> None:
    _, exporters = demo
    sim = parse(exporters.scrape("cpu-01"))
    success = by(sim, "toposcope_scrape_collector_success", "collector")
    assert success["gpu"] == 0 and success["workloads"] == 1
    assert not any(name.startswith("toposcope_gpu_") for name in sim)


def test_remote_memory_shows_as_estimated_cross_socket_traffic(tmp_path: Path) -> None:
    cluster = build_cluster(load_scenario("builtin:cpu-numa"))
    exporters = SimExporters(cluster, tmp_path, background=False)
    try:
        exporters.scrape("xeon-01")
        cluster.advance(30)
        sim = parse(exporters.scrape("xeon-01"))
    finally:
        exporters.close()
    traffic = {
        (labels["package"], labels["peer_package"]): value
        for labels, value in sim["toposcope_cross_socket_bytes_total"]
    }
    # cnn-remote-memory runs on socket 1 with its memory bound to socket 0
    assert traffic[("0", "1")] > 0


def test_each_node_reports_its_own_hostname(demo: tuple[SimCluster, SimExporters]) -> None:
    cluster, exporters = demo
    hosts = {}
    for name in cluster.node_names():
        info = parse(exporters.scrape(name))["toposcope_exporter_build_info"]
        hosts[name] = info[0][0]["hostname"]
    assert hosts == {n: n for n in cluster.node_names()}


def test_gpu_and_workload_series_follow_the_jobs(demo: tuple[SimCluster, SimExporters]) -> None:
    _, exporters = demo
    sim = parse(exporters.scrape("pcie8-01"))
    util = by(sim, "toposcope_gpu_utilization_ratio", "gpu")
    assert len(util) == 8
    assert util["3"] <= 0.02 and util["5"] <= 0.02  # idle notebooks
    assert util["0"] > 0.05 and util["1"] > 0.05  # busy, if slowed by their links
    held = by(sim, "toposcope_workload_gpu_info", "gpu", workload="resnet-cross-socket.service")
    assert set(held) == {"0", "4"}
    used = by(sim, "toposcope_workload_gpu_memory_used_bytes", "workload")
    assert used["notebook-idle-a.service"] > 0


def test_allocation_changes_reach_the_tree(demo: tuple[SimCluster, SimExporters]) -> None:
    cluster, exporters = demo
    name = "cnn-wrong-memory.service"

    def memory() -> dict[str, float]:
        sim = parse(exporters.scrape("cpu-01"))
        return by(sim, "toposcope_workload_memory_bytes", "numa_node", workload=name)

    before = memory()
    assert before["1"] > 0 and before.get("0", 0) == 0
    cluster.apply(ActionRequest("fix-1", ActionKind.MIGRATE_MEMORY, name, mems=[0]))
    after = memory()
    assert after["0"] > 0 and after.get("1", 0) == 0
    cluster.advance(60)
    sim = parse(exporters.scrape("cpu-01"))
    ratio = by(sim, "toposcope_workload_locality_ratio", "resource", workload=name)
    assert ratio["memory"] == pytest.approx(1.0)


def test_counters_grow_with_simulated_time(demo: tuple[SimCluster, SimExporters]) -> None:
    cluster, exporters = demo

    def cpu_seconds() -> float:
        rows = parse(exporters.scrape("cpu-02"))["toposcope_numa_cpu_seconds_total"]
        return sum(value for labels, value in rows if labels["mode"] in ("user", "system"))

    first = cpu_seconds()
    cluster.advance(100)
    # two unpinned jobs of 14 busy threads each
    assert cpu_seconds() == pytest.approx(first + 28 * 100, abs=5)


def test_truth_metrics(demo: tuple[SimCluster, SimExporters]) -> None:
    cluster, _ = demo
    truth = parse(render_truth(cluster))
    for name in truth:
        spec = CATALOGUE.get(name)
        assert spec is not None and spec.part == "sim", name
    best = by(truth, "toposcope_sim_workload_best_throughput", "workload")
    true = by(truth, "toposcope_sim_workload_throughput", "workload")
    assert true["resnet-cross-socket.service"] < best["resnet-cross-socket.service"]
    slow = by(
        truth, "toposcope_sim_workload_slowdown_ratio", "factor",
        workload="resnet-cross-socket.service",
    )  # fmt: skip
    assert slow["link"] > 1.5 and slow["total"] >= slow["link"]
    assert 0 < truth["toposcope_sim_cluster_efficiency_ratio"][0][1] < 1


def test_file_sd(tmp_path: Path) -> None:
    target = tmp_path / "sd" / "sim.json"
    entries = file_sd_targets(["n1", "n2"], "127.0.0.1:9850")
    write_file_sd(target, entries)
    write_file_sd(target, entries)
    assert json.loads(target.read_text()) == [
        {
            "targets": ["127.0.0.1:9850"],
            "labels": {"__metrics_path__": "/nodes/n1/metrics", "node": "n1"},
        },
        {
            "targets": ["127.0.0.1:9850"],
            "labels": {"__metrics_path__": "/nodes/n2/metrics", "node": "n2"},
        },
    ]
    assert [p.name for p in target.parent.iterdir()] == ["sim.json"]


def call(app: Any, path: str, query: str = "", method: str = "GET") -> tuple[str, bytes]:
    seen: dict[str, str] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        seen["status"] = status

    body = b"".join(
        app({"PATH_INFO": path, "QUERY_STRING": query, "REQUEST_METHOD": method}, start_response)
    )
    return seen["status"], body


def test_http_routes_and_api_mount(demo: tuple[SimCluster, SimExporters]) -> None:
    cluster, exporters = demo
    app = make_sim_app(cluster, exporters)
    assert call(app, "/nodes/nope/metrics")[0].startswith("404")
    assert call(app, "/api/v1/workloads")[0].startswith("404")
    status, body = call(app, "/nodes/cpu-01/metrics", "collect[]=numa_memory")
    assert status.startswith("200")
    assert set(parse(body)) <= {
        "toposcope_numa_memory_total_bytes", "toposcope_numa_memory_free_bytes",
        "toposcope_numa_memory_used_bytes", "toposcope_numa_memory_pages_bytes",
        "toposcope_numa_allocations_total", "toposcope_scrape_collector_success",
        "toposcope_scrape_collector_duration_seconds", "toposcope_exporter_build_info",
    }  # fmt: skip
    assert call(app, "/nodes/cpu-01/metrics", "collect[]=bogus")[0].startswith("400")
    assert call(app, "/truth/metrics")[0].startswith("200")
    assert json.loads(call(app, "/targets.json")[1])[0]["labels"]["node"] == "dgx-01"
    paths: list[str] = []

    def api(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        paths.append(environ["PATH_INFO"])
        start_response("200 OK", [])
        return [b"api"]

    mounted = make_sim_app(cluster, exporters, api)
    assert call(mounted, "/api/v1/actions", method="POST") == ("200 OK", b"api")
    assert paths == ["/api/v1/actions"]
    assert call(mounted, "/truth/metrics", method="POST")[0].startswith("405")


def test_closed_exporters_answer_503_and_write_nothing(tmp_path: Path) -> None:
    """Once the simulator is stopping, scrapes and late builds stop writing into the trees
    that are about to be removed.
    """
    cluster = build_cluster(load_scenario("builtin:cpu-numa"))
    exporters = SimExporters(cluster, tmp_path / "state", background=False)
    app = make_sim_app(cluster, exporters)
    assert call(app, "/nodes/xeon-01/metrics")[0].startswith("200")
    exporters.close(timeout=1.0)
    assert call(app, "/nodes/xeon-01/metrics") == ("503 Service Unavailable", b"shutting down\n")
    assert call(app, "/nodes/xeon-02/metrics")[0].startswith("503")
    assert exporters.prepare(threading.Event()) == 0
    assert sorted(p.name for p in (tmp_path / "state" / "nodes").iterdir()) == ["xeon-01"]
