"""The fabric page without a browser: the layout and job paths on real fabrics (Slurm's
documented example, a published ibnetdiscover dump), a fabric too wide to draw whole, the
data joined from a fake PromQL API, the rendered components, and the app's fabric options.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from tests.dash.conftest import FakeApi, vector
from toposcope.cli import main
from toposcope.dashboards.app import cli
from toposcope.dashboards.app import queries as q
from toposcope.dashboards.app.advisorclient import AdvisorClient
from toposcope.dashboards.app.fabric_data import (
    GPUS_HELD,
    GPUS_UP,
    JOB_DOMAINS,
    JOB_DOMAINS_NEEDED,
    JOB_FIGURES,
    JOB_NODE_GPUS,
    JOB_TRAFFIC,
    FabricJob,
    load_fabric_data,
    shape_fabric_data,
)
from toposcope.dashboards.app.fabric_layout import (
    MAX_ROW,
    FabricIndex,
    index_fabric,
    job_path,
)
from toposcope.dashboards.app.fabric_page import fabric_view, job_detail, layout, render_fabric
from toposcope.dashboards.app.fabric_source import describe_fabric
from toposcope.dashboards.app.prom_frames import NodeIndex
from toposcope.dashboards.app.promclient import PromClient
from toposcope.dashboards.app.server import create_app
from toposcope.dashboards.app.sources import Clients
from toposcope.fabric.ibnetdiscover import read_ibnetdiscover
from toposcope.fabric.model import Node, Switch, assemble
from toposcope.fabric.slurmconf import read_topology_conf
from toposcope.fabric.yamlfile import read_fabric_file
from toposcope.promql.results import Sample, Vector

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "fabric"


@pytest.fixture(scope="module")
def slurm_tree() -> FabricIndex:
    """Slurm's topology.conf(5) example: s3 above leaves s0-s2 of six nodes each."""
    return index_fabric(read_topology_conf(str(FIXTURES / "slurm-tree.conf")))


@pytest.fixture(scope="module")
def superpod() -> FabricIndex:
    """A published DGX fabric: rail-optimised leaves under nine spines, 121 nodes."""
    return index_fabric(read_ibnetdiscover(str(FIXTURES / "ibnetdiscover-topograph.out")))


def test_the_overview_places_each_switch_over_its_leaves(slurm_tree: FabricIndex) -> None:
    view = slurm_tree.view()
    assert view.rows == ((1, ("s3",)), (0, ("s0", "s1", "s2")))
    assert [round(view.x[s], 3) for s in ("s0", "s1", "s2", "s3")] == [0.167, 0.5, 0.833, 0.5]
    assert set(view.edges) == {("s3", "s0"), ("s3", "s1"), ("s3", "s2")}
    assert [leaf for leaf, _ in view.columns] == ["s0", "s1", "s2"]
    assert view.columns[1][1] == tuple(f"dev{i}" for i in range(6, 12))
    assert view.hidden == 0 and len(view.nodes) == 18
    below = slurm_tree.view("s3")
    assert below.rows == view.rows and len(below.nodes) == 18


def test_paths_climb_only_as_high_as_the_nodes_need(slurm_tree: FabricIndex) -> None:
    same_leaf = job_path(slurm_tree, ["dev0", "dev5"])
    assert (same_leaf.top_level, same_leaf.leaves, same_leaf.switches) == (
        0,
        ("s0",),
        frozenset({"s0"}),
    )
    assert same_leaf.edges == frozenset()
    across = job_path(slurm_tree, ["dev0", "dev7", "dev13", "elsewhere"])
    assert across.top_level == 1
    assert across.switches == frozenset({"s0", "s1", "s2", "s3"})
    assert across.edges == frozenset({("s3", "s0"), ("s3", "s1"), ("s3", "s2")})
    assert across.unknown == ("elsewhere",)
    assert job_path(slurm_tree, ["nowhere"]).top_level is None


