"""The queue as the metrics see it: per partition and per account, from one cluster state.

Definitions (``docs/slurm.md`` shows them with examples):

- A node is **available** unless it is down, unknown, future or flagged ``DRAIN``,
  ``FAIL``, ``NOT_RESPONDING``, ``MAINTENANCE`` or powered down. Its **free GPUs** are those
  it offers minus those jobs hold; on a node that is not available they are unavailable.
- A pending job's **per-node GPUs** are its ``--gres=gpu:N`` or, for ``--gpus=N``, N over
  its node count rounded up; its **GPUs** are that times its nodes. Its **eligible nodes**
  are the available nodes of its partition that it does not exclude, among those it requires
  if it requires some, offering its GPU type if it names one.
- A job Slurm keeps waiting for ``resources`` waits on **topology** when its eligible nodes
  have enough free GPUs for it in total but fewer of them than its node count have its
  per-node GPUs free: moving GPUs between nodes would let it start. CPUs and memory are not
  considered: a job that fits by GPUs but still waits keeps ``resources``.
- **Startable** jobs wait for resources, topology or priority: not held, not on a
  dependency, not on a quota of their own. They set the fragmentation, the accounts'
  demand and the accounts' oldest wait.
- **Fragmented GPUs** are the free GPUs of available nodes that have some free but fewer than
  the smallest per-node GPU request among the partition's startable GPU jobs (0 when none
  waits for GPUs).
- An account's **fair share** is its part of the partition's available GPUs (free plus
  allocated) split max-min fairly by demand (held plus asked for by startable jobs): every
  account with demand gets an equal part (or one proportional to its accounting shares),
  parts above an account's demand go to the others.
- **Labels**: partition names pass :func:`~toposcope.identity.workload.bounded_label_value`
  (a broken one is ``(invalid)``); accounts are labelled by
  :func:`~toposcope.queue.accounts.account_labels` after their figures and fair shares are
  computed under Slurm's own names: at most ``max_accounts`` per partition keep their label,
  the others are summed under ``(other)``.
- A running job's **time left** is how long until Slurm ends it (its end time minus the
  moment of the read), published per job under the workload name the node exporters give
  its cgroup (``slurm-job-<id>``), so the advisor can tell a job about to end. Only running
  jobs with a time limit have one: one series per such job, gone when it ends.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from toposcope.identity.workload import bounded_label_value
from toposcope.queue.accounts import (
    DEFAULT_MAX_ACCOUNTS,
    OTHER_ACCOUNT,
    AccountLabels,
    account_labels,
)
from toposcope.queue.fairshare import fair_shares
from toposcope.slurm.queue_reasons import categorize
from toposcope.slurm.records import ClusterState, PendingJob, RunningJob, SlurmNode
from toposcope.slurm.views import workload_name

#: node states in which a node takes no jobs
UNAVAILABLE_STATES = frozenset({"down", "unknown", "future", "error"})
#: node flags with which a node takes no new jobs
UNAVAILABLE_FLAGS = frozenset(
    {"DRAIN", "FAIL", "NOT_RESPONDING", "MAINTENANCE", "POWERED_DOWN", "POWERING_DOWN"}
)
#: pending categories of jobs that could start if resources were there
STARTABLE = frozenset({"resources", "topology", "priority"})
#: the figures an account's usage sums (its oldest wait is a maximum, apart)
_SUMMED = (
    "running_jobs",
    "pending_jobs",
    "allocated_gpus",
    "allocated_cpus",
    "pending_gpus",
    "startable_gpus",
    "fair_share_gpus",
)


@dataclass(frozen=True)
class ClassifiedJob:
    """A pending job in one partition with its reason labels and GPU request."""

    job: PendingJob
    partition: str
    reason: str
    scheduler_reason: str
    gpus_per_node: int
    gpus: int


@dataclass(frozen=True)
class PartitionQueue:
    """One partition's GPUs and pending jobs."""

    name: str
    free_gpus: int
    allocated_gpus: int
    unavailable_gpus: int
    largest_free_block: int
    fragmented_gpus: int
    pending: tuple[ClassifiedJob, ...]


@dataclass(frozen=True)
class AccountUsage:
    """What one account holds and waits for in one partition."""

    partition: str
    account: str
    running_jobs: int = 0
    pending_jobs: int = 0
    allocated_gpus: int = 0
    allocated_cpus: int = 0
    pending_gpus: int = 0
    startable_gpus: int = 0
    oldest_wait_s: float | None = None
    fair_share_gpus: float = 0.0


