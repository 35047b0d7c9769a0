"""The simulated cluster's state: nodes, workloads, the snapshots metrics are made from,
ground-truth rows, and the costs of the actions (:mod:`toposcope.sim.cluster`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from toposcope.rm import Allocation, NodeView, WorkloadState
from toposcope.sim.gpu_traffic import GpuCounters
from toposcope.sim.jobs import GIB, JobSpec
from toposcope.sim.model import Performance, memory_flows, thread_shares
from toposcope.sim.nodetemplate import NodeTemplate

PENDING = WorkloadState.PENDING
RUNNING = WorkloadState.RUNNING
DONE = WorkloadState.DONE

#: Page-migration speed of ``migrate_pages`` / cpuset memory migration (bytes per second).
MIGRATE_PAGES_BYTES_PER_SECOND = 4 * GIB
#: Checkpoint write plus restore read speed (bytes per second) and a fixed restart cost.
CHECKPOINT_BYTES_PER_SECOND = 2 * GIB
RESTART_SECONDS = 20.0
#: Share of a job's memory it allocates (touches anew) per second: drives numastat counters.
MEMORY_CHURN_PER_SECOND = 0.01
PAGE = 4096
#: The first process id given to a workload on each node.
FIRST_PID = 1000


def checkpoint_restore_seconds(job: JobSpec) -> float:
    """Simulated seconds a ``migrate`` costs: a restart plus writing and reading back the
    job's host memory and GPU memory at :data:`CHECKPOINT_BYTES_PER_SECOND`.
    """
    state = job.memory_bytes + job.gpus * job.gpu_memory_bytes
    return RESTART_SECONDS + state / CHECKPOINT_BYTES_PER_SECOND


@dataclass
class SimNode:
    """A node: its template and the counters integrated up to ``last_time``."""

    name: str
    template: NodeTemplate
    labels: dict[str, str] = field(default_factory=dict)
    workloads: set[str] = field(default_factory=set)
    last_time: float = 0.0
    cpu_busy: dict[int, float] = field(default_factory=dict)
    numastat: dict[int, dict[str, float]] = field(default_factory=dict)
    gpu_energy: dict[int, float] = field(default_factory=dict)
    gpu_counters: dict[int, GpuCounters] = field(default_factory=dict)
    next_pid: int = FIRST_PID
    version: int = 0
    view: NodeView | None = None


@dataclass
class SimWorkload:
    """A workload's mutable state (its :class:`JobSpec` is fixed)."""

    spec: JobSpec
    state: WorkloadState = PENDING
    allocation: Allocation | None = None
    pinned: bool = False
    progress: float = 0.0
    steps: float = 0.0
    cpu_seconds: float = 0.0
    #: memory traffic bytes by (thread node, ``local``/``remote``)
    #: (:mod:`~toposcope.sim.memory_traffic`)
    memory_traffic: dict[tuple[int, str], float] = field(default_factory=dict)
    started_at: float | None = None
    finished_at: float | None = None
    paused_until: float = 0.0
    perf: Performance | None = None
    #: the node model's performance alone (``perf`` is the gang's for a gang's part)
    node_perf: Performance | None = None
    pid: int = 0
    version: int = 0
    initial: Allocation | None = None


@dataclass(frozen=True)
class WorkloadSnapshot:
    """What a node's metrics need of one workload at one instant."""

    name: str
    spec: JobSpec
    allocation: Allocation
    pid: int
    thread_cpus: tuple[int, ...]
    cpu_seconds: float
    memory_by_node: dict[int, int]
    perf: Performance
    paused: bool
    #: memory traffic bytes by (thread node, ``local``/``remote``), a counter like ``cpu_seconds``
    memory_traffic: dict[tuple[int, str], float] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeSnapshot:
    """A node's state at simulated time ``now`` (for its metrics tree and fake NVML).

    ``cpu_busy``, ``numastat``, ``gpu_energy`` (joules per GPU index), ``gpu_counters``
    (traffic and activity per GPU index that has run a job) and the workloads'
    ``cpu_seconds`` are counters in the clock's counter time, ``counter_time``
    (:meth:`~toposcope.sim.clock.SimClock.counter_time`: wall-clock seconds when the
    simulation runs at a speed), which the uptime they are compared with must follow too.
    """

    name: str
    template: NodeTemplate
    now: float
    version: int
    workloads: tuple[WorkloadSnapshot, ...]
    cpu_busy: dict[int, float]
    numastat: dict[int, dict[str, float]]
    counter_time: float = 0.0
    gpu_energy: dict[int, float] = field(default_factory=dict)
    gpu_counters: dict[int, GpuCounters] = field(default_factory=dict)


@dataclass(frozen=True)
class TruthRow:
    """Ground truth of one workload: its throughput now and the best it could have."""

    name: str
    kind: str
    state: str
    node: str
    throughput: float
    best_throughput: float
    slowdown: float
    factors: dict[str, float]
    link_class: str
    progress_ratio: float | None


@dataclass(frozen=True)
class JobState:
    """One workload as the oracle sees it: its spec (as changed by actions, e.g. a released
    notebook has no GPUs), its state and its allocation (``None`` unless running).
    """

    name: str
    spec: JobSpec
    state: str
    allocation: Allocation | None


def memory_shares(allocation: Allocation, template: NodeTemplate, threads: int) -> dict[int, float]:
    """Share of a job's pages on each NUMA node under ``allocation`` (first touch by its
    threads, within its memory binding), before any spill."""
    shares = thread_shares(allocation, template, threads)
    mems = allocation.mems or template.numa_ids
    result: dict[int, float] = {}
    for (_, target), weight in memory_flows(shares, mems, template).items():
        result[target] = result.get(target, 0.0) + weight
    return result


def short_list(values: Sequence[int]) -> str:
    """At most eight values of a list, for an error message."""
    text = ", ".join(str(v) for v in values[:8])
    return f"[{text}{', ...' if len(values) > 8 else ''}]"
