"""The queue snapshot and the accounting figures as Prometheus families from the catalogue.

Every family carries ``scheduler="slurm"``. ``toposcope_queue_pending_gpus`` and
``toposcope_queue_gpus`` are published for every reason and state at zero too, so that rules
and panels see a series before anything waits; the other pending families only for what
waits. Wait-time families are gauges of the jobs still waiting (their oldest and mean wait):
a wait histogram's ``_count`` and ``_sum`` would have to be counters, which waits of jobs
still pending are not.

``toposcope_queue_job_time_left_seconds`` has one series per running job with a time limit
(its ``workload`` label is the node exporters' name of the job), so its cardinality follows
the running jobs, as the node exporters' per-workload series do; pending, suspended and
finished jobs and jobs without a limit have none.

Account labels are bounded (:mod:`toposcope.queue.accounts`): the snapshot has folded the
accounts beyond the limit into ``(other)``, and ``toposcope_queue_accounts_folded`` says how
many, per partition. sshare's ratios cannot be summed into a bucket, so the accounts beyond
the limit (by effective usage, then shares) and those with broken names are left out of the
accounting families, and ``toposcope_queue_accounting_accounts_left_out`` counts them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from prometheus_client.core import Metric

from toposcope.catalogue import families, nonempty, spec
from toposcope.catalogue.queue_metrics import GPU_STATES, PENDING_REASONS, PRIORITY_FACTORS
from toposcope.identity.workload import label_value
from toposcope.queue.accounts import DEFAULT_MAX_ACCOUNTS
from toposcope.slurm.queue import QueueSnapshot
from toposcope.slurm.queue_priority import PriorityAggregate

#: the ``scheduler`` label of every series this backend publishes
SCHEDULER = "slurm"

QUEUE_FAMILIES = (
    "toposcope_queue_pending_jobs",
    "toposcope_queue_pending_gpus",
    "toposcope_queue_pending_oldest_wait_seconds",
    "toposcope_queue_pending_mean_wait_seconds",
    "toposcope_queue_gpus",
    "toposcope_queue_largest_free_gpu_block",
    "toposcope_queue_fragmented_gpus",
    "toposcope_queue_accounts_folded",
    "toposcope_queue_account_jobs",
    "toposcope_queue_account_allocated_gpus",
    "toposcope_queue_account_allocated_cpus",
    "toposcope_queue_account_pending_gpus",
    "toposcope_queue_account_oldest_wait_seconds",
    "toposcope_queue_account_fair_share_gpus",
    "toposcope_queue_job_time_left_seconds",
)
PRIORITY_FAMILIES = (
    "toposcope_queue_priority_jobs",
    "toposcope_queue_priority_factor_mean",
    "toposcope_queue_priority_factor_max",
)
ACCOUNTING_FAMILIES = (
    "toposcope_queue_account_fairshare_ratio",
    "toposcope_queue_account_shares_ratio",
    "toposcope_queue_account_usage_ratio",
)
ACCOUNTING_LEFT_OUT = "toposcope_queue_accounting_accounts_left_out"


def queue_families(snapshot: QueueSnapshot) -> list[Metric]:
    """The ``toposcope_queue_*`` families of partitions and accounts."""
    out = families(QUEUE_FAMILIES)
    for queue in snapshot.partitions:
        where = [SCHEDULER, queue.name]
        counts: dict[tuple[str, str], int] = defaultdict(int)
        waits: dict[str, list[float]] = defaultdict(list)
        gpus = dict.fromkeys(PENDING_REASONS, 0)
        for job in queue.pending:
            counts[(job.reason, job.scheduler_reason)] += 1
            waits[job.reason].append(job.job.wait_s)
            gpus[job.reason] += job.gpus
        for (reason, scheduler_reason), count in sorted(counts.items()):
            out["toposcope_queue_pending_jobs"].add_metric(
                [*where, reason, scheduler_reason], count
            )
        for reason, value in gpus.items():
            out["toposcope_queue_pending_gpus"].add_metric([*where, reason], value)
        for reason, values in sorted(waits.items()):
            out["toposcope_queue_pending_oldest_wait_seconds"].add_metric(
                [*where, reason], max(values)
            )
            out["toposcope_queue_pending_mean_wait_seconds"].add_metric(
                [*where, reason], sum(values) / len(values)
            )
        by_state = dict(
            zip(
                GPU_STATES,
                (queue.free_gpus, queue.allocated_gpus, queue.unavailable_gpus),
                strict=True,
            )
        )
        for state, value in by_state.items():
            out["toposcope_queue_gpus"].add_metric([*where, state], value)
        out["toposcope_queue_largest_free_gpu_block"].add_metric(where, queue.largest_free_block)
        out["toposcope_queue_fragmented_gpus"].add_metric(where, queue.fragmented_gpus)
        account_labels = snapshot.account_labels.get(queue.name)
        out["toposcope_queue_accounts_folded"].add_metric(
            where, account_labels.folded if account_labels is not None else 0
        )
    for usage in snapshot.accounts:
        labels = [SCHEDULER, usage.partition, usage.account]
        out["toposcope_queue_account_jobs"].add_metric([*labels, "running"], usage.running_jobs)
        out["toposcope_queue_account_jobs"].add_metric([*labels, "pending"], usage.pending_jobs)
        figures: tuple[tuple[str, float], ...] = (
            ("allocated_gpus", usage.allocated_gpus),
            ("allocated_cpus", usage.allocated_cpus),
            ("pending_gpus", usage.pending_gpus),
            ("fair_share_gpus", usage.fair_share_gpus),
        )
        for name, figure in figures:
            out[f"toposcope_queue_account_{name}"].add_metric(labels, figure)
        if usage.oldest_wait_s is not None:
            out["toposcope_queue_account_oldest_wait_seconds"].add_metric(
                labels, usage.oldest_wait_s
            )
    for left in snapshot.time_left:
        out["toposcope_queue_job_time_left_seconds"].add_metric(
            [SCHEDULER, left.partition, left.workload], left.seconds
        )
    return nonempty(out.values())


def accounting_families(
    figures: Mapping[str, tuple[float, float, float]], max_accounts: int = DEFAULT_MAX_ACCOUNTS
) -> list[Metric]:
    """The fair-share families from ``account -> (fairshare, norm shares, effective usage)``,
    for at most ``max_accounts`` accounts with valid names (the most used, then the most
    shared), and how many were left out.
    """
    out = families(ACCOUNTING_FAMILIES)
    named = [(account, values) for account, values in figures.items() if label_value(account)]
    named.sort(key=lambda item: (-item[1][2], -item[1][1], item[0]))
    kept = sorted(named[:max_accounts])
    for account, values in kept:
        for name, value in zip(ACCOUNTING_FAMILIES, values, strict=True):
            out[name].add_metric([SCHEDULER, account], value)
    left_out = spec(ACCOUNTING_LEFT_OUT).family()
    left_out.add_metric([SCHEDULER], len(figures) - len(kept))
    return [*nonempty(out.values()), left_out]


def priority_families(aggregates: Iterable[PriorityAggregate]) -> list[Metric]:
    """The ``toposcope_queue_priority_*`` families: jobs, and each factor's mean and max."""
    out = families(PRIORITY_FAMILIES)
    for group in aggregates:
        labels = [SCHEDULER, group.partition, group.account]
        out["toposcope_queue_priority_jobs"].add_metric(labels, group.jobs)
        for factor, mean, peak in zip(PRIORITY_FACTORS, group.means, group.maxima, strict=True):
            out["toposcope_queue_priority_factor_mean"].add_metric([*labels, factor], mean)
            out["toposcope_queue_priority_factor_max"].add_metric([*labels, factor], peak)
    return nonempty(out.values())
