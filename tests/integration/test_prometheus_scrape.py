"""A real Prometheus scrapes a real exporter process on loopback."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.procs import Prometheus, free_port, http_get, poll, running

pytestmark = pytest.mark.integration


def test_prometheus_scrapes_exporter(tmp_path: Path, hwloc_root: Callable[[str], Path]) -> None:
    root = hwloc_root("64amd64-4s2n4ca2co")
    port = free_port()
    exporter_argv = [
        sys.executable,
        "-m",
        "toposcope.cli",
        "exporter",
        "--root",
        str(root),
        "--nvml",
        "off",
        "--listen",
        f"127.0.0.1:{port}",
    ]
    with running(exporter_argv, tmp_path / "exporter.log"):
        poll(lambda: http_get(f"http://127.0.0.1:{port}/-/healthy"))
        prometheus = Prometheus(
            tmp_path,
            [{"job_name": "toposcope", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}],
        )
        with prometheus.run() as prom:
            up = poll(lambda: prom.query('up{job="toposcope"} == 1'))
            assert up[0]["metric"]["instance"] == f"127.0.0.1:{port}"
            nodes = poll(lambda: prom.query("toposcope_numa_node_info"))
            assert sorted(int(s["metric"]["numa_node"]) for s in nodes) == list(range(8))
            ok = prom.query("toposcope_scrape_collector_success == 1")
            # the snapshot has no processes and no GPU: workloads and gpu report no data
            assert {s["metric"]["collector"] for s in ok} >= {
                "topology",
                "numa_memory",
                "numa_cpu",
                "cross_socket",
            }
