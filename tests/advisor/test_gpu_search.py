"""The per-run GPU set searches behind job-migration and defragmentation."""

from __future__ import annotations

from tests.advisor.builders import cluster, pcie4, pcie8, workload
from toposcope.advisor.gpu_search import NO_SET, GpuSetSearch, worst_rank
from toposcope.advisor.gpu_sets import gpu_claims
from toposcope.topology.model import LinkType


def test_a_job_stays_on_its_node_when_another_node_is_as_good() -> None:
    job = workload("train", node="n8", gpus=[0, 4])
    model = cluster([pcie8("m8"), pcie8()], [job])
    best = GpuSetSearch(model, cross_node=True).best_for(job)
    assert best is not None and best.node == "n8" and best.worst_link == LinkType.PIX


def test_claimed_gpus_are_not_offered_again() -> None:
    job = workload("train", node="n8", gpus=[0, 4])
    search = GpuSetSearch(cluster([pcie8()], [job]), cross_node=True)
    first = search.best_for(job)
    assert first is not None
    taken = set(gpu_claims(first.node, first.gpus))
    second = search.best_for(job, taken)
    assert second is not None and not taken & set(gpu_claims(second.node, second.gpus))
    free = search.free_best(2, taken)
    assert free is not None and not taken & set(gpu_claims(free.node, free.gpus))


def test_other_nodes_count_only_across_nodes() -> None:
    job = workload("train", node="a", gpus=[1, 2])
    others = [workload("x", node="a", gpus=[0]), workload("y", node="a", gpus=[3])]
    model = cluster([pcie4("a"), pcie4("b")], [job, *others])
    across = GpuSetSearch(model, cross_node=True).best_for(job)
    assert across is not None and (across.node, across.gpus) == ("b", (0, 1))
    local = GpuSetSearch(model, cross_node=False).best_for(job)
    assert local is not None and (local.node, local.gpus) == ("a", (1, 2))
    assert GpuSetSearch(model, cross_node=False).best_for(job, include_own=False) is None


def test_ideal_ranks_ignore_who_holds_the_gpus() -> None:
    busy = [workload(f"s{g}", node="n8", gpus=[g]) for g in range(8)]
    search = GpuSetSearch(cluster([pcie8(), pcie4()], busy), cross_node=True)
    assert search.ideal_rank("n8", 4) == LinkType.NODE.rank  # one socket, two switches
    assert search.ideal_rank("n8", 8) == LinkType.SYS.rank
    assert search.ideal_rank("n1", 8) == NO_SET  # four GPUs cannot hold eight
    assert search.floor_any(2) == LinkType.PIX.rank
    assert search.able_nodes(2, LinkType.NODE.rank) == ["n1", "n8"]
    assert search.able_nodes(4, LinkType.SYS.rank) == ["n8"]  # n1's four span both sockets
    assert search.free_best(2, ()) is not None
    assert worst_rank(None) == NO_SET


def test_only_claims_on_free_gpus_change_a_nodes_offer() -> None:
    job = workload("train", node="a", gpus=[1, 2])
    holder = workload("x", node="b", gpus=[0])
    search = GpuSetSearch(cluster([pcie4("a"), pcie4("b")], [job, holder]), cross_node=True)
    assert search.free_claimed("b", {"gpu:b/2"})
    assert not search.free_claimed("b", {"gpu:b/0", "gpu:a/3"})  # held, or another node's
    alone = search.best_for(job, include_own=False)
    assert alone is not None and (alone.node, alone.gpus) == ("b", (2, 3))
    assert search.best_for(job, {"gpu:b/0"}, include_own=False) == alone
    moved = search.best_for(job, {"gpu:b/2"}, include_own=False)
    assert moved is not None and "gpu:b/2" not in gpu_claims(moved.node, moved.gpus)
