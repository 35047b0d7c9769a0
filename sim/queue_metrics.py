"""The simulated scheduler's queue as the catalogue's scheduler-neutral queue families.

The families are :mod:`toposcope.catalogue.queue_metrics`'s, with ``scheduler="sim"`` and
one partition, :data:`PARTITION` (every node of the simulated cluster), so the queue
dashboards and alert rules written for Slurm show the simulator's queue too. The simulator
maps its pending jobs onto the bounded reasons:

* ``topology``: the cluster has enough free GPUs for the job in all, but no one node holds
  as many (the GPUs are free, only split the wrong way);
* ``resources``: not enough free GPUs (or, for a CPU job, free CPUs) anywhere.

It has no quotas, priorities, dependencies, holds or gangs, so other reasons never occur.
A job's ``account`` (tenant) is the part of its name before the first ``-`` (``team-a``
-> ``team``; :func:`account_of`). The account's fair share is the max-min fair split of all
GPUs among the accounts that want GPUs (held plus asked for by waiting jobs), equal
weights: Dominant Resource Fairness with GPUs as every account's dominant resource. CPUs
held are the threads of the account's running jobs (simulated jobs are rarely pinned).
Account labels are bounded as the Slurm exporter bounds them
(:func:`~toposcope.queue.accounts.account_labels`, at most
:data:`~toposcope.queue.accounts.DEFAULT_MAX_ACCOUNTS` with their own series, the rest summed
under ``(other)`` after the fair shares are computed); jobs submitted through the
simulator's API name their own tenants.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import Metric

from toposcope.catalogue import spec
from toposcope.queue.accounts import DEFAULT_MAX_ACCOUNTS, account_labels
from toposcope.queue.fairshare import fair_shares
from toposcope.sim.cluster import PENDING, RUNNING, JobState, SimCluster

SCHEDULER = "sim"
PARTITION = "sim"
#: the simulator's own words for its two reasons (``scheduler_reason``)
OWN_REASON = {"resources": "NoFreeGpus", "topology": "GpusSplitAcrossNodes"}
DEFAULT_ACCOUNT = "default"


def account_of(workload: str) -> str:
    """The tenant of a workload: its name up to the first ``-`` (unit suffix left out)."""
    base = workload.removesuffix(".service").removesuffix(".scope")
    head = base.split("-", 1)[0]
    return head or DEFAULT_ACCOUNT


@dataclass
class _Account:
    running: int = 0
    pending: int = 0
    gpus: int = 0
    cpus: int = 0
    pending_gpus: int = 0
    oldest_wait: float | None = None


@dataclass
class QueueState:
    """The queue at one instant: pending jobs by reason, GPUs, accounts."""

    now: float
    free_by_node: dict[str, int]
    allocated: int
    waits: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    accounts: dict[str, _Account] = field(default_factory=dict)


def _reason(job: JobState, free: Mapping[str, int], cpus_free: Mapping[str, int]) -> str:
    if job.spec.gpus:
        fits = any(f >= job.spec.gpus for f in free.values())
        return "topology" if not fits and sum(free.values()) >= job.spec.gpus else "resources"
    fits = any(f >= job.spec.threads for f in cpus_free.values())
    return "topology" if not fits and sum(cpus_free.values()) >= job.spec.threads else "resources"


def queue_state(cluster: SimCluster) -> QueueState:
    """Read the cluster's queue now (pending jobs count once they have arrived)."""
    jobs = cluster.job_states()
    now = cluster.now
    nodes = cluster.node_names()
    held = {n: 0 for n in nodes}
    threads = {n: 0 for n in nodes}
    for job in jobs:
        if job.state == RUNNING and job.allocation is not None:
            held[job.allocation.node] += len(job.allocation.gpus)
            threads[job.allocation.node] += job.spec.threads
    free = {n: len(cluster.template_of(n).gpus) - held[n] for n in nodes}
    cpus_free = {n: max(len(cluster.template_of(n).cpus) - threads[n], 0) for n in nodes}
    state = QueueState(now, free, sum(held.values()))
    for job in jobs:
        account = state.accounts.setdefault(account_of(job.name), _Account())
        if job.state == RUNNING:
            account.running += 1
            account.gpus += len(job.allocation.gpus) if job.allocation else 0
            account.cpus += job.spec.threads
        elif job.state == PENDING and job.spec.submit_time <= now:
            wait = now - job.spec.submit_time
            account.pending += 1
            account.pending_gpus += job.spec.gpus
            account.oldest_wait = max(wait, account.oldest_wait or 0.0)
            reason = _reason(job, free, cpus_free)
            state.waits.setdefault(reason, []).append((wait, job.spec.gpus))
    state.accounts = {a: v for a, v in state.accounts.items() if v.running or v.pending}
    return state


