"""config (node settings): GPU throttling and the NUMA-balancing note."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.advisor.builders import ALL_METRICS, cluster, pcie4
from toposcope.advisor.model import NodeModel
from toposcope.advisor.policies.node_settings import NodeSettingsCheck, NodeSettingsCheckSettings


def throttled(events: dict[str, float]) -> NodeModel:
    node = pcie4()
    gpus = tuple(replace(g, clock_events=events) if g.index == 1 else g for g in node.gpus)
    return NodeModel(node.name, node.numa_nodes, gpus, node.links)


def test_long_thermal_throttling_is_reported_without_actions() -> None:
    result = NodeSettingsCheck().evaluate(
        cluster([throttled({"hw_thermal": 0.8, "sw_thermal": 0.1})])
    )
    [rec] = result.recommendations
    assert rec.kind == "config"
    assert rec.target.gpus == (1,)
    assert rec.actions == ()
    assert rec.estimated_gain == pytest.approx(0.8 * 0.25)
    assert "cooling" in rec.summary


def test_short_throttling_and_power_cap_are_not() -> None:
    assert (
        NodeSettingsCheck().evaluate(cluster([throttled({"hw_thermal": 0.3})])).recommendations
        == ()
    )
    assert (
        NodeSettingsCheck().evaluate(cluster([throttled({"sw_power_cap": 1.0})])).recommendations
        == ()
    )
    with_cap = NodeSettingsCheck(NodeSettingsCheckSettings(reasons=("sw_power_cap",)))
    assert len(with_cap.evaluate(cluster([throttled({"sw_power_cap": 1.0})])).recommendations) == 1


def test_numa_balancing_is_cannot_decide_without_a_metric() -> None:
    notes = NodeSettingsCheck().evaluate(cluster([pcie4()])).undecided
    assert any("numa balancing" in n.reason for n in notes)


def test_missing_clock_event_series_is_noted_on_gpu_nodes() -> None:
    model = cluster([pcie4()], present=ALL_METRICS - {"toposcope_gpu_clock_event_active"})
    notes = NodeSettingsCheck().evaluate(model).undecided
    assert any("toposcope_gpu_clock_event_active" in n.reason for n in notes)
