"""Multi-node gang jobs under a real Slurm: one Slurm job each, one simulated part per node.

A scenario's gang (``fabric.multi_node_jobs`` with a ``pattern``) is submitted to Slurm as
one job of as many nodes as it has parts (``sbatch --nodes=N --ntasks-per-node=1
--gres=gpu:G``), so that Slurm, not the simulator, chooses its nodes (with
``TopologyPlugin=topology/tree``, the leaf switches too). In the simulator the job becomes a
gang named ``slurm-job-<id>`` whose parts are ``slurm-job-<id>-part<k>``: every part's cgroup
is the job's (:func:`~toposcope.sim.cgroup_paths.workload_cgroup`), so each node's exporter
names its share ``slurm-job-<id>`` as it names a real multi-node job's processes, and the
advisor sees one workload on several nodes.

:func:`gang_jobs` checks that a scenario's gangs can be submitted this way (every part asks
for the same GPUs and threads: Slurm gives each node the same share); :func:`register`
adds a submitted job's gang to the cluster's :class:`~toposcope.sim.gang_engine.GangBook`
before its parts are submitted; :func:`assign` pairs Slurm's per-node allocations with the
parts, a part already running on one of the job's nodes keeping it. :class:`GangParts` names
the parts of a cluster's gangs as they are now, for the exporters whose NICs carry their
traffic (:mod:`toposcope.sim.nicfs`; any cluster's gangs, but a Slurm job's parts exist only
once it is submitted, so the set cannot be fixed beforehand).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from toposcope.errors import ConfigError
from toposcope.rm import Allocation
from toposcope.sim.cluster import SimCluster
from toposcope.sim.gang_engine import GangBook
from toposcope.sim.gang_price import FabricPrices, Gang
from toposcope.sim.jobs import JobSpec
from toposcope.sim.slurm_cluster import SlurmMirroredCluster


class GangParts:
    """A live view: whether a workload is a part of one of ``cluster``'s gangs now."""

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster

    def __contains__(self, name: object) -> bool:
        book = self.cluster.gangs
        return book is not None and isinstance(name, str) and name in book.part_of


@dataclass(frozen=True)
class GangJob:
    """A scenario gang as one Slurm job: its parts (scenario names) and their shared shape."""

    gang: Gang
    spec: JobSpec

    @property
    def nodes(self) -> int:
        """The nodes the Slurm job asks for (one per part)."""
        return len(self.gang.parts)


def gang_jobs(gangs: Iterable[Gang], specs: Mapping[str, JobSpec]) -> dict[str, GangJob]:
    """Part name -> its gang as one Slurm job (:class:`ConfigError` for a gang whose parts
    differ in GPUs or threads, or name a job the scenario lacks).
    """
    by_part: dict[str, GangJob] = {}
    for gang in gangs:
        missing = [p for p in gang.parts if p not in specs]
        if missing:
            raise ConfigError(f"gang {gang.name} names jobs the scenario lacks: {missing[:3]}")
        shapes = {(specs[p].gpus, specs[p].threads) for p in gang.parts}
        if len(shapes) != 1:
            raise ConfigError(
                f"gang {gang.name}: Slurm gives every node of a job the same share, but its "
                f"parts ask for {sorted(shapes)} (GPUs, threads)"
            )
        job = GangJob(gang, specs[gang.parts[0]])
        for part in gang.parts:
            by_part[part] = job
    return by_part


def part_names(workload: str, count: int) -> tuple[str, ...]:
    """The simulated parts of Slurm job ``workload`` (``slurm-job-<id>``)."""
    return tuple(f"{workload}-part{k}" for k in range(count))


def register(
    cluster: SlurmMirroredCluster, prices: FabricPrices, job: GangJob, workload: str
) -> tuple[str, ...]:
    """Make ``workload``'s parts a gang of ``cluster`` (before they are submitted); the parts."""
    parts = part_names(workload, job.nodes)
    gang = Gang(workload, parts, job.gang.pattern, job.gang.comm_share)
    book = cluster.gangs
    known = list(book.gangs.values()) if book is not None else []
    cluster.use_gangs(GangBook(prices, [*known, gang]))
    return parts


def assign(
    parts: Sequence[str],
    allocations: Sequence[Allocation],
    current: Mapping[str, Allocation | None],
) -> dict[str, Allocation]:
    """Part -> its allocation among Slurm's ``allocations`` (one per node): a part already
    running on one of the nodes keeps that node, the others take the rest in Slurm's order.
    """
    if len(parts) != len(allocations):
        raise ValueError(f"{len(allocations)} allocations for {len(parts)} parts")
    by_node = {a.node: a for a in allocations}
    result: dict[str, Allocation] = {}
    for part in parts:
        now = current.get(part)
        if now is not None and now.node in by_node:
            result[part] = by_node.pop(now.node)
    rest = iter(by_node.values())
    for part in parts:
        if part not in result:
            result[part] = next(rest)
    return result