def queue_families(
    cluster: SimCluster, max_accounts: int = DEFAULT_MAX_ACCOUNTS
) -> Iterator[Metric]:
    """The catalogue's ``toposcope_queue_*`` families for the simulated cluster now (see the
    module docstring); accounting-only families (``fairshare``, ``shares``, ``usage``) are
    left out, as a Slurm cluster without accounting leaves them. At most ``max_accounts``
    accounts keep their own series.
    """
    state = queue_state(cluster)
    base = [SCHEDULER, PARTITION]
    pending = spec("toposcope_queue_pending_jobs").family()
    pending_gpus = spec("toposcope_queue_pending_gpus").family()
    oldest = spec("toposcope_queue_pending_oldest_wait_seconds").family()
    mean = spec("toposcope_queue_pending_mean_wait_seconds").family()
    for reason in sorted(state.waits):
        rows = state.waits[reason]
        pending.add_metric([*base, reason, OWN_REASON[reason]], float(len(rows)))
        pending_gpus.add_metric([*base, reason], float(sum(g for _, g in rows)))
        oldest.add_metric([*base, reason], max(w for w, _ in rows))
        mean.add_metric([*base, reason], sum(w for w, _ in rows) / len(rows))
    yield from (pending, pending_gpus, oldest, mean)
    gpus = spec("toposcope_queue_gpus").family()
    gpus.add_metric([*base, "free"], float(sum(state.free_by_node.values())))
    gpus.add_metric([*base, "allocated"], float(state.allocated))
    gpus.add_metric([*base, "unavailable"], 0.0)
    largest = spec("toposcope_queue_largest_free_gpu_block").family()
    largest.add_metric(base, float(max(state.free_by_node.values(), default=0)))
    asks = [g for rows in state.waits.values() for _, g in rows if g > 0]
    smallest = min(asks, default=0)
    fragmented = spec("toposcope_queue_fragmented_gpus").family()
    fragmented.add_metric(
        base, float(sum(f for f in state.free_by_node.values() if 0 < f < smallest))
    )
    yield from (gpus, largest, fragmented)
    yield from _account_families(state, base, float(sum(state.free_by_node.values())), max_accounts)


def _folded(
    state: QueueState, free: float, max_accounts: int
) -> tuple[dict[str, _Account], dict[str, float], int]:
    """The accounts by label, their fair shares, and how many were folded into ``(other)``."""
    demand = {a: float(v.gpus + v.pending_gpus) for a, v in state.accounts.items()}
    shares = fair_shares(free + state.allocated, demand)
    labels = account_labels(
        {
            a: (float(v.gpus + v.pending_gpus), float(v.running + v.pending), float(v.cpus))
            for a, v in state.accounts.items()
        },
        max_accounts,
    )
    accounts: dict[str, _Account] = {}
    label_shares: dict[str, float] = {}
    for name, account in state.accounts.items():
        label = labels.label(name)
        into = accounts.setdefault(label, _Account())
        into.running += account.running
        into.pending += account.pending
        into.gpus += account.gpus
        into.cpus += account.cpus
        into.pending_gpus += account.pending_gpus
        if account.oldest_wait is not None:
            into.oldest_wait = max(account.oldest_wait, into.oldest_wait or 0.0)
        label_shares[label] = label_shares.get(label, 0.0) + shares[name]
    return accounts, label_shares, labels.folded


def _account_families(
    state: QueueState, base: list[str], free: float, max_accounts: int
) -> Iterator[Metric]:
    jobs = spec("toposcope_queue_account_jobs").family()
    allocated = spec("toposcope_queue_account_allocated_gpus").family()
    cpus = spec("toposcope_queue_account_allocated_cpus").family()
    asked = spec("toposcope_queue_account_pending_gpus").family()
    oldest = spec("toposcope_queue_account_oldest_wait_seconds").family()
    fair = spec("toposcope_queue_account_fair_share_gpus").family()
    folded = spec("toposcope_queue_accounts_folded").family()
    accounts, shares, count = _folded(state, free, max_accounts)
    folded.add_metric(base, float(count))
    for name in sorted(accounts):
        account = accounts[name]
        labels = [*base, name]
        jobs.add_metric([*labels, "running"], float(account.running))
        jobs.add_metric([*labels, "pending"], float(account.pending))
        allocated.add_metric(labels, float(account.gpus))
        cpus.add_metric(labels, float(account.cpus))
        asked.add_metric(labels, float(account.pending_gpus))
        if account.oldest_wait is not None:
            oldest.add_metric(labels, account.oldest_wait)
        fair.add_metric(labels, shares[name])
    yield from (folded, jobs, allocated, cpus, asked, oldest, fair)
