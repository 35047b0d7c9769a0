"""Batch queue and fairness: what waits and why, free GPUs against what is asked for, GPUs
lost to fragmentation, and each account's GPUs against its fair share.

The series come from ``toposcope slurm exporter`` (``toposcope_queue_*``, one target per
Slurm cluster; docs/slurm.md defines each figure). Reasons are toposcope's bounded set
(resources, topology, quota, priority, dependency, held, other); ``topology`` means enough
GPUs are free in the partition but split across nodes the wrong way.
"""

from __future__ import annotations

from typing import Any

from toposcope.dashboards.grafana.common import (
    any_of_variable,
    dashboard,
    instant_table,
    merge,
    organize,
    query,
    table_panel,
    timeseries_panel,
    to_json,
)
from toposcope.dashboards.grafana.panels import PanelRow, value_stat, with_rows

UID = "toposcope-slurm-queue"
TITLE = "toposcope / Batch queue and fairness"

#: Selects the chosen partitions.
PARTITIONS = 'partition=~"$partition"'
#: Pending jobs per partition and reason (a recording rule of alerts/slurm.rules.yml).
PENDING = "partition_reason:toposcope_queue_pending_jobs:sum"
#: Pending reasons of jobs that could start if resources were there.
STARTABLE = 'reason=~"resources|topology|priority"'


def _now_row() -> PanelRow:
    """Single numbers: pending jobs, jobs pending on topology, free and fragmented GPUs, waits."""
    return PanelRow(
        "Now",
        (
            value_stat(
                "Pending jobs",
                "Jobs waiting in the chosen partitions, for any reason.",
                f"sum({PENDING}{{{PARTITIONS}}}) or vector(0)",
            ),
            value_stat(
                "Pending on topology",
                "Jobs waiting for resources although their partition has enough free GPUs "
                "for them, split across nodes (ToposcopeQueuePendingOnTopology).",
                f'sum({PENDING}{{{PARTITIONS}, reason="topology"}}) or vector(0)',
            ),
            value_stat(
                "Free GPUs",
                "GPUs no job holds on nodes that take jobs.",
                f'sum(toposcope_queue_gpus{{{PARTITIONS}, state="free"}})',
            ),
            value_stat(
                "Fragmented GPUs",
                "Free GPUs on nodes with fewer free than the smallest per-node GPU request "
                "of the pending jobs: no waiting job can use them.",
                f"sum(toposcope_queue_fragmented_gpus{{{PARTITIONS}}})",
            ),
            value_stat(
                "Largest free block",
                "Most free GPUs on one node: the largest single-node job that could start now.",
                f"max(toposcope_queue_largest_free_gpu_block{{{PARTITIONS}}})",
            ),
            value_stat(
                "Oldest wait",
                "How long the longest-waiting job that could start (resources, topology or "
                "priority) has waited.",
                "max(toposcope_queue_pending_oldest_wait_seconds"
                f"{{{PARTITIONS}, {STARTABLE}}}) or vector(0)",
                "s",
            ),
        ),
    )


