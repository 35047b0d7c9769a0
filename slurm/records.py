"""What toposcope knows about a Slurm cluster at one moment: typed, immutable records.

The reader (:mod:`toposcope.slurm.reader`) fills them from slurmrestd or from the Slurm
commands; both paths give the same records for the same cluster. CPU ids are Slurm's
*abstract* ids (``scontrol show job -d``'s ``CPU_IDs``): socket-major, then core, then thread,
which match Linux's numbering only where the BIOS numbers CPUs that way. GPU indices are the
node's GRES indices, in ``gres.conf`` order (``File=/dev/nvidia0`` is index 0 when listed first).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from toposcope.slurm.gres import Gres, gpu_count, gpu_indices


@dataclass(frozen=True)
class SlurmNode:
    """One node as slurmctld sees it.

    ``state`` is Slurm's base state in lower case (``idle``, ``mixed``, ``allocated``,
    ``down``...) and ``flags`` its modifiers (``DRAIN``, ``NOT_RESPONDING``...). ``gres`` is
    what the node offers (with the sockets of each kind), ``gres_used`` what jobs hold (with
    indices).
    """

    name: str
    state: str
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    cpus: int
    real_memory_mb: int = 0
    gres: tuple[Gres, ...] = ()
    gres_used: tuple[Gres, ...] = ()
    flags: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    alloc_cpus: int = 0
    reason: str = ""

    @property
    def gpus(self) -> int:
        """How many GPUs the node offers."""
        return gpu_count(self.gres)

    @property
    def gpus_used(self) -> tuple[int, ...]:
        """The indices of the GPUs jobs hold on the node."""
        return gpu_indices(self.gres_used)

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """The GPU types the node offers (``a100``), empty when its GPUs are untyped."""
        return tuple(sorted({g.type for g in self.gres if g.name == "gpu" and g.type}))


@dataclass(frozen=True)
class JobAllocation:
    """What a running job holds on one node: Slurm's CPU ids and GPU indices there."""

    node: str
    cpus: tuple[int, ...]
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True)
class RunningJob:
    """A running job with its exact allocation on every node it runs on.

    ``time_left_s`` is how long until Slurm ends it (its ``end_time`` minus the moment of the
    read, at least 0), ``None`` when the job has no time limit; ``time_limit_s`` likewise.
    ``restarts`` is how often Slurm requeued it (``restart_cnt``), ``requeue`` whether it may
    be requeued at all (batch jobs without ``--no-requeue`` where ``JobRequeue=1``).
    """

    job_id: int
    name: str
    user: str
    account: str
    partition: str
    allocations: tuple[JobAllocation, ...]
    start_time: float
    time_limit_s: int | None = None
    time_left_s: float | None = None
    comment: str = ""
    restarts: int = 0
    requeue: bool = False

    @property
    def nodes(self) -> tuple[str, ...]:
        """The nodes the job runs on, in Slurm's order."""
        return tuple(a.node for a in self.allocations)


@dataclass(frozen=True)
class PendingJob:
    """A job waiting to start: what it asks for, why it waits and for how long.

    ``gpus_per_node`` comes from ``--gres=gpu:N``, ``gpus_per_job`` from ``--gpus=N``;
    ``reason`` is Slurm's (``Resources``, ``Priority``, ``ReqNodeNotAvail``...).
    """

    job_id: int
    name: str
    user: str
    account: str
    partition: str
    reason: str
    submit_time: float
    wait_s: float
    nodes: int
    cpus: int
    gpus_per_node: int = 0
    gpus_per_job: int = 0
    gpu_type: str | None = None
    required_nodes: tuple[str, ...] = ()
    excluded_nodes: tuple[str, ...] = ()

    def gpus_each_node(self) -> int:
        """The GPUs the job needs on each of its nodes (``--gpus=N`` spread over its nodes)."""
        return self.gpus_per_node or -(-self.gpus_per_job // max(1, self.nodes))


@dataclass(frozen=True)
class ClusterState:
    """Nodes, running jobs and pending jobs read at ``read_at`` (Unix time) from ``source``.

    ``other_states`` holds the jobs that are neither running nor pending, with their state
    (``COMPLETING``, ``COMPLETED``, ``CANCELLED``...), as ``(job_id, state)`` pairs; Slurm
    forgets finished jobs after ``MinJobAge`` (300 s by default).
    """

    nodes: tuple[SlurmNode, ...]
    running: tuple[RunningJob, ...]
    pending: tuple[PendingJob, ...]
    read_at: float
    source: str
    other_jobs: int = field(default=0)
    other_states: tuple[tuple[int, str], ...] = ()

    def node(self, name: str) -> SlurmNode | None:
        """The node called ``name``, or ``None``."""
        return next((n for n in self.nodes if n.name == name), None)

    def job(self, job_id: int) -> RunningJob | PendingJob | None:
        """The running or pending job ``job_id``, or ``None``."""
        running = next((j for j in self.running if j.job_id == job_id), None)
        return running or next((j for j in self.pending if j.job_id == job_id), None)

    def state_of(self, job_id: int) -> str | None:
        """Slurm's state of job ``job_id`` (``RUNNING``, ``PENDING``, ``COMPLETED``...).

        ``None`` when Slurm does not know the job (never submitted, or finished and forgotten).
        """
        job = self.job(job_id)
        if job is not None:
            return "RUNNING" if isinstance(job, RunningJob) else "PENDING"
        return dict(self.other_states).get(job_id)
