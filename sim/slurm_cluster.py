"""A simulated cluster whose scheduler is a real Slurm: :class:`SlurmMirroredCluster`.

The simulator stays the hardware (performance model, counters, per-node metrics, ground
truth); Slurm decides who runs where. This subclass of :class:`~toposcope.sim.cluster.SimCluster`
runs no scheduler of its own and takes its allocations from outside
(:mod:`toposcope.sim.slurm_mirror` reads them from Slurm):

* :meth:`~SlurmMirroredCluster.run_on` starts a workload on the node, CPUs and GPUs Slurm gave
  it; a workload that ran before (requeued, e.g. migrated) pays the checkpoint-restore time
  before it makes progress again, as the simulator's own ``migrate`` does;
* :meth:`~SlurmMirroredCluster.requeue` takes a running workload off its node (it keeps its
  progress) while Slurm holds it pending;
* :meth:`~SlurmMirroredCluster.end` marks a workload done that Slurm ended (cancelled, timed out).

Its own resource-manager API serves reads only: actions go to Slurm.
"""

from __future__ import annotations

from toposcope.rm import Allocation, WorkloadState
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import SimCluster, checkpoint_restore_seconds


class SlurmMirroredCluster(SimCluster):
    """Simulated nodes whose workloads run where Slurm puts them (see the module docstring)."""

    def __init__(self, clock: SimClock | None = None) -> None:
        super().__init__(clock, scheduler="none")

    def run_on(self, name: str, allocation: Allocation) -> bool:
        """Run workload ``name`` on ``allocation`` (Linux CPU ids, GPU indices); whether it
        changed anything. A workload already running there is left alone; one running
        elsewhere moves; one that ran before restarts from its checkpoint.
        """
        with self._lock:
            self.sync()
            workload = self._find(name)
            if workload.state == WorkloadState.DONE:
                return False
            current = workload.allocation
            if (
                current is not None
                and current.node == allocation.node
                and set(current.gpus) == set(allocation.gpus)
                and (not allocation.cpus or set(current.cpus) == set(allocation.cpus))
            ):
                return False
            restarted = workload.started_at is not None
            old = self._remove(workload)
            if old is not None:
                self._refresh(old)
            if restarted:
                workload.paused_until = self._time + checkpoint_restore_seconds(workload.spec)
            self._start(workload, allocation, pinned=bool(allocation.cpus))
            return True

    def requeue(self, name: str) -> bool:
        """Take running workload ``name`` off its node, keeping its progress; whether it ran."""
        with self._lock:
            self.sync()
            workload = self._find(name)
            if workload.state != WorkloadState.RUNNING:
                return False
            node = self._remove(workload)
            workload.state = WorkloadState.PENDING
            if node is not None:
                self._refresh(node)
            return True

    def end(self, name: str) -> bool:
        """Mark workload ``name`` done (Slurm ended it); whether it was not done yet."""
        with self._lock:
            self.sync()
            workload = self._find(name)
            if workload.state == WorkloadState.DONE:
                return False
            if workload.state == WorkloadState.RUNNING:
                self._finish(workload)
            else:
                workload.state = WorkloadState.DONE
                workload.finished_at = self._time
            return True

    def done_names(self) -> set[str]:
        """The workloads that are done (the simulator finished their work, or Slurm ended them)."""
        with self._lock:
            self.sync()
            return {w.name for w in self.job_states() if w.state == WorkloadState.DONE}