@dataclass(frozen=True)
class JobTimeLeft:
    """How long until Slurm ends one running job, under its partition and workload labels."""

    partition: str
    workload: str
    seconds: float


@dataclass(frozen=True)
class QueueSnapshot:
    """Every partition's queue and every account's usage at one moment.

    ``account_labels`` says, per partition, which label each of Slurm's account names is
    published under (the priority factors follow it), and how many were folded.
    ``time_left`` has one entry per running job with a time limit.
    """

    partitions: tuple[PartitionQueue, ...]
    accounts: tuple[AccountUsage, ...]
    account_labels: Mapping[str, AccountLabels] = field(default_factory=dict)
    time_left: tuple[JobTimeLeft, ...] = ()

    def account_label(self, partition: str, account: str) -> str:
        """The label of Slurm's ``account`` in ``partition`` (a partition label)."""
        labels = self.account_labels.get(partition)
        return labels.label(account) if labels is not None else OTHER_ACCOUNT


def available(node: SlurmNode) -> bool:
    """Whether ``node`` may take new jobs."""
    return node.state not in UNAVAILABLE_STATES and not UNAVAILABLE_FLAGS & set(node.flags)


def free_gpus(node: SlurmNode) -> int:
    """GPUs of ``node`` no job holds (0 on a node that is not available)."""
    return max(0, node.gpus - len(node.gpus_used)) if available(node) else 0


def _eligible(job: PendingJob, nodes: Iterable[SlurmNode]) -> list[SlurmNode]:
    required = set(job.required_nodes)
    return [
        n
        for n in nodes
        if available(n)
        and n.name not in job.excluded_nodes
        and (not required or n.name in required)
        and (job.gpu_type is None or job.gpu_type in n.gpu_types)
    ]


def classify(job: PendingJob, partition: str, nodes: Iterable[SlurmNode]) -> ClassifiedJob:
    """``job``'s reason labels and GPU request in ``partition`` (whose nodes are ``nodes``)."""
    reason, scheduler_reason = categorize(job.reason)
    per_node = job.gpus_each_node()
    total = job.gpus_per_node * job.nodes if job.gpus_per_node else job.gpus_per_job
    if reason == "resources" and per_node > 0:
        eligible = _eligible(job, nodes)
        free = [free_gpus(n) for n in eligible]
        fitting = sum(1 for f in free if f >= per_node)
        if sum(free) >= total and fitting < job.nodes:
            reason = "topology"
    return ClassifiedJob(job, partition, reason, scheduler_reason, per_node, total)


def _partition_queue(
    name: str, nodes: list[SlurmNode], pending: list[ClassifiedJob]
) -> PartitionQueue:
    free = [free_gpus(n) for n in nodes]
    allocated = sum(min(n.gpus, len(n.gpus_used)) for n in nodes)
    total = sum(n.gpus for n in nodes)
    requests = [c.gpus_per_node for c in pending if c.reason in STARTABLE and c.gpus_per_node]
    smallest = min(requests, default=0)
    return PartitionQueue(
        name=name,
        free_gpus=sum(free),
        allocated_gpus=allocated,
        unavailable_gpus=total - allocated - sum(free),
        largest_free_block=max(free, default=0),
        fragmented_gpus=sum(f for f in free if 0 < f < smallest),
        pending=tuple(pending),
    )


def _usage(
    state: ClusterState, partitions: Mapping[str, PartitionQueue]
) -> tuple[dict[tuple[str, str], dict[str, float]], dict[tuple[str, str], float]]:
    """Figures and oldest startable wait per (partition, Slurm's own account name)."""
    usage: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    oldest: dict[tuple[str, str], float] = {}
    for job in state.running:
        partition = bounded_label_value(job.partition)
        if partition not in partitions:
            continue
        key = (partition, job.account)
        usage[key]["running_jobs"] += 1
        usage[key]["allocated_gpus"] += sum(len(a.gpus) for a in job.allocations)
        usage[key]["allocated_cpus"] += sum(len(a.cpus) for a in job.allocations)
    for queue in partitions.values():
        for c in queue.pending:
            key = (queue.name, c.job.account)
            usage[key]["pending_jobs"] += 1
            usage[key]["pending_gpus"] += c.gpus
            if c.reason in STARTABLE:
                usage[key]["startable_gpus"] += c.gpus
                oldest[key] = max(oldest.get(key, 0.0), c.job.wait_s)
    return usage, oldest


