"""The Kubernetes reader from files: Kueue's documented Topology, kubectl's node list shape,
the naming of domains whose values repeat, and each mistake refused with file:line.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO, holds_any, modules_loaded_by
from toposcope.cli import main
from toposcope.fabric.kubernetes import (
    LabeledNode,
    Topology,
    domain_names,
    fabric_from_labels,
    read_kubernetes_files,
)
from toposcope.fabric.located import Lines
from toposcope.fabric.model import FabricError

FIXTURES = REPO / "tests" / "fixtures" / "fabric"
TOPOLOGY = FIXTURES / "kueue-topology.yaml"
NODES = FIXTURES / "kubernetes-nodes.yaml"
BLOCK, RACK = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack"


def test_kueues_documented_topology_gives_blocks_over_racks_over_nodes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        fabric = read_kubernetes_files(NODES, TOPOLOGY)
    switches = {s.name: s for s in fabric.switches}
    assert [(s.name, s.level) for s in fabric.switches] == [
        ("block-1", 1),
        ("block-1.rack-1", 0),
        ("rack-2", 0),
        ("block-2", 1),
        ("block-2.rack-1", 0),
        ("rack-3", 0),
    ]
    assert switches["block-1"].switches == ("block-1.rack-1", "rack-2")
    assert switches["block-2.rack-1"].nodes == ("node-3",)
    assert [n.name for n in fabric.nodes] == ["node-1", "node-2", "node-3", "node-4"]
    # the control-plane node carries none of the levels' labels: not in the topology
    assert "1 nodes have none of the labels" in caplog.text and "control-plane" in caplog.text


def test_kubectl_json_output_reads_as_the_yaml_does(tmp_path: Path) -> None:
    as_json = tmp_path / "nodes.json"
    as_json.write_text(json.dumps(yaml.safe_load(NODES.read_text()), indent=2))
    assert read_kubernetes_files(as_json, TOPOLOGY) == read_kubernetes_files(NODES, TOPOLOGY)


def test_domain_names_qualify_a_value_only_where_it_repeats() -> None:
    paths = [("z1",), ("z1", "b1"), ("z1", "b1", "r1"), ("z2",), ("z2", "b1"), ("z2", "b1", "r1")]
    paths += [("z2", "b2"), ("z2", "b2", "r9"), ("z1", "b1", "z2")]
    assert domain_names(paths) == {
        ("z1",): "z1",
        ("z1", "b1"): "z1.b1",
        ("z1", "b1", "r1"): "z1.b1.r1",
        ("z2",): "z2",
        ("z2", "b1"): "z2.b1",
        ("z2", "b1", "r1"): "z2.b1.r1",
        ("z2", "b2"): "b2",
        ("z2", "b2", "r9"): "r9",
        ("z1", "b1", "z2"): "z1.b1.z2",  # a rack valued as a zone is qualified, the zone not
    }


def _node(name: str, labels: dict[str, str]) -> str:
    shown = "".join(f"\n      {k}: {json.dumps(v)}" for k, v in labels.items()) or " {}"
    return f"- apiVersion: v1\n  kind: Node\n  metadata:\n    name: {name}\n    labels:{shown}\n"


def _nodes_file(tmp_path: Path, *items: str) -> Path:
    path = tmp_path / "nodes.yaml"
    path.write_text("apiVersion: v1\nkind: List\nitems:\n" + "".join(items))
    return path


def test_a_topology_without_the_hostname_level_hangs_nodes_under_its_last_level(
    tmp_path: Path,
) -> None:
    topology = tmp_path / "topology.json"
    topology.write_text(json.dumps({
        "apiVersion": "kueue.x-k8s.io/v1alpha1", "kind": "Topology",
        "metadata": {"name": "racks"}, "spec": {"levels": [{"nodeLabel": RACK}]},
    }))  # fmt: skip
    nodes = _nodes_file(tmp_path, _node("gpu01", {RACK: "r1"}), _node("gpu02", {RACK: "r1"}))
    fabric = read_kubernetes_files(nodes, topology)
    assert [(s.name, s.level, s.nodes) for s in fabric.switches] == [("r1", 0, ("gpu01", "gpu02"))]


@pytest.mark.parametrize(
    ("topology", "message"),
    [
        ("kind: Topology\napiVersion: kueue.x-k8s.io/v9\nmetadata: {name: t}\n", ":2: "),
        (
            "kind: Topology\napiVersion: kueue.x-k8s.io/v1beta1\nmetadata: {name: t}\n"
            "spec:\n  levels: []\n",
            ":5: (top level).spec.levels: must hold 1-16 levels",
        ),
        (
            "kind: Topology\napiVersion: kueue.x-k8s.io/v1beta1\nmetadata: {name: t}\nspec:\n"
            "  levels:\n  - nodeLabel: kubernetes.io/hostname\n  - nodeLabel: rack\n",
            ":6: (top level).spec.levels[0].nodeLabel: kubernetes.io/hostname can only be the "
            "lowest level",
        ),
        (
            "kind: Topology\napiVersion: kueue.x-k8s.io/v1beta1\nmetadata: {name: t}\nspec:\n"
            "  levels:\n  - nodeLabel: rack\n  - nodeLabel: rack\n",
            ":7: (top level).spec.levels[1].nodeLabel: rack is already a level",
        ),
        (
            "kind: Topology\napiVersion: kueue.x-k8s.io/v1beta1\nmetadata: {name: t}\nspec:\n"
            "  levels:\n  - nodeLabel: 'Bad Label'\n",
            ":6: (top level).spec.levels[0].nodeLabel: 'Bad Label' is not a label key",
        ),
        (
            "kind: Topology\napiVersion: kueue.x-k8s.io/v1beta1\nmetadata: {name: t}\nspec:\n"
            "  levels:\n  - nodeLabel: rack\n    weight: 2\n",
            ":7: (top level).spec.levels[0].weight: unknown key",
        ),
        (
            "kind: ResourceFlavor\napiVersion: kueue.x-k8s.io/v1beta1\nmetadata: {name: f}\n",
            ": no Kueue Topology object",
        ),
        ("spec: [\n", ":2: not valid YAML"),
    ],
)
def test_each_mistake_in_the_topology_is_named(tmp_path: Path, topology: str, message: str) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(topology)
    with pytest.raises(FabricError) as refused:
        read_kubernetes_files(NODES, path)
    assert str(refused.value).startswith(f"{path}{message}"), refused.value


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (
            (_node("n1", {BLOCK: "b1", RACK: "r1"}), _node("n2", {BLOCK: "b1"})),
            ":11: node n2 lacks the label cloud.provider.com/topology-rack of Topology default",
        ),
        (
            (_node("n1", {BLOCK: "b1", RACK: "r 1"}),),
            ":4: node n1: label cloud.provider.com/topology-rack: 'r 1' is not a label value",
        ),
        (
            (_node("n1", {BLOCK: "b1", RACK: "r1"}), _node("n1", {BLOCK: "b1", RACK: "r1"})),
            ":11: node n1 is declared twice",
        ),
        ((_node("n_1", {BLOCK: "b1", RACK: "r1"}),), ":4: node name 'n_1' is not a host name"),
        (
            ("- apiVersion: v1\n  kind: Pod\n  metadata: {name: p}\n",),
            ":4: items[0]: is a Pod, not a v1 Node",
        ),
        (
            ("- apiVersion: v1\n  kind: Node\n  metadata: {labels: {}}\n",),
            ":4: items[0].metadata: needs a name",
        ),
        (
            (
                "- apiVersion: v1\n  kind: Node\n  metadata:\n    name: n1\n    labels:\n"
                "      rack: 3\n",
            ),
            ":9: items[0].metadata.labels.rack: must be a string",
        ),
        (
            ("- apiVersion: v1\n  kind: Node\n  metadata:\n    name: n1\n    name: n2\n",),
            ":8: items[0].metadata.name: duplicate key",
        ),
    ],
)
def test_each_mistake_in_the_nodes_is_named(
    tmp_path: Path, items: tuple[str, ...], message: str
) -> None:
    path = _nodes_file(tmp_path, *items)
    with pytest.raises(FabricError) as refused:
        read_kubernetes_files(path, TOPOLOGY)
    assert str(refused.value).startswith(f"{path}{message}"), refused.value


def test_a_refused_json_node_is_named_by_its_line(tmp_path: Path) -> None:
    path = tmp_path / "nodes.json"
    document = {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {BLOCK: "b"}}}
    ]}  # fmt: skip
    path.write_text(json.dumps(document, indent=1))
    with pytest.raises(FabricError) as refused:
        read_kubernetes_files(path, TOPOLOGY)
    assert str(refused.value).startswith(f"{path}:5: node n1 lacks the label"), refused.value


def test_several_topologies_need_a_name(tmp_path: Path) -> None:
    text = TOPOLOGY.read_text()
    path = tmp_path / "topologies.yaml"
    path.write_text(text + "---\n" + text.split("---")[0].replace('"default"', '"other"'))
    with pytest.raises(FabricError, match=r"2 Topology objects \(default, other\): name one"):
        read_kubernetes_files(NODES, path)
    with pytest.raises(FabricError, match=r"no Topology named absent \(found: default, other\)"):
        read_kubernetes_files(NODES, path, "absent")
    assert read_kubernetes_files(NODES, path, "default").switches


def test_show_reads_the_files_and_exits_2_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["fabric", "show", "--kubernetes-nodes", str(NODES), "--kueue-topology", str(TOPOLOGY)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("fabric: 6 switches on 2 levels (leaf, spine), 4 nodes, 0 blocks\n")
    assert "  block-2 (spine)\n    block-2.rack-1 (leaf): 1 nodes node-3" in out
    bad = _nodes_file(tmp_path, _node("n1", {BLOCK: "b1"}))
    argv = ["fabric", "show", "--kubernetes-nodes", str(bad), "--kueue-topology", str(TOPOLOGY)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"toposcope fabric: error: {bad}:4: node n1 lacks the label"), err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--kubernetes-nodes", "n.yaml"], "--kubernetes-nodes needs --kueue-topology FILE"),
        (["--file", "f.yaml", "--kueue-topology", "t"], "--kueue-topology goes with"),
        (["--file", "f.yaml", "--kubeconfig", "k"], "--kubeconfig goes with --kubernetes"),
        (
            ["--kubernetes-nodes", "n", "--kueue-topology", "t", "--node-selector", "a=b"],
            "--node-selector goes with --kubernetes",
        ),
    ],
)
def test_kubernetes_options_out_of_place_are_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["fabric", "show", *argv]) == 2
    assert message in capsys.readouterr().err


def test_reading_node_files_imports_neither_the_api_client_nor_other_readers() -> None:
    loaded = modules_loaded_by(
        ["fabric", "show", "--kubernetes-nodes", str(NODES), "--kueue-topology", str(TOPOLOGY)]
    )
    assert "toposcope.fabric.kubernetes" in loaded
    for absent in (
        "toposcope.fabric.kubernetes_api",
        "toposcope.kubeapi",
        "toposcope.fabric.yamlfile",
        "toposcope.fabric.slurmconf",
        "toposcope.fabric.ibnetdiscover",
        "toposcope.advisor",
    ):
        assert not holds_any(loaded, absent), absent


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        (
            [("n1", "a.b", "c"), ("n2", "x", "a.b.c"), ("n3", "q", "c")],
            "f:9: domains a.b/c and x/a.b.c would both be named a.b.c",
        ),
        (
            [("n1", "a" * 62, "x"), ("n2", "y", "a" * 62)],
            f"f:9: switch name 'y.{'a' * 62}' is not 1-63",
        ),
    ],
)
def test_names_that_would_clash_or_grow_too_long_are_refused(
    nodes: list[tuple[str, str, str]], message: str
) -> None:
    topology = Topology("t", (BLOCK, RACK))
    labeled = [
        LabeledNode(name, {BLOCK: block, RACK: rack}, 3 + 6 * index)
        for index, (name, block, rack) in enumerate(nodes)
    ]
    with pytest.raises(FabricError) as refused:
        fabric_from_labels(topology, labeled, Lines("f"))
    assert str(refused.value).startswith(message), refused.value
