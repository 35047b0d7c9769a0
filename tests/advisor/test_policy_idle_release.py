"""idle-release on hand-made models."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.advisor.builders import ALL_METRICS, cluster, pcie4, workload
from toposcope.advisor.model import NodeModel
from toposcope.advisor.policies.idle_release import IdleRelease
from toposcope.rm import ActionKind


def with_gpu(node: NodeModel, index: int, **changes: object) -> NodeModel:
    gpus = tuple(replace(g, **changes) if g.index == index else g for g in node.gpus)  # type: ignore[arg-type]
    return NodeModel(node.name, node.numa_nodes, gpus, node.links)


def test_idle_gpus_are_released() -> None:
    node = with_gpu(with_gpu(pcie4(), 2, utilization_max=0.01), 3, utilization_max=0.0)
    notebook = workload("notebook", gpus=[2, 3])
    [rec] = IdleRelease().evaluate(cluster([node], [notebook])).recommendations
    assert rec.kind == "release-idle"
    assert rec.estimated_gain == pytest.approx(0.5)  # 2 of 4 GPUs
    [action] = rec.actions
    assert (action.kind, action.gpus, action.workload) == (ActionKind.RELEASE, [2, 3], "notebook")
    assert rec.claims == ("gpu:n1/2", "gpu:n1/3", "workload:n1/notebook")


def test_one_busy_gpu_keeps_them_all() -> None:
    node = with_gpu(pcie4(), 2, utilization_max=0.01)
    job = workload("job", gpus=[2, 3])
    assert IdleRelease().evaluate(cluster([node], [job])).recommendations == ()


def test_too_few_samples_is_cannot_decide() -> None:
    node = with_gpu(pcie4(), 2, utilization_max=0.0, samples=2)
    result = IdleRelease().evaluate(cluster([node], [workload("w", gpus=[2])]))
    assert result.recommendations == ()
    assert "2 sample(s), need 5" in result.undecided[0].reason


def test_short_coverage_is_cannot_decide() -> None:
    node = with_gpu(pcie4(), 2, utilization_max=0.0, covered_seconds=600.0)
    result = IdleRelease().evaluate(cluster([node], [workload("w", gpus=[2])]))
    assert "span 600s of the 1h window" in result.undecided[0].reason


def test_missing_utilization_metric_is_cannot_decide() -> None:
    model = cluster(
        [pcie4()],
        [workload("w", gpus=[2])],
        present=ALL_METRICS - {"toposcope_gpu_utilization_ratio"},
    )
    assert "toposcope_gpu_utilization_ratio" in IdleRelease().evaluate(model).undecided[0].reason


def test_a_job_busy_on_cpu_with_quiet_gpus_is_not_idle() -> None:
    """A 4-GPU training job stalled on cross-socket links kept its GPUs at 4 % while its
    process kept cores busy: releasing its GPUs stopped it (closed-loop regression).
    """
    node = pcie4()
    for index in range(4):
        node = with_gpu(node, index, utilization_max=0.04)
    job = workload("train", cpu={0: 2.5, 1: 2.3}, gpus=[0, 1, 2, 3])
    result = IdleRelease().evaluate(cluster([node], [job]))
    assert result.recommendations == ()
    assert "working" in result.undecided[0].reason


def test_a_notebook_with_a_trickle_of_cpu_is_still_idle() -> None:
    node = with_gpu(pcie4(), 2, utilization_max=0.01)
    notebook = workload("notebook", cpu={0: 0.04}, gpus=[2])
    [rec] = IdleRelease().evaluate(cluster([node], [notebook])).recommendations
    assert rec.target.gpus == (2,)
