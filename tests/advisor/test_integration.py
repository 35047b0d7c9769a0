"""End to end: a real exporter process on a generated host tree (fake NVML), scraped by a
real Prometheus, read by ``toposcope advise`` and ``toposcope place``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.procs import Prometheus, free_port, http_get, poll, running
from toposcope.advisor import cli as advise_cli
from toposcope.advisor import place_cli
from toposcope.sim.fsgen import write_workload_tree

pytestmark = pytest.mark.integration


def invoke(module: ModuleType, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="toposcope")
    module.add_arguments(parser)
    code: int = module.run(parser.parse_args(argv))
    return code


def test_advise_against_real_prometheus_and_exporter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = write_workload_tree(tmp_path / "host", workloads=6, seed=1)
    holder = next(w for w in tree.workloads if w.gpu_minor is not None)
    port = free_port()
    exporter = [
        sys.executable,
        "-m",
        "toposcope.cli",
        "exporter",
        "--root",
        str(tree.root),
        "--nvml",
        "fake:pcie-4gpu",
        "--hostname",
        "n1",
        "--listen",
        f"127.0.0.1:{port}",
    ]
    with running(exporter, tmp_path / "exporter.log"):
        poll(lambda: http_get(f"http://127.0.0.1:{port}/-/healthy"))
        prometheus = Prometheus(
            tmp_path,
            [{"job_name": "toposcope", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}],
        )
        with prometheus.run() as prom:
            # rate() needs two samples of the workload counters inside the window
            poll(
                lambda: prom.query("count_over_time(toposcope_workload_cpu_seconds_total[1m]) >= 2")
            )
            argv = ["--prometheus", prom.url, "--window", "1m", "--format", "json"]
            assert invoke(advise_cli, argv) == 0
            report = json.loads(capsys.readouterr().out)
            assert invoke(place_cli, ["--gpus", "2", "--prometheus", prom.url]) == 0
            placement = capsys.readouterr().out
    pins = {r["target"]["workload"]: r for r in report["recommendations"] if r["kind"] == "pin"}
    assert holder.name in pins
    rec = pins[holder.name]
    assert rec["target"]["node"] == "n1"  # joined from toposcope_exporter_build_info
    assert rec["proposed"]["mems"] == [holder.gpu_minor]  # the GPU's NUMA node (sysfs)
    assert rec["estimated_gain"] > 0.5 * 0.4  # a GPU holder pays gpu_job_share of the penalty
    assert [a["kind"] for a in rec["actions"]] == ["pin", "migrate-memory"]
    assert report["run"]["source"] == prom.url
    assert "n1" in placement
