"""A real Prometheus scrapes every simulated node of ``builtin:demo`` through file_sd."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.procs import Prometheus, free_port, http_get, poll, running

pytestmark = pytest.mark.integration


def test_prometheus_sees_every_simulated_gpu(tmp_path: Path) -> None:
    port = free_port()
    targets = tmp_path / "targets.json"
    sim = [
        sys.executable, "-m", "toposcope.cli", "sim", "--scenario", "builtin:demo",
        "--listen", f"127.0.0.1:{port}", "--file-sd", str(targets), "--speed", "0",
        "--state-dir", str(tmp_path / "state"),
    ]  # fmt: skip
    with running(sim, tmp_path / "sim.log"):
        poll(lambda: http_get(f"http://127.0.0.1:{port}/-/ready"))
        poll(targets.exists)
        nodes = [entry["labels"]["node"] for entry in json.loads(targets.read_text())]
        assert len(nodes) == 10
        # how many GPUs each node serves, read from the simulator itself
        expected = 0
        for node in nodes:
            text = http_get(f"http://127.0.0.1:{port}/nodes/{node}/metrics").decode()
            assert f'hostname="{node}"' in text
            expected += text.count("toposcope_gpu_utilization_ratio{")
        assert expected >= 32
        prometheus = Prometheus(
            tmp_path,
            [
                {
                    "job_name": "toposcope-sim",
                    "file_sd_configs": [{"files": [str(targets)]}],
                    "relabel_configs": [{"source_labels": ["node"], "target_label": "instance"}],
                }
            ],
        )
        with prometheus.run() as prom:
            up = poll(lambda: len(prom.query('up{job="toposcope-sim"} == 1')) == 10 or None)
            assert up
            series = poll(
                lambda: (
                    (r := prom.query("toposcope_gpu_utilization_ratio"))
                    and len(r) == expected
                    and r
                ),
                deadline_s=40,
            )
    assert {s["metric"]["instance"] for s in series} <= set(nodes)
    assert all(0.0 <= float(s["value"][1]) <= 1.0 for s in series)
