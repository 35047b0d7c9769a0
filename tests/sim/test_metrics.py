"""Per-node metrics: the exporter's collectors over each simulated node, ground truth, file_sd
and the HTTP routes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from toposcope.catalogue import CATALOGUE
from toposcope.resources import ActionKind, ActionRequest
from toposcope.sim.cluster import SimCluster
from toposcope.sim.fsgen import write_workload_tree
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


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimCluster, SimExporters]]:
    cluster = build_cluster(load_scenario("builtin:demo"))
    exporters = SimExporters(cluster, tmp_path_factory.mktemp("sim-state"), background=False)
    try:
        yield cluster, exporters
    finally:
        exporters.close()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Samples:
    """One scrape of the real exporter (its CLI) over an fsgen tree with the fake DGX NVML."""
    root = tmp_path_factory.mktemp("reference")
    write_workload_tree(root, workloads=6, seed=3)
    output = subprocess.run(
        [sys.executable, "-m", "toposcope.cli", "exporter", "--root", str(root), "--nvml",
         "fake", "--cross-socket-source", "estimate", "--hostname", "ref", "--print"],
        check=True, capture_output=True, timeout=120,
    ).stdout  # fmt: skip
    return parse(output)


def test_node_metrics_have_the_exporters_families_and_labels(
    demo: tuple[SimCluster, SimExporters], reference: Samples
) -> None:
    cluster, exporters = demo
    sim = parse(exporters.scrape("dgx-01"))
    ref_labels, sim_labels = label_names(reference), label_names(sim)
    missing = set(sim_labels) - set(ref_labels)
    assert not missing, f"families the real exporter does not publish: {missing}"
    for name, labels in sim_labels.items():
        assert labels == ref_labels[name] or labels <= ref_labels[name] | labels, name
        base = name.removesuffix("_total") if name not in CATALOGUE else name
        spec = CATALOGUE.get(name) or CATALOGUE.get(base)
        assert spec is not None, name
        assert all(set(spec.labels) == set(ls) for ls in labels), name
    core = {
        "toposcope_numa_node_info",
        "toposcope_numa_memory_total_bytes",
        "toposcope_numa_allocations_total",
        "toposcope_numa_cpu_seconds_total",
        "toposcope_workload_info",
        "toposcope_workload_memory_bytes",
        "toposcope_workload_cpu_seconds_total",
        "toposcope_workload_gpu_info",
        "toposcope_workload_locality_ratio",
        "toposcope_gpu_info",
        "toposcope_gpu_utilization_ratio",
        "toposcope_gpu_memory_used_bytes",
        "toposcope_gpu_link_info",
        "toposcope_exporter_build_info",
    }
    assert core <= set(sim)
    failed = [l["collector"] for l, v in sim["toposcope_scrape_collector_success"] if v != 1]
    assert failed == []


def test_each_node_reports_its_own_hostname(demo: tuple[SimCluster, SimExporters]) -> None:
    cluster, exporters = demo
    hosts = {}
    for name in cluster.node_names():
        info = parse(exporters.scrape(name))["toposcope_exporter_build_info"]
        hosts[name] = info[0][0]["hostname"]
    assert hosts == {n: n for n in cluster.node_names()}


def test_gpu_and_workload_series_follow_the_jobs(demo: tuple[SimCluster, SimExporters]) -> None:
    cluster, exporters = demo
    sim = parse(exporters.scrape("pcie8-01"))
    util = {l["gpu"]: v for l, v in sim["toposcope_gpu_utilization_ratio"]}
    assert len(util) == 8
    assert util["3"] <= 0.02 and util["5"] <= 0.02  # idle notebooks
    assert util["0"] > 0.3 and util["1"] > 0.3
    held = {(l["workload"], l["gpu"]) for l, _ in sim["toposcope_workload_gpu_info"]}
    assert {("resnet-cross-socket.service", "0"), ("resnet-cross-socket.service", "4")} <= held
    processes = {l["workload"] for l, _ in sim["toposcope_workload_gpu_memory_used_bytes"]}
    assert "notebook-idle-a.service" in processes


def test_allocation_changes_reach_the_tree(demo: tuple[SimCluster, SimExporters]) -> None:
    cluster, exporters = demo
    name = "cnn-wrong-memory.service"

    def memory() -> dict[str, float]:
        rows = parse(exporters.scrape("cpu-01"))["toposcope_workload_memory_bytes"]
        return {l["numa_node"]: v for l, v in rows if l["workload"] == name}

    before = memory()
    assert before["1"] > 0 and before.get("0", 0) == 0
    cluster.apply(ActionRequest("fix-1", ActionKind.MIGRATE_MEMORY, name, mems=[0]))
    after = memory()
    assert after["0"] > 0 and after.get("1", 0) == 0
    cluster.advance(60)
    sim = parse(exporters.scrape("cpu-01"))
    ratio = {
        l["resource"]: v
        for l, v in sim["toposcope_workload_locality_ratio"]
        if l["workload"] == name
    }
    assert ratio["memory"] == pytest.approx(1.0)


def test_counters_grow_with_simulated_time(demo: tuple[SimCluster, SimExporters]) -> None:
    cluster, exporters = demo

    def cpu_total() -> float:
        rows = parse(exporters.scrape("cpu-02"))["toposcope_numa_cpu_seconds_total"]
        return sum(v for l, v in rows if l["mode"] == "user")

    first = cpu_total()
    cluster.advance(100)
    assert cpu_total() == pytest.approx(first + 28 * 100, rel=0.05)


def test_truth_metrics(demo: tuple[SimCluster, SimExporters]) -> None:
    cluster, _ = demo
    truth = parse(render_truth(cluster))
    for name in truth:
        spec = CATALOGUE.get(name)
        assert spec is not None and spec.part == "sim", name
    best = {l["workload"]: v for l, v in truth["toposcope_sim_workload_best_throughput"]}
    true = {l["workload"]: v for l, v in truth["toposcope_sim_workload_throughput"]}
    assert true["resnet-cross-socket.service"] < best["resnet-cross-socket.service"]
    slow = {
        (l["workload"], l["factor"]): v for l, v in truth["toposcope_sim_workload_slowdown_ratio"]
    }
    assert slow[("resnet-cross-socket.service", "link")] > 1.5
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
