"""A gang moved onto other GPUs of the nodes it runs on: each part remapped onto the GPUs
(and CPUs, memory nodes) the move names, the gang's checkpoint-restore once; GPUs another job
holds refuse the move with nothing changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sim.test_gang import HALF_CABLED, rows, scenario
from toposcope.rm import ActionKind, ResourceManagerError
from toposcope.sim.cluster import SimCluster, checkpoint_restore_seconds
from toposcope.sim.gang_moves import GangMove, PartPlace, move_gang

FAR = 'cpus: "64-95,192-223", mems: [2]'
NEAR_CPUS = [*range(32), *range(128, 160)]
DP = "    - {name: dp, jobs: [a, b], pattern: data-parallel, comm_share: 0.2}\n"


def far_part(name: str, node: str) -> str:
    """A 4-GPU part on GPUs 4-7 of ``node`` (the socket without a cabled HCA), pinned there."""
    where = f"{{node: {node}, gpus: [4, 5, 6, 7], {FAR}}}"
    return f"  - {{name: {name}, type: gpu-train, gpus: 4, placement: {where}}}\n"


def nic_far(tmp_path: Path, extra: str = "") -> SimCluster:
    """Gang ``dp``: a on g-01 and b on g-02, both on GPUs 4-7, NIC-far (HCAs 0-3 cabled)."""
    return scenario(
        tmp_path, far_part("a", "g-01") + far_part("b", "g-02") + extra, DP, HALF_CABLED
    )


def near(cpus: list[int] | None = None) -> PartPlace:
    """GPUs 0-3 (under the cabled HCAs' PCIe switches), pinned to their socket's first node."""
    return PartPlace([0, 1, 2, 3], NEAR_CPUS if cpus is None else cpus, [0] if cpus is None else [])


def allocation(cluster: SimCluster, name: str) -> tuple[str, list[int], list[int], list[int]]:
    """Node, GPUs, CPUs and memory nodes of workload ``name``."""
    found = cluster.workload(f"{name}.service").allocation
    assert found is not None
    return found.node, found.gpus, found.cpus, found.mems


def test_a_gang_remapped_onto_near_gpus_of_its_own_nodes_pays_one_restart(
    tmp_path: Path,
) -> None:
    cluster = nic_far(tmp_path)
    slow = rows(cluster)["a"][1]
    state = move_gang(cluster, GangMove("r1", "dp", ["g-01", "g-02"], places=[near(), near()]))
    assert allocation(cluster, "a") == ("g-01", [0, 1, 2, 3], NEAR_CPUS, [0])
    assert allocation(cluster, "b") == ("g-02", [0, 1, 2, 3], NEAR_CPUS, [0])
    assert state.request.kind is ActionKind.MIGRATE and state.request.gpus == [0, 1, 2, 3]
    assert state.before is not None and state.before.gpus == [4, 5, 6, 7]
    parts = [cluster._find(n) for n in ("a.service", "b.service")]
    assert state.cost_seconds == max(checkpoint_restore_seconds(w.spec) for w in parts)
    assert rows(cluster)["a"][1] == 0.0  # the gang waits for its restart
    cluster.advance(state.cost_seconds + 1.0)
    assert rows(cluster)["a"][1] > slow  # NIC-near: faster than through the other socket
    assert rows(cluster)["a"][1] == rows(cluster)["b"][1]
    again = move_gang(cluster, GangMove("r1", "dp", ["g-01", "g-02"], places=[near(), near()]))
    assert again.id == state.id  # a repeat answers the first move


def test_a_part_already_in_its_place_stays_and_only_the_other_moves(tmp_path: Path) -> None:
    cluster = nic_far(tmp_path)
    here = PartPlace([4, 5, 6, 7], [*range(64, 96), *range(192, 224)], [2])
    state = move_gang(cluster, GangMove("r2", "dp", ["g-01", "g-02"], places=[here, near()]))
    assert state.request.workload == "b.service"
    assert allocation(cluster, "a")[1] == [4, 5, 6, 7]
    assert allocation(cluster, "b")[1] == [0, 1, 2, 3]
    with pytest.raises(ResourceManagerError) as caught:  # nothing left to change
        move_gang(cluster, GangMove("r3", "dp", ["g-01", "g-02"], places=[here, near()]))
    assert caught.value.status == 409


def test_a_null_place_leaves_its_part_as_it_is(tmp_path: Path) -> None:
    cluster = nic_far(tmp_path)
    was = allocation(cluster, "a")
    state = move_gang(cluster, GangMove("r7", "dp", ["g-01", "g-02"], places=[None, near()]))
    assert state.request.workload == "b.service"
    assert allocation(cluster, "a") == was and cluster._find("a.service").pinned
    assert cluster._find("b.service").pinned


def test_unpinned_places_run_unpinned(tmp_path: Path) -> None:
    cluster = nic_far(tmp_path)
    move_gang(cluster, GangMove("r4", "dp", ["g-01", "g-02"], places=[near([]), near([])]))
    assert not cluster._find("a.service").pinned
    assert len(allocation(cluster, "a")[2]) == 256  # every CPU of the node


def test_gpus_held_by_another_job_refuse_the_move_and_change_nothing(tmp_path: Path) -> None:
    other = "  - {name: c, type: gpu-train, gpus: 2, placement: {node: g-02, gpus: [0, 1]}}\n"
    cluster = nic_far(tmp_path, other)
    was = {n: allocation(cluster, n) for n in ("a", "b", "c")}
    with pytest.raises(ResourceManagerError) as caught:
        move_gang(cluster, GangMove("r5", "dp", ["g-01", "g-02"], places=[near(), near()]))
    assert caught.value.status == 409 and "c.service" in str(caught.value)
    assert {n: allocation(cluster, n) for n in ("a", "b", "c")} == was


@pytest.mark.parametrize(
    ("places", "status"),
    [
        ([PartPlace([0, 1, 2, 3])], 400),  # one place for two nodes
        ([PartPlace([0, 1, 2]), PartPlace([0, 1, 2, 3])], 400),  # three GPUs for a 4-GPU part
        ([PartPlace([0, 1, 2, 9]), PartPlace([0, 1, 2, 3])], 400),  # no GPU 9 on a DGX A100
        ([PartPlace([0, 1, 2, 3], [999]), PartPlace([0, 1, 2, 3])], 400),  # no CPU 999
    ],
)
def test_a_bad_place_is_refused(
    tmp_path: Path, places: list[PartPlace | None], status: int
) -> None:
    cluster = nic_far(tmp_path)
    with pytest.raises(ResourceManagerError) as caught:
        move_gang(cluster, GangMove("r6", "dp", ["g-01", "g-02"], places=places))
    assert caught.value.status == status
    assert allocation(cluster, "a")[1] == [4, 5, 6, 7]
    assert allocation(cluster, "b")[1] == [4, 5, 6, 7]