def _queue_row() -> PanelRow:
    """Pending jobs by reason, GPUs asked for against free, waits, the scheduler's reasons."""
    return PanelRow(
        "Queue",
        (
            timeseries_panel(
                "Pending jobs by reason",
                "Waiting jobs per toposcope reason; the scheduler's own reasons are in the "
                "table below.",
                [query(f"sum by (reason) ({PENDING}{{{PARTITIONS}}})", "{{reason}}")],
                "none",
                stacked=True,
                min_value=0,
            ),
            timeseries_panel(
                "GPUs asked for against GPUs free",
                "GPUs the jobs that could start ask for, per partition, next to the "
                "partition's free and fragmented GPUs.",
                [
                    query(
                        "sum by (partition) (toposcope_queue_pending_gpus"
                        f"{{{PARTITIONS}, {STARTABLE}}})",
                        "{{partition}} asked for",
                    ),
                    query(
                        f'sum by (partition) (toposcope_queue_gpus{{{PARTITIONS}, state="free"}})',
                        "{{partition}} free",
                    ),
                    query(
                        f"sum by (partition) (toposcope_queue_fragmented_gpus{{{PARTITIONS}}})",
                        "{{partition}} fragmented",
                    ),
                ],
                "none",
                min_value=0,
            ),
            timeseries_panel(
                "Wait of pending jobs",
                "Oldest and mean wait of the jobs still waiting, per partition and reason.",
                [
                    query(
                        f"toposcope_queue_pending_oldest_wait_seconds{{{PARTITIONS}}}",
                        "{{partition}} {{reason}} oldest",
                    ),
                    query(
                        f"toposcope_queue_pending_mean_wait_seconds{{{PARTITIONS}}}",
                        "{{partition}} {{reason}} mean",
                    ),
                ],
                "s",
                min_value=0,
            ),
            table_panel(
                "Pending jobs by the scheduler's reason",
                "Waiting jobs per partition, toposcope reason and the scheduler's own reason "
                "(Slurm's Resources, Priority, QOS and association limits...).",
                [
                    instant_table(
                        "sum by (partition, reason, scheduler_reason) "
                        f"(toposcope_queue_pending_jobs{{{PARTITIONS}}})"
                    )
                ],
                transformations=[
                    organize(
                        order=("partition", "reason", "scheduler_reason", "Value"),
                        rename={"Value": "jobs", "scheduler_reason": "scheduler's reason"},
                    )
                ],
            ),
        ),
    )


def _accounts_row() -> PanelRow:
    """GPUs each account holds, and each account against its fair share."""
    by_account = "sum by (partition, account)"
    return PanelRow(
        "Accounts",
        (
            timeseries_panel(
                "GPUs held per account",
                "GPUs the running jobs of each account hold.",
                [
                    query(
                        f"{by_account} (toposcope_queue_account_allocated_gpus{{{PARTITIONS}}})",
                        "{{partition}} {{account}}",
                    )
                ],
                "none",
                stacked=True,
                min_value=0,
            ),
            table_panel(
                "Accounts against their fair share",
                "Per account: GPUs held, its max-min fair share of the partition's GPUs, GPUs "
                "its pending jobs ask for and its oldest wait among jobs that could start; "
                "ToposcopeQueueAccountBeyondShare fires for a long wait under half the share.",
                [
                    instant_table(
                        f"{by_account} (toposcope_queue_account_allocated_gpus{{{PARTITIONS}}})"
                    ),
                    instant_table(
                        f"{by_account} (toposcope_queue_account_fair_share_gpus{{{PARTITIONS}}})"
                    ),
                    instant_table(
                        f"{by_account} (toposcope_queue_account_pending_gpus{{{PARTITIONS}}})"
                    ),
                    instant_table(
                        "max by (partition, account) "
                        f"(toposcope_queue_account_oldest_wait_seconds{{{PARTITIONS}}})"
                    ),
                ],
                transformations=[
                    merge(),
                    organize(
                        order=("partition", "account", "Value #A", "Value #B", "Value #C"),
                        rename={
                            "Value #A": "GPUs held",
                            "Value #B": "fair share (GPUs)",
                            "Value #C": "GPUs asked for",
                            "Value #D": "oldest wait (s)",
                        },
                    ),
                ],
            ),
        ),
    )


def build() -> dict[str, Any]:
    """The batch queue dashboard's JSON model."""
    builder = dashboard(
        UID,
        TITLE,
        "What the batch scheduler keeps waiting and why, GPUs asked for against GPUs free, "
        "GPUs lost to fragmentation, and each account's GPUs against its fair share.",
        time_from="now-6h",
    )
    builder = builder.with_variable(
        any_of_variable(
            "partition",
            "Partition",
            "label_values(toposcope_queue_gpus, partition)",
            "Scheduler partitions (Slurm partitions).",
        )
    )
    return to_json(with_rows(builder, [_now_row(), _queue_row(), _accounts_row()]))
