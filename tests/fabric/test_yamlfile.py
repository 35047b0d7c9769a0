"""The hand-written fabric file: the documented schema, and each mistake named by file:line."""

from __future__ import annotations

import json

import pytest

from tests.helpers import REPO
from toposcope.fabric.jsonform import fabric_to_json
from toposcope.fabric.model import FabricError
from toposcope.fabric.slurmconf import read_topology_conf
from toposcope.fabric.yamlfile import parse_fabric_yaml, read_fabric_file

FIXTURES = REPO / "tests" / "fixtures" / "fabric"


def test_the_documented_example_reads() -> None:
    fabric = read_fabric_file(FIXTURES / "fabric.yaml")
    assert fabric.switch("spine1").level == 1
    assert fabric.switch("rail0-leaf").nodes == ("gpu01", "gpu02", "gpu03", "gpu04")
    assert fabric.switch("rail0-leaf").oversubscription == 2.0
    assert fabric.rails() == {"mlx5_0": ("rail0-leaf",), "mlx5_1": ("rail1-leaf",)}
    assert fabric.rail_optimised()
    assert fabric.block_sizes == (4,)


@pytest.mark.parametrize(
    "source", ["fabric.yaml", "slurm-tree.conf", "slurm-block.conf", "ibnetdiscover-topograph.out"]
)
def test_the_json_form_reads_back_as_the_same_model(source: str) -> None:
    path = FIXTURES / source
    if source.endswith(".yaml"):
        fabric = read_fabric_file(path)
    elif source.endswith(".conf"):
        fabric = read_topology_conf(path)
    else:
        from toposcope.fabric.ibnetdiscover import read_ibnetdiscover

        fabric = read_ibnetdiscover(path)
    assert parse_fabric_yaml(json.dumps(fabric_to_json(fabric))) == fabric


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("switches:\n  - name: a\n    colour: red\n", 3, "switches[0].colour: unknown key"),
        ("switches:\n  - name: a\n    level: high\n", 3, "must be a whole number"),
        ("switches:\n  - {nodes: [n1]}\n", 2, "needs a name"),
        ("switches:\n  - name: a\n    nodes: 'n[1-'\n", 3, "leaves a [ open"),
        ("switches:\n  - name: a\n  - name: a\n", 3, "declared twice"),
        ("switches:\n  - name: s\n    switches: [ghost]\n", 2, "not declared"),
        (
            "switches:\n  - name: l\n    nodes: [n1]\nnodes:\n  - name: n1\n"
            "    ports: [{nic: p0, switch: m}]\n",
            5,
            "not declared",
        ),
        ("nodes:\n  - name: n1\n    ports: [{nic: p0}]\n", 3, "needs a switch"),
        ("blocks: 3\n", 1, "must be a list"),
        ("block_sizes: [4, 12]\nblocks: [{name: b, nodes: 'n[1-4]'}]\n", 1, "power of two"),
        ("switches: [\n", 2, "not valid YAML"),
        ("colour: red\n", 1, "unknown key"),
        ("switches:\n  - name: a\n    uplink_gbps: fast\n", 3, "must be a number"),
    ],
)
def test_each_mistake_is_named(text: str, line: int, words: str) -> None:
    with pytest.raises(FabricError) as refused:
        parse_fabric_yaml(text, "f.yaml")
    assert str(refused.value).startswith(f"f.yaml:{line}: "), refused.value
    assert words in str(refused.value)


def test_an_empty_file_is_refused() -> None:
    with pytest.raises(FabricError, match="empty"):
        parse_fabric_yaml("", "f.yaml")


def test_json_is_read_fast_and_a_refusal_still_names_its_line() -> None:
    good = '{"switches": [{"name": "leaf", "nodes": ["n1"]}], "nodes": [{"name": "n1"}]}'
    assert parse_fabric_yaml(good, "f.json").switch("leaf").nodes == ("n1",)
    bad = '{\n  "switches": [\n    {"name": "leaf",\n     "level": 1.5}\n  ]\n}\n'
    with pytest.raises(FabricError, match=r"^f\.json:4: switches\[0\]\.level: must be a whole"):
        parse_fabric_yaml(bad, "f.json")
    twice = '{\n  "block_sizes": [2],\n  "block_sizes": [4]\n}\n'
    with pytest.raises(FabricError, match=r"^f\.json:3: block_sizes: duplicate key"):
        parse_fabric_yaml(twice, "f.json")
