"""The one node-naming rule: node label, then the exporter's build info by (job, instance),
then instance; ``--node-label`` forces a label and is checked while parsing."""

from __future__ import annotations

import argparse

import pytest

from toposcope.identity.node import AUTO, NodeNamer, add_node_label_argument, check_node_label

BUILD_INFO = [
    {"job": "t", "instance": "10.0.0.1:9400", "hostname": "gpu-a", "rack": "r1"},
    {"job": "s", "instance": "sim:1", "node": "sim-1", "hostname": "sim-host"},
    {"job": "t", "instance": "10.0.0.2:9400", "rack": "r2"},
]


def test_auto_prefers_the_node_label_then_the_exporters_hostname_then_instance() -> None:
    namer = NodeNamer(BUILD_INFO)
    assert namer({"job": "x", "instance": "i", "node": "n7"}) == "n7"
    assert namer({"job": "t", "instance": "10.0.0.1:9400", "gpu": "0"}) == "gpu-a"
    assert namer({"job": "s", "instance": "sim:1"}) == "sim-1"  # aggregated away
    assert namer({"job": "t", "instance": "10.0.0.2:9400"}) == "10.0.0.2:9400"
    assert namer({}) == "local"
    assert namer.nodes == ["10.0.0.2:9400", "gpu-a", "sim-1"]
    assert namer.targets("gpu-a") == [("t", "10.0.0.1:9400")]


def test_a_forced_label_names_series_and_targets_and_falls_back_to_the_build_info() -> None:
    namer = NodeNamer(BUILD_INFO, "rack")
    assert namer({"job": "t", "instance": "10.0.0.1:9400", "rack": "r9"}) == "r9"
    assert namer({"job": "t", "instance": "10.0.0.1:9400"}) == "r1"
    assert namer({"job": "q", "instance": "other", "node": "n7"}) == "unknown"
    assert namer.nodes == ["r1", "r2", "unknown"]
    assert namer.targets("r2") == [("t", "10.0.0.2:9400")]


@pytest.mark.parametrize("label", ["", "1rack", "__name__", "rack-id", "a b"])
def test_a_bad_label_is_refused(label: str) -> None:
    with pytest.raises(ValueError, match="is neither 'auto' nor a label name"):
        check_node_label(label)
    with pytest.raises(ValueError):
        NodeNamer([], label)


def test_the_option_is_checked_while_parsing(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="toposcope")
    add_node_label_argument(parser)
    assert parser.parse_args([]).node_label == AUTO
    assert parser.parse_args(["--node-label", "kubernetes_node"]).node_label == "kubernetes_node"
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--node-label", "node-name"])
    assert exited.value.code == 2
    assert "argument --node-label: node label 'node-name' is neither" in capsys.readouterr().err