def test_a_rail_optimised_unit_is_one_leaf_domain(superpod: FabricIndex) -> None:
    view = superpod.view()
    assert [(level, len(names)) for level, names in view.rows] == [(1, 9), (0, 31)]
    assert len(view.columns) == 31 and view.hidden == 0
    unit = job_path(superpod, ["a08-p1-dgx-04-c01", "a08-p1-dgx-04-c02"])
    assert unit.top_level == 0  # the unit's four rail leaves are one domain
    assert len(unit.leaves) == 4 and unit.switches == frozenset(unit.leaves)
    apart = job_path(superpod, ["a08-p1-dgx-04-c01", "a05-p1-dgx-01-c01"])
    assert apart.top_level == 1
    spines = {s for s in apart.switches if superpod.level(s) == 1}
    assert spines and all(
        any((spine, leaf) in apart.edges for leaf in apart.leaves) for spine in spines
    )


def test_a_fabric_too_wide_to_draw_whole_is_drawn_per_spine() -> None:
    leaves = [Switch(f"leaf{i:03d}", nodes=(f"n{i:03d}",)) for i in range(2 * MAX_ROW)]
    spines = [
        Switch("spine-a", 1, switches=tuple(s.name for s in leaves[:MAX_ROW])),
        Switch("spine-b", 1, switches=tuple(s.name for s in leaves[MAX_ROW:])),
    ]
    index = index_fabric(assemble([*leaves, *spines], (), [Node("n000")]))
    overview = index.view()
    assert overview.rows == ((1, ("spine-a", "spine-b")),)
    assert overview.hidden == 2 * MAX_ROW and overview.columns == () and overview.edges == ()
    spine = index.view("spine-b")
    assert spine.rows[-1][0] == 0 and len(spine.lowest) == MAX_ROW
    assert len(spine.columns) == MAX_ROW and spine.hidden == 0
    assert len(spine.nodes) == MAX_ROW and index.view("spine-b") is spine  # computed once
    with pytest.raises(KeyError):
        index.view("spine-c")


#: the scrape targets of three fabric nodes (one named by its FQDN) and one outside it
TARGETS = {
    "dev0": {"job": "sim", "instance": "dev0", "node": "dev0"},
    "dev7": {"job": "sim", "instance": "dev7", "node": "dev7.cluster.example"},
    "dev13": {"job": "sim", "instance": "dev13", "node": "dev13"},
    "gpu-x": {"job": "sim", "instance": "gpu-x", "node": "gpu-x"},
}
JOB = {"scheduler": "slurm", "partition": "gpu", "workload": "slurm-job-42"}
TIGHT = {"scheduler": "slurm", "partition": "gpu", "workload": "slurm-job-7"}


def answers(query: str) -> dict[str, Any]:
    """What the fake Prometheus answers: 8 GPUs per node, a spread job and a tight one."""
    if query == q.BUILD_INFO:
        return vector(*((labels, 1) for labels in TARGETS.values()))
    table: dict[str, dict[str, Any]] = {
        GPUS_UP: vector(*((labels, 8) for labels in TARGETS.values())),
        GPUS_HELD: vector((TARGETS["dev0"], 8), (TARGETS["dev7"], 4), (TARGETS["dev13"], 8)),
        JOB_NODE_GPUS: vector(
            ({**JOB, "node": "dev0"}, 8), ({**JOB, "node": "dev7"}, 4),
            ({**JOB, "node": "dev13"}, 8), ({**TIGHT, "node": "dev1"}, 8),
            ({**TIGHT, "node": "dev2"}, 8),
        ),
        JOB_DOMAINS: vector(({**JOB, "level": "leaf"}, 3), ({**TIGHT, "level": "leaf"}, 1)),
        JOB_DOMAINS_NEEDED: vector(
            ({**JOB, "level": "leaf"}, 1), ({**TIGHT, "level": "leaf"}, 1)
        ),
        JOB_TRAFFIC: vector(({**JOB, "direction": "tx"}, 2.5e9)),
        JOB_FIGURES["gpus"]: vector((JOB, 20), (TIGHT, 16)),
        JOB_FIGURES["top_level"]: vector((JOB, 1), (TIGHT, 0)),
        JOB_FIGURES["top_level_needed"]: vector((JOB, 0), (TIGHT, 0)),
        JOB_FIGURES["rail_aligned"]: vector((JOB, 0)),
    }  # fmt: skip
    return table.get(query, vector())


