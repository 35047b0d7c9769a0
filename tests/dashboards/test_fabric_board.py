"""The network fabric dashboard's queries give the right figures, evaluated by promtool.

Input: three node exporters (gpu01 and gpu02 of a rail-optimised unit, under leaf-a and leaf-b
and in block b1; gpu03 under leaf-c, in no block), two GPUs each; gpu01's two GPUs held by
slurm-job-1, gpu02's GPU 0 by two workloads at once (one GPU held); and the cluster-level
exporter's fabric and per-job series for slurm-job-1 on gpu01 and gpu03 (two leaf domains
where one would do). Each panel query of the committed dashboard, with every variable at
All, must answer exactly the expected samples (``promtool test rules``' ``promql_expr_test``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.dashboards.panels import queries, substitute
from tests.procs import require_binary

pytestmark = pytest.mark.integration

UID = "toposcope-fabric"
ALL = {"cluster": ".*", "job": ".*", "hostname": ".*", "instance": ".*", "partition": ".*"}
NODE = {"job": "node"}
FABRIC = {"job": "slurm", "instance": "slurm:9848"}
KEY = {"scheduler": "slurm", "partition": "gpu", "workload": "slurm-job-1"}


def _series(name: str, labels: dict[str, str], value: float) -> dict[str, str]:
    inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{name}{{{inner}}}", "values": f"{value}x10"}


def input_series() -> list[dict[str, str]]:
    """The exporters' series (see the module docstring)."""
    series = []
    for host in ("gpu01", "gpu02", "gpu03"):
        target = {**NODE, "instance": f"{host}:9847"}
        series.append(_series("toposcope_exporter_build_info", {**target, "hostname": host}, 1))
        for gpu in ("0", "1"):
            series.append(_series("toposcope_gpu_up", {**target, "gpu": gpu}, 1))
    held = [("gpu01", "0", "slurm-job-1"), ("gpu01", "1", "slurm-job-1")]
    held += [("gpu02", "0", "notebook"), ("gpu02", "0", "profiler")]
    for host, gpu, workload in held:
        labels = {**NODE, "instance": f"{host}:9847", "gpu": gpu, "workload": workload}
        series.append(_series("toposcope_workload_gpu_info", labels, 1))
    ports = [("gpu01", "mlx5_0", "leaf-a", "b1"), ("gpu01", "mlx5_1", "leaf-b", "b1")]
    ports += [("gpu02", "mlx5_0", "leaf-a", "b1"), ("gpu02", "mlx5_1", "leaf-b", "b1")]
    ports += [("gpu03", "", "leaf-c", "")]
    for node, nic, leaf, block in ports:
        labels = {**FABRIC, "node": node, "nic": nic, "leaf": leaf, "block": block}
        series.append(_series("toposcope_fabric_node_info", labels, 1))
    job = {**FABRIC, **KEY}
    for name, value in (
        ("nodes", 2),
        ("gpus", 4),
        ("top_level", 1),
        ("top_level_needed", 0),
        ("rail_aligned", 0),
    ):
        series.append(_series(f"toposcope_job_fabric_{name}", job, value))
    for level, spanned, needed in (("leaf", 2, 1), ("block", 1, 1)):
        series.append(_series("toposcope_job_fabric_domains", {**job, "level": level}, spanned))
        series.append(
            _series("toposcope_job_fabric_domains_needed", {**job, "level": level}, needed)
        )
    for node in ("gpu01", "gpu03"):
        series.append(_series("toposcope_job_fabric_node_gpus", {**job, "node": node}, 2))
    for node in ("gpu02", "gpu03"):  # only gpu03's port is under the job
        labels = {**NODE, "instance": f"{node}:9847", "hostname": node, "node": node}
        series.append(_series("node:toposcope_nic_ports_unhealthy:count", labels, 1))
    traffic = {**FABRIC, **KEY, "direction": "tx"}
    series.append(
        _series("workload_direction:toposcope_job_fabric_port_bytes:rate5m", traffic, 1e9)
    )
    far = {**NODE, "instance": "gpu01:9847", "workload": "slurm-job-1"}
    series.append(_series("toposcope_workload_nic_far_gpus", far, 2))
    return series


def _labels(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


JOB = _labels(KEY)
DOMAIN = {**FABRIC, **KEY}
#: (panel, refId) -> the samples it must answer (labels, value)
EXPECTED: dict[tuple[str, str], list[tuple[str, float]]] = {
    ("Multi-node jobs", "A"): [("{}", 1)],
    ("Spread beyond need", "A"): [("{}", 1)],
    ("Crossing higher than needed", "A"): [("{}", 1)],
    ("Not rail-aligned", "A"): [("{}", 1)],
    ("GPUs in multi-node jobs", "A"): [("{}", 4)],
    ("Unhealthy ports under jobs", "A"): [("{}", 1)],
    ("Multi-node jobs and their spread", "A"): [(JOB, 2)],
    ("Multi-node jobs and their spread", "B"): [(JOB, 4)],
    ("Multi-node jobs and their spread", "C"): [(JOB, 2)],
    ("Multi-node jobs and their spread", "D"): [(JOB, 1)],
    ("Multi-node jobs and their spread", "E"): [(JOB, 1)],
    ("Multi-node jobs and their spread", "F"): [(JOB, 1)],
    ("Multi-node jobs and their spread", "G"): [(JOB, 1)],
    ("Multi-node jobs and their spread", "H"): [(JOB, 0)],
    ("Multi-node jobs and their spread", "I"): [(JOB, 0)],
    ("Domains spanned beyond need", "A"): [
        (_labels({**DOMAIN, "level": "leaf"}), 1),
        (_labels({**DOMAIN, "level": "block"}), 0),
    ],
    ("Network traffic of multi-node jobs", "A"): [
        (_labels({"workload": "slurm-job-1", "direction": "tx"}), 1e9)
    ],
    # gpu01 holds 2, gpu02 1 (two workloads on one GPU), gpu03 none
    ("GPUs held under each leaf", "A"): [('{leaf="leaf-a"}', 3), ('{leaf="leaf-b"}', 3)],
    ("GPUs held under each leaf", "B"): [
        ('{leaf="leaf-a"}', 4),
        ('{leaf="leaf-b"}', 4),
        ('{leaf="leaf-c"}', 2),
    ],
    ("GPUs held in each block", "A"): [('{block="b1"}', 3)],
    ("GPUs held in each block", "B"): [('{block="b1"}', 4)],
    ("NIC-far GPUs of multi-node jobs", "A"): [('{workload="slurm-job-1"}', 2)],
}


def test_every_fabric_panel_query_answers_the_expected_figures(tmp_path: Path) -> None:
    board = [q for q in queries() if q.dashboard == UID]
    assert {(q.panel, q.ref_id) for q in board} == set(EXPECTED)
    tests: list[dict[str, Any]] = [
        {
            "expr": substitute(q.expr, ALL),
            "eval_time": "5m",
            "exp_samples": [
                {"labels": labels, "value": value} for labels, value in EXPECTED[q.panel, q.ref_id]
            ],
        }
        for q in board
    ]
    case = tmp_path / "fabric-board.test.yml"
    case.write_text(
        yaml.safe_dump(
            {
                "rule_files": [],
                "evaluation_interval": "1m",
                "tests": [
                    {"interval": "1m", "input_series": input_series(), "promql_expr_test": tests}
                ],
            }
        ),
        encoding="utf-8",
    )
    result = subprocess.run(
        [require_binary("promtool"), "test", "rules", str(case)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
