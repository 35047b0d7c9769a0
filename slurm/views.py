"""Slurm's nodes and jobs as the resource-manager contract's nodes and workloads.

* A **workload** is a job, named ``slurm-job-<id>`` as the exporter names a Slurm job's
  cgroups, so that a recommendation made from metrics names the job Slurm knows; requests
  may also name a job by its bare id (``42``). A running job's allocation is its first
  node's (Slurm's order): the CPU ids and GPU indices it holds there; a pending job has no
  allocation and asks for ``gpus_requested`` GPUs per node.
* A **node**'s topology is what Slurm knows of it: sockets of cores of threads, CPUs numbered
  as Slurm numbers them (socket by socket, core by core, thread by thread), one NUMA node
  per socket, and its GPUs. A GPU's socket is known only where the node's GRES puts all GPUs
  of its kind on one socket (``gpu:2(S:0)``); the advisor takes the finer topology from the
  exporters' metrics.
"""

from __future__ import annotations

import re

from toposcope.rm import Allocation, NodeView, ResourceManagerError, WorkloadState, WorkloadView
from toposcope.slurm.records import PendingJob, RunningJob, SlurmNode
from toposcope.topology.model import Cpu, Gpu, NumaNode, Package, Topology

#: how the exporter names a Slurm job's workload, followed by the job id
WORKLOAD_PREFIX = "slurm-job-"
#: the workload kind of every Slurm job
KIND = "slurm"
_WORKLOAD_RE = re.compile(rf"(?:{WORKLOAD_PREFIX})?([0-9]{{1,10}})")


def workload_name(job_id: int) -> str:
    """The workload name of job ``job_id`` (``slurm-job-42``)."""
    return f"{WORKLOAD_PREFIX}{job_id}"


def job_id_of(workload: str) -> int:
    """The job id a workload name stands for; 404 when it names no Slurm job."""
    match = _WORKLOAD_RE.fullmatch(workload)
    if match is None or int(match.group(1)) == 0:
        raise ResourceManagerError(
            f"workload {workload[:80]!r} is not a Slurm job: Slurm's workloads are "
            f"{WORKLOAD_PREFIX}<job id> (or the bare job id)",
            404,
            "workload",
        )
    return int(match.group(1))


def node_topology(node: SlurmNode) -> Topology:
    """What Slurm knows of a node's topology (see the module docstring)."""
    per_core = node.threads_per_core
    per_socket = node.cores_per_socket * per_core
    socket_cpus = [tuple(range(s * per_socket, (s + 1) * per_socket)) for s in range(node.sockets)]
    memory = node.real_memory_mb * 1024 * 1024 // node.sockets
    cpus = tuple(
        Cpu(id=cpu, package=s, core=cpu // per_core, numa_node=s)
        for s in range(node.sockets)
        for cpu in socket_cpus[s]
    )
    gpus: list[Gpu] = []
    for gres in node.gres:
        if gres.name != "gpu":
            continue
        socket = gres.sockets[0] if len(gres.sockets) == 1 else None
        near = socket if socket is not None and socket < node.sockets else None
        gpus += [
            Gpu(
                index=len(gpus) + i,
                pci_bus_id=None,
                numa_node=near,
                local_cpus=socket_cpus[near] if near is not None else (),
            )
            for i in range(gres.count)
        ]
    return Topology(
        packages=tuple(Package(s, socket_cpus[s]) for s in range(node.sockets)),
        numa_nodes=tuple(NumaNode(s, s, socket_cpus[s], memory) for s in range(node.sockets)),
        cpus=cpus,
        gpus=tuple(gpus),
        source=f"slurm:{node.name}",
    )


def node_view(node: SlurmNode) -> NodeView:
    """A node with its topology; labels say its Slurm state and partitions."""
    labels = {
        "resource-manager": KIND,
        "slurm-state": node.state,
        "slurm-partitions": ",".join(node.partitions),
    }
    return NodeView(node.name, node_topology(node).to_dict(), labels)


def allocation_of(job: RunningJob, node: str | None = None) -> Allocation:
    """What ``job`` holds on ``node`` (default: its first node)."""
    held = next((a for a in job.allocations if node is None or a.node == node), None)
    if held is None:
        raise ResourceManagerError(f"job {job.job_id} holds nothing on node {node}", 409, "node")
    return Allocation(held.node, list(held.cpus), [], list(held.gpus))


def running_view(job: RunningJob) -> WorkloadView:
    """A running job with its allocation on its first node."""
    allocation = allocation_of(job) if job.allocations else None
    gpus = len(allocation.gpus) if allocation is not None else 0
    return WorkloadView(workload_name(job.job_id), KIND, WorkloadState.RUNNING, allocation, gpus)


def pending_view(job: PendingJob) -> WorkloadView:
    """A pending job with the nodes it asks for and the GPUs it asks for on each."""
    return WorkloadView(
        workload_name(job.job_id),
        KIND,
        WorkloadState.PENDING,
        None,
        job.gpus_each_node(),
        nodes_requested=max(1, job.nodes),
    )
