"""An in-memory resource manager: the external system the API's tests talk to.

Two nodes and four workloads, with the validations the protocol documents (unknown
workload or node 404, GPUs taken 409, CPUs or NUMA nodes not on the node 400, a place on a
running job 409). Checking requests and the repeat rule come from the backend base every
resource manager shares. Action ids are ``act-N``, deliberately not the request id, so the
tests prove the API does not rely on the two being equal.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from toposcope.rm import (
    ActionKind,
    ActionRequest,
    ActionState,
    ActionStatus,
    Allocation,
    BaseResourceManager,
    NodeView,
    ResourceManagerError,
    WorkloadState,
    WorkloadView,
)


@dataclass(frozen=True)
class FakeNode:
    """A node's shape: CPUs per NUMA node and a GPU count (GPU i on NUMA node i // per node)."""

    name: str
    numa_cpus: tuple[tuple[int, ...], ...]
    gpus: int

    def cpus(self) -> set[int]:
        return {cpu for cpus in self.numa_cpus for cpu in cpus}

    def view(self) -> NodeView:
        per_numa = max(1, self.gpus // len(self.numa_cpus))
        numa_nodes = [
            {
                "id": i,
                "package": i,
                "cpus": list(cpus),
                "memory_bytes": 64 << 30,
                "distances": [10 if j == i else 21 for j in range(len(self.numa_cpus))],
            }
            for i, cpus in enumerate(self.numa_cpus)
        ]
        gpus = [
            {
                "index": g,
                "pci_bus_id": f"0000:{0x17 + g:02x}:00.0",
                "numa_node": g // per_numa,
                "local_cpus": list(self.numa_cpus[g // per_numa]),
            }
            for g in range(self.gpus)
        ]
        topology: dict[str, object] = {
            "packages": [{"id": n["id"], "cpus": n["cpus"]} for n in numa_nodes],
            "numa_nodes": numa_nodes,
            "pci_devices": [],
            "gpus": gpus,
            "gpu_links": [],
        }
        return NodeView(name=self.name, topology=topology, labels={"sim": "true"})


@dataclass
class FakeWorkload:
    """A workload's mutable state."""

    name: str
    kind: str
    state: WorkloadState
    allocation: Allocation | None
    gpus_requested: int = 0
    pinned: bool = False

    def view(self) -> WorkloadView:
        return WorkloadView(
            name=self.name,
            kind=self.kind,
            state=self.state,
            allocation=self.allocation,
            gpus_requested=self.gpus_requested,
            pinned=self.pinned,
        )


def _nodes() -> dict[str, FakeNode]:
    return {
        "node-a": FakeNode("node-a", ((0, 1, 2, 3), (4, 5, 6, 7)), gpus=2),
        "node-b": FakeNode("node-b", (tuple(range(8)), tuple(range(8, 16))), gpus=4),
    }


RUNNING = WorkloadState.RUNNING


def _workloads() -> dict[str, FakeWorkload]:
    return {
        "train-a": FakeWorkload(
            "train-a", "slurm", RUNNING, Allocation("node-a", [0, 1, 2, 3], [0], [0]), 1
        ),
        "infer-b": FakeWorkload(
            "infer-b", "kubernetes", RUNNING, Allocation("node-b", list(range(8)), [], [0, 1]), 2
        ),
        "idle-c": FakeWorkload("idle-c", "docker", RUNNING, Allocation("node-b", [], [], [2]), 1),
        "queued-d": FakeWorkload("queued-d", "slurm", WorkloadState.PENDING, None, 2),
    }


class FakeResourceManager(BaseResourceManager):
    """The in-memory resource manager; ``applied`` counts actions actually carried out."""

    def __init__(self) -> None:
        super().__init__()
        self.node_specs = _nodes()
        self.jobs = _workloads()
        self.applied = 0

    def nodes(self) -> list[NodeView]:
        return [node.view() for node in self.node_specs.values()]

    def workloads(self) -> list[WorkloadView]:
        with self._action_lock:
            return [job.view() for job in self.jobs.values()]

    def _carry_out(self, request: ActionRequest) -> ActionState:
        job = self.jobs.get(request.workload)
        if job is None:
            raise ResourceManagerError(f"unknown workload {request.workload!r}", 404)
        before = job.allocation
        after = self._change(job, request)
        job.allocation = after
        self.applied += 1
        return ActionState(
            id=f"act-{self.applied}",
            request=request,
            status=ActionStatus.SUCCEEDED,
            before=before,
            after=after,
            cost_seconds=30.0 if request.kind is ActionKind.MIGRATE else 0.0,
        )

    def _change(self, job: FakeWorkload, request: ActionRequest) -> Allocation | None:
        kind = ActionKind(request.kind)
        if kind in (ActionKind.PLACE, ActionKind.MIGRATE):
            return self._move(job, request, kind)
        if job.allocation is None or job.state != RUNNING:
            raise ResourceManagerError(f"workload {job.name!r} is not running", 409)
        node = self.node_specs[job.allocation.node]
        if kind is ActionKind.RELEASE:
            return replace(job.allocation, gpus=[])
        self._check_mems(node, request.mems)
        if kind is ActionKind.MIGRATE_MEMORY:
            return replace(job.allocation, mems=list(request.mems))
        self._check_cpus(node, request.cpus)
        job.pinned = True
        return replace(job.allocation, cpus=list(request.cpus), mems=list(request.mems))

    def _move(self, job: FakeWorkload, request: ActionRequest, kind: ActionKind) -> Allocation:
        if kind is ActionKind.PLACE and job.state != WorkloadState.PENDING:
            raise ResourceManagerError(f"workload {job.name!r} is already placed", 409)
        if kind is ActionKind.MIGRATE and job.state != RUNNING:
            raise ResourceManagerError(f"workload {job.name!r} is not running", 409)
        assert request.node is not None  # checked by the base: place and migrate need one
        node = self.node_specs.get(request.node)
        if node is None:
            raise ResourceManagerError(f"unknown node {request.node!r}", 404)
        missing = [g for g in request.gpus if g >= node.gpus]
        if missing:
            raise ResourceManagerError(f"GPUs {missing} are not on {node.name}", 400)
        taken = sorted(
            set(request.gpus)
            & {
                g
                for other in self.jobs.values()
                if other is not job and other.allocation and other.allocation.node == node.name
                for g in other.allocation.gpus
            }
        )
        if taken:
            raise ResourceManagerError(f"GPUs {taken} on {node.name} are taken", 409)
        self._check_cpus(node, request.cpus)
        self._check_mems(node, request.mems)
        job.state = RUNNING
        return Allocation(node.name, list(request.cpus), list(request.mems), list(request.gpus))

    @staticmethod
    def _check_cpus(node: FakeNode, cpus: list[int]) -> None:
        foreign = sorted(set(cpus) - node.cpus())
        if foreign:
            raise ResourceManagerError(f"CPUs {foreign} are not on {node.name}", 400)

    @staticmethod
    def _check_mems(node: FakeNode, mems: list[int]) -> None:
        foreign = sorted(set(mems) - set(range(len(node.numa_cpus))))
        if foreign:
            raise ResourceManagerError(f"NUMA nodes {foreign} are not on {node.name}", 400)