def prometheus(method: str, path: str, params: dict[str, str]) -> tuple[int, Any]:
    return 200, answers(params["query"])


@pytest.fixture
def clients() -> Any:
    with FakeApi(prometheus) as api:
        yield Clients(PromClient(api.url), AdvisorClient("http://127.0.0.1:9"))


def test_occupancy_and_jobs_join_the_fabric_by_node_name(
    slurm_tree: FabricIndex, clients: Clients
) -> None:
    data = load_fabric_data(clients.prometheus, slurm_tree)
    at = slurm_tree.position
    assert (data.up[at["dev0"]], data.held[at["dev0"]]) == (8.0, 8.0)
    assert data.held[at["dev7"]] == 4.0  # reported under its FQDN
    assert data.up[at["dev1"]] == 0.0 and not data.reported[at["dev1"]]
    assert data.outside == 1  # gpu-x is not in the fabric
    assert [j.workload for j in data.jobs] == ["slurm-job-42", "slurm-job-7"]
    spread = data.jobs[0]
    assert spread.nodes == ("dev0", "dev13", "dev7") and spread.excess == 2 and spread.spread
    assert spread.figures == {"gpus": 20, "top_level": 1, "top_level_needed": 0, "rail_aligned": 0}
    assert spread.traffic == {"tx": 2.5e9} and not data.jobs[1].spread


def test_the_page_draws_the_selected_jobs_path(slurm_tree: FabricIndex, clients: Clients) -> None:
    message, summary, tree, blocks, detail, table, options = fabric_view(
        clients, slurm_tree, None, "slurm-job-42"
    )
    assert [o["value"] for o in options] == ["slurm-job-42", "slurm-job-7"]
    assert "15 fabric node(s) report no GPU series" in str(message)
    assert "1 node(s) report GPUs but are not in the fabric" in str(message)
    assert "20 / 24" in str(summary) and "83%" in str(summary)  # three fabric nodes report
    names = [trace.name for trace in tree.data]
    assert "selected job's path" in names and "selected job's links" in names
    assert "selected job's nodes" in names
    path = next(t for t in tree.data if t.name == "selected job's path")
    assert len(path.x) == 4  # s3 and the three leaves
    lanes = [t for t in tree.data if t.name in ("slurm-job-42", "slurm-job-7")]
    assert [len(lane.x) for lane in lanes] == [3, 1]  # across three leaves; within one
    assert lanes[0].line.color == "#d62728" and lanes[1].line.color == "#1f77b4"
    nodes = next(t for t in tree.data if t.name == "nodes")
    assert nodes.z[0][0] == 1.0 and nodes.z[1][1] == 0.5  # dev0 all held, dev7 half
    assert "this fabric has no blocks" in str(blocks.layout.annotations[0].text)
    assert "its traffic crosses up to: spine" in str(detail)
    assert "fabric?job=slurm-job-7" in str(table) and "2.5 GB/s" in str(table)
    # an unknown switch draws the whole fabric; an unknown job selects nothing
    *_, tree, _, detail, _, _ = fabric_view(clients, slurm_tree, "nope", "gone")
    assert "choose a multi-node job" in str(detail)
    assert tree.layout.title.text.startswith("Fabric: the whole fabric")


def test_blocks_show_each_nodes_gpus_held(clients: Clients) -> None:
    index = index_fabric(read_fabric_file(str(FIXTURES / "fabric.yaml")))
    data = load_fabric_data(clients.prometheus, index)
    *_, blocks, _, _, _ = render_fabric(index, data, "spine1", None)
    assert list(blocks.data[0].y) == ["nvl-1"] and len(blocks.data[0].z[0]) == 4