def _accounts(
    state: ClusterState,
    partitions: Mapping[str, PartitionQueue],
    weights: Mapping[str, float],
    max_accounts: int,
) -> tuple[list[AccountUsage], dict[str, AccountLabels]]:
    usage, oldest = _usage(state, partitions)
    for queue in partitions.values():
        demand = {
            a: u["allocated_gpus"] + u["startable_gpus"]
            for (p, a), u in usage.items()
            if p == queue.name
        }
        capacity = queue.free_gpus + queue.allocated_gpus
        for account, value in fair_shares(capacity, demand, weights).items():
            usage[(queue.name, account)]["fair_share_gpus"] = value
    labels = {
        queue.name: account_labels(
            {
                a: (
                    u["allocated_gpus"] + u["pending_gpus"],
                    u["running_jobs"] + u["pending_jobs"],
                    u["allocated_cpus"],
                )
                for (p, a), u in usage.items()
                if p == queue.name
            },
            max_accounts,
        )
        for queue in partitions.values()
    }
    labelled: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    waits: dict[tuple[str, str], float] = {}
    for (partition, account), figures in usage.items():
        key = (partition, labels[partition].label(account))
        for name in _SUMMED:
            labelled[key][name] += figures[name]
        if (partition, account) in oldest:
            waits[key] = max(waits.get(key, 0.0), oldest[(partition, account)])
    accounts = [
        AccountUsage(
            partition=partition,
            account=account,
            running_jobs=int(u["running_jobs"]),
            pending_jobs=int(u["pending_jobs"]),
            allocated_gpus=int(u["allocated_gpus"]),
            allocated_cpus=int(u["allocated_cpus"]),
            pending_gpus=int(u["pending_gpus"]),
            startable_gpus=int(u["startable_gpus"]),
            oldest_wait_s=waits.get((partition, account)),
            fair_share_gpus=u["fair_share_gpus"],
        )
        for (partition, account), u in sorted(labelled.items())
    ]
    return accounts, labels


def time_left(running: Iterable[RunningJob]) -> tuple[JobTimeLeft, ...]:
    """The time left of every job of ``running`` that has a time limit, by job id.

    The workload is :func:`~toposcope.slurm.views.workload_name` of the job id, the name the
    node exporters give the job's cgroup; the partition passes
    :func:`~toposcope.identity.workload.bounded_label_value` like every queue label.
    """
    return tuple(
        JobTimeLeft(bounded_label_value(job.partition), workload_name(job.job_id), job.time_left_s)
        for job in sorted(running, key=lambda j: j.job_id)
        if job.time_left_s is not None
    )


def queue_snapshot(
    state: ClusterState,
    weights: Mapping[str, float] | None = None,
    max_accounts: int = DEFAULT_MAX_ACCOUNTS,
) -> QueueSnapshot:
    """The queue of every partition that has nodes, and every account's usage.

    ``weights`` are the accounts' shares (Slurm's NormShares) where accounting gives them. A
    pending job submitted to several partitions (``-p a,b``) counts in each; partitions
    without nodes are left out. At most ``max_accounts`` accounts per partition keep their
    own label (see the module docstring).
    """
    members: dict[str, list[SlurmNode]] = defaultdict(list)
    for node in state.nodes:
        for partition in dict.fromkeys(bounded_label_value(p) for p in node.partitions):
            members[partition].append(node)
    pending: dict[str, list[ClassifiedJob]] = defaultdict(list)
    for job in state.pending:
        for partition in dict.fromkeys(bounded_label_value(p) for p in job.partition.split(",")):
            if partition in members:
                pending[partition].append(classify(job, partition, members[partition]))
    partitions = {
        name: _partition_queue(name, nodes, pending[name]) for name, nodes in members.items()
    }
    accounts, labels = _accounts(state, partitions, weights or {}, max_accounts)
    return QueueSnapshot(
        partitions=tuple(partitions[name] for name in sorted(partitions)),
        accounts=tuple(accounts),
        account_labels=labels,
        time_left=time_left(state.running),
    )
