"""The simulated cluster's fabric and its multi-node jobs as the catalogue's fabric families.

The simulator's own ``/metrics`` serves them next to its queue (``scheduler="sim"``,
``partition="sim"``), as ``toposcope slurm exporter --fabric-...`` does for Slurm: the
fabric's switches and nodes, and for every multi-node job of the scenario
(:mod:`toposcope.sim.scenario_fabric`) whose parts run on two nodes or more, how far it is
spread (:mod:`toposcope.fabric.spread`). A part that is not running (pending, finished,
stopped) is left out, so a job whose parts no longer span two nodes has no series.
"""

from __future__ import annotations

from prometheus_client.core import Metric

from toposcope.fabric.job_families import fabric_families, job_families
from toposcope.fabric.spread import FabricIndex, JobPlacement, NodeShare
from toposcope.sim.cluster import RUNNING, SimCluster
from toposcope.sim.queue_metrics import PARTITION, SCHEDULER
from toposcope.sim.scenario_fabric import ScenarioFabric


class SimFabric:
    """A scenario's fabric, indexed once, and its multi-node jobs."""

    def __init__(self, declared: ScenarioFabric) -> None:
        self.index = FabricIndex(declared.fabric)
        self.multi_node_jobs = declared.multi_node_jobs
        self._fabric_series = fabric_families(declared.fabric)

    def placements(self, cluster: SimCluster) -> list[JobPlacement]:
        """Where each multi-node job's running parts are, one share per part."""
        running = {
            job.name: job.allocation
            for job in cluster.job_states()
            if job.state == RUNNING and job.allocation is not None
        }
        placements: list[JobPlacement] = []
        for name, parts in sorted(self.multi_node_jobs.items()):
            shares = tuple(
                NodeShare(allocation.node, len(allocation.gpus), tuple(allocation.gpus))
                for part in parts
                if (allocation := running.get(part)) is not None
            )
            placements.append(JobPlacement(SCHEDULER, PARTITION, name, shares))
        return placements

    def families(self, cluster: SimCluster) -> list[Metric]:
        """The fabric's series and its running multi-node jobs' spread, now."""
        spreads = self.index.spreads(self.placements(cluster))
        return [*self._fabric_series, *job_families(spreads)]
