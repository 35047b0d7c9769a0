"""The closed loop measures each node's PCIe peer bandwidth as an operator's bandwidth test
would and gives it to the advisor, whose prices then rest on it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import closed_loop
import pytest
import scenario_judging

from toposcope.advisor.p2p_matrix import read_p2p_file
from toposcope.sim.clock import SimClock
from toposcope.sim.model import pair_bandwidth
from toposcope.sim.p2p_measure import SPREAD
from toposcope.sim.scenarios import build_cluster, load_scenario


def test_every_node_with_a_pcie_pair_gets_a_file_the_advisor_reads(tmp_path: Path) -> None:
    cluster = build_cluster(load_scenario("builtin:contention-links"), SimClock(seed=0, speed=0))
    files = scenario_judging.measured_p2p(cluster, tmp_path / "p2p")
    assert set(files) == set(cluster.node_names())
    for node, path in files.items():
        template = cluster.template_of(node)
        pairs = read_p2p_file(path).pairs
        assert len(pairs) == len(template.gpus) * (len(template.gpus) - 1) // 2
        for (a, b), found in pairs.items():
            assert found.gbps == pytest.approx(pair_bandwidth(template, a, b), rel=SPREAD)


def test_nvswitch_nodes_have_nothing_to_measure(tmp_path: Path) -> None:
    cluster = build_cluster(load_scenario("builtin:dgx-misplaced"), SimClock(seed=0, speed=0))
    dgx = [n for n in cluster.node_names() if cluster.template_of(n).name == "dgx-a100"]
    assert dgx
    assert not set(dgx) & set(scenario_judging.measured_p2p(cluster, tmp_path))


def test_the_measurement_is_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["closed_loop.py"])
    assert not closed_loop.parse_args().measure_p2p
    monkeypatch.setattr(sys, "argv", ["closed_loop.py", "--measure-p2p"])
    assert closed_loop.parse_args().measure_p2p