def test_prometheus_down_is_shown(slurm_tree: FabricIndex) -> None:
    down = Clients(PromClient("http://127.0.0.1:9", timeout=1), AdvisorClient("http://127.0.0.1:9"))
    message, summary, tree, *_ = fabric_view(down, slurm_tree, None, None)
    assert "Prometheus" in str(message) and summary == []
    assert tree.layout.annotations


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(argv)


def test_the_app_reads_its_fabric_once_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.settings_from_args(parse()).fabric is None
    assert describe_fabric(None).startswith("no fabric")
    settings = cli.settings_from_args(
        parse("--fabric-slurm-topology", str(FIXTURES / "slurm-tree.conf"))
    )
    assert settings.fabric is not None and len(settings.fabric.nodes) == 18
    assert describe_fabric(settings.fabric) == "fabric of 4 switches, 18 nodes"
    app = create_app(settings)
    page = app.server.test_client().get("/fabric", headers={"Host": "127.0.0.1:9851"})
    assert page.status_code == 200
    assert "Fabric" in str(app.layout)  # in the navigation
    assert "the whole fabric" in str(layout(index_fabric(settings.fabric), None, None))
    assert "no fabric: start the app" in str(layout(None, None, None))
    bad = tmp_path / "fabric.yaml"
    bad.write_text("switches:\n  - name: leaf\n    nodes: [a, a]\n")
    assert main(["dash", "--fabric-file", str(bad)]) == 2
    assert f"{bad}:" in capsys.readouterr().err
    both = ["--fabric-file", str(bad), "--fabric-ibnetdiscover", str(bad)]
    with pytest.raises(SystemExit):
        parse(*both)


def test_job_names_from_labels_are_drawn_as_text(slurm_tree: FabricIndex) -> None:
    odd = {"scheduler": "slurm", "partition": "gpu", "workload": "<b>job</b>%{x}"}
    nodes = NodeIndex(vector_of([(TARGETS["dev0"], 1)]))
    placed = vector_of([({**odd, "node": "dev0"}, 8), ({**odd, "node": "dev7"}, 8)])
    answers = {name: Vector() for name in ("up", "held", "domains", "needed", "traffic")}
    answers |= {name: Vector() for name in JOB_FIGURES} | {"node_gpus": placed}
    data = shape_fabric_data(slurm_tree, nodes, answers)
    _, _, tree, *_ = render_fabric(slurm_tree, data, None, odd["workload"])
    lane = next(t for t in tree.data if t.name == odd["workload"])
    assert lane.hovertemplate == "%{text}<extra></extra>"
    assert lane.text[0].startswith("&lt;b&gt;job&lt;/b&gt;%{x}: 2 nodes")
    assert "&lt;b&gt;job&lt;/b&gt;%{x}" in tree.layout.yaxis2.ticktext


def vector_of(samples: list[tuple[dict[str, str], float]]) -> Vector:
    """An instant vector of ``samples``."""
    return Vector(tuple(Sample(labels, value) for labels, value in samples))


def test_a_fabric_of_blocks_only_draws_its_blocks(clients: Clients) -> None:
    index = index_fabric(read_topology_conf(str(FIXTURES / "slurm-block.conf")))
    data = load_fabric_data(clients.prometheus, index)
    _, _, tree, blocks, *_ = render_fabric(index, data, None, None)
    assert tree.layout.annotations[0].text == "the fabric has no switches"
    assert list(blocks.data[0].y) == ["block1", "block2", "block3", "block4"]
    assert len(blocks.data[0].z[0]) == 32
    assert job_path(index, ["node1", "node40"]).top_level is None
    job = FabricJob("slurm-job-9", "slurm", "gpu", {"node1": 8, "node40": 8})
    assert "no switch is above its nodes" in str(job_detail(index, job))
