"""The simulator's fabric: a scenario's ``fabric:`` section, its multi-node jobs, and their
spread on the simulator's ``/metrics``; ``builtin:demo`` runs one job across two leaves.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from toposcope.errors import ConfigError
from toposcope.sim.clock import SimClock
from toposcope.sim.fabric import SimFabric
from toposcope.sim.nodefs import SimExporters
from toposcope.sim.scenarios import build_cluster, load_scenario, parse_scenario
from toposcope.sim.server import make_sim_app

FABRIC = """\
switches:
  - {name: spine, switches: [leaf-a, leaf-b]}
  - {name: leaf-a, nodes: [n1, n2]}
  - {name: leaf-b, nodes: [n3]}
"""
SCENARIO = """\
name: two-leaves
nodes:
  - {name: n1, template: pcie-4gpu}
  - {name: n2, template: pcie-4gpu}
  - {name: n3, template: pcie-4gpu}
jobs:
  - {name: train-a, type: gpu-train, gpus: 4, placement: {node: n1, gpus: [0, 1, 2, 3]}}
  - {name: train-b, type: gpu-train, gpus: 2, placement: {node: n3, gpus: [0, 1]}}
  - {name: other, type: gpu-train, gpus: 2, placement: {node: n2, gpus: [0, 1]}}
fabric:
  file: fabric.yaml
  multi_node_jobs:
    - {name: train, jobs: [train-a, train-b.service]}
"""


def scrape(app_metrics: bytes) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition by name and labels."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(app_metrics.decode())
        for s in family.samples
    }


def metrics(
    scenario_text: str, tmp_path: Path
) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The simulator's ``/metrics`` for a scenario whose fabric file is :data:`FABRIC`."""
    (tmp_path / "fabric.yaml").write_text(FABRIC)
    scenario = parse_scenario(scenario_text, "two-leaves.yaml", tmp_path)
    assert scenario.fabric is not None
    cluster = build_cluster(scenario, SimClock(seed=1, speed=0))
    exporters = SimExporters(cluster, tmp_path / "state", background=False)
    app = make_sim_app(cluster, exporters, fabric=SimFabric(scenario.fabric))
    body = b"".join(
        app({"PATH_INFO": "/metrics", "REQUEST_METHOD": "GET", "QUERY_STRING": ""}, lambda *_: None)
    )
    return scrape(body)


def test_a_multi_node_job_over_two_leaves_is_served_as_spread(tmp_path: Path) -> None:
    samples = metrics(SCENARIO, tmp_path)
    job = {"scheduler": "sim", "partition": "sim", "workload": "train"}

    def value(name: str, **labels: str) -> float | None:
        return samples.get((name, frozenset({**job, **labels}.items())))

    assert value("toposcope_job_fabric_nodes") == 2
    assert value("toposcope_job_fabric_gpus") == 6
    assert value("toposcope_job_fabric_domains", level="leaf") == 2
    assert value("toposcope_job_fabric_domains_needed", level="leaf") == 1
    assert value("toposcope_job_fabric_top_level") == 1
    assert value("toposcope_job_fabric_rail_aligned") == 0  # GPUs 0-3 against 0-1
    assert value("toposcope_job_fabric_node_gpus", node="n3") == 2
    leaf = {"switch": "leaf-b", "level": "leaf", "parent": "spine"}
    assert samples[("toposcope_fabric_switch_info", frozenset(leaf.items()))] == 1
    # the queue families are still there
    assert any(name == "toposcope_queue_gpus" for name, _ in samples)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("file: fabric.yaml", "file: missing.yaml"), "fabric.file: .*missing.yaml"),
        (("[train-a, train-b.service]", "[train-a]"), "at least two jobs"),
        (("[train-a, train-b.service]", "[train-a, nope]"), "'nope' is not a job"),
        (("[train-a, train-b.service]", "[train-a, train-a.service]"), "part of train already"),
        (("name: train,", "name: ../x,"), "name: '../x' is not"),
    ],
)
def test_each_mistake_names_its_line(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    (tmp_path / "fabric.yaml").write_text(FABRIC)
    with pytest.raises(ConfigError, match=message) as caught:
        parse_scenario(SCENARIO.replace(*change), "two-leaves.yaml", tmp_path)
    assert str(caught.value).startswith("two-leaves.yaml:")


def test_a_fabric_node_outside_the_scenario_is_refused(tmp_path: Path) -> None:
    (tmp_path / "fabric.yaml").write_text(FABRIC.replace("[n3]", "[n3, n9]"))
    with pytest.raises(ConfigError, match="fabric node n9 is not a node of the scenario"):
        parse_scenario(SCENARIO, "two-leaves.yaml", tmp_path)


def test_the_demo_runs_one_job_across_two_leaves_while_one_would_hold_it() -> None:
    scenario = load_scenario("builtin:demo")
    assert scenario.fabric is not None
    fabric = SimFabric(scenario.fabric)
    (spread,) = fabric.index.spreads(fabric.placements(build_cluster(scenario)))
    assert spread.job.workload == "llm-pretrain"
    assert (spread.nodes, spread.gpus) == (2, 16)
    assert spread.spread_beyond_need == {"leaf": 1}
