"""gpu-placement: the set ranking, place() and the policy for pending jobs."""

from __future__ import annotations

import pytest

from tests.advisor.builders import cluster, pcie4, pcie8, workload
from toposcope.advisor.gpu_sets import cells, first_fit, link_factor, place, rank_sets
from toposcope.advisor.model import NodeModel, PendingWorkload
from toposcope.advisor.policies.gpu_placement import GpuPlacement
from toposcope.rm import ActionKind
from toposcope.topology.model import LinkType


def test_cells_are_switches_and_sockets() -> None:
    assert cells(pcie8()) == [
        frozenset({0, 1}),
        frozenset({2, 3}),
        frozenset({4, 5}),
        frozenset({6, 7}),
        frozenset({0, 1, 2, 3}),
        frozenset({4, 5, 6, 7}),
    ]


def test_best_pair_is_on_one_switch() -> None:
    [best, *_] = rank_sets(pcie8(), range(8), 2)
    assert best.gpus == (0, 1)
    assert best.worst_link == LinkType.PIX


def test_nvlink_beats_pcie_switch() -> None:
    node = pcie4()
    links = dict(node.links)
    links[(2, 3)] = links[(3, 2)] = "NV4"
    [best, *_] = rank_sets(NodeModel("n1", node.numa_nodes, node.gpus, links), range(4), 2)
    assert best.gpus == (2, 3)
    assert best.worst_link == LinkType.NVLINK


def test_fragmentation_breaks_the_tie_buddy_style() -> None:
    # GPU 0 busy: (2,3) and (4,5) and (6,7) are all PIX pairs; (2,3) keeps socket 1 whole
    ranked = rank_sets(pcie8(), [1, 2, 3, 4, 5, 6, 7], 2)
    assert [p.gpus for p in ranked[:3]] == [(2, 3), (4, 5), (6, 7)]
    assert ranked[0].broken_cells < ranked[1].broken_cells


def test_four_gpus_stay_on_one_socket() -> None:
    [best, *_] = rank_sets(pcie8(), range(8), 4)
    assert best.gpus == (0, 1, 2, 3)
    assert best.worst_link == LinkType.NODE


def test_too_few_free_gpus_gives_nothing() -> None:
    assert rank_sets(pcie4(), [0], 2) == []
    assert place(cluster([pcie4()]), 5) == []


def test_place_skips_held_gpus_and_ranks_across_nodes() -> None:
    holder = workload("holder", node="n8", gpus=[0])
    model = cluster([pcie4("a4"), pcie8("n8")], [holder])
    options = place(model, 2)
    assert (options[0].node, options[0].gpus) == ("a4", (0, 1))  # same score: node name
    only_n8 = place(model, 2, node="n8")
    assert {p.node for p in only_n8} == {"n8"}
    assert only_n8[0].gpus == (2, 3)


def test_lost_gpus_are_not_offered() -> None:
    node = pcie4()
    gpus = tuple(g if g.index != 1 else type(g)(**{**g.__dict__, "up": False}) for g in node.gpus)
    model = cluster([NodeModel("n1", node.numa_nodes, gpus, node.links)])
    assert model.free_gpus("n1") == (0, 2, 3)
    assert place(model, 2)[0].gpus == (2, 3)


def test_policy_places_pending_jobs_without_sharing_gpus() -> None:
    holder = workload("holder", node="n8", gpus=[0])
    model = cluster(
        [pcie8()],
        [holder],
        pending=[PendingWorkload("small", 2), PendingWorkload("big", 4)],
    )
    result = GpuPlacement().evaluate(model)
    by_job = {r.target.workload: r for r in result.recommendations}
    assert by_job["big"].proposed["gpus"] == [4, 5, 6, 7]
    assert by_job["small"].proposed["gpus"] == [2, 3]
    [action] = by_job["small"].actions
    assert action.kind == ActionKind.PLACE and action.gpus == [2, 3] and action.mems == [0]
    assert action.cpus == list(range(8))
    # first fit would give GPUs 1,2 (NODE, factor 1.4) for the first job it sees
    assert first_fit(model, 2) is not None
    assert by_job["small"].claims == ("gpu:n8/2", "gpu:n8/3", "workload:pending/small")


def test_gain_is_against_first_fit() -> None:
    holder = workload("holder", node="n8", gpus=[0])
    model = cluster([pcie8()], [holder], pending=[PendingWorkload("job", 2)])
    [rec] = GpuPlacement().evaluate(model).recommendations
    assert rec.current["first_fit"]["gpus"] == [1, 2]
    assert rec.estimated_gain == pytest.approx(link_factor(LinkType.NODE) / 1.0 - 1)


def test_job_that_fits_nowhere_is_noted() -> None:
    model = cluster([pcie4()], pending=[PendingWorkload("huge", 8)])
    result = GpuPlacement().evaluate(model)
    assert result.recommendations == ()
    assert "no node has 8 free GPU(s)" in result.undecided[0].reason


def test_without_pending_jobs_the_policy_says_why() -> None:
    result = GpuPlacement().evaluate(cluster([pcie4()]))
    assert "no pending GPU jobs known" in result.undecided[0].reason
