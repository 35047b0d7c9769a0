"""Queue and fairness metrics of a batch scheduler: what waits, why, and who holds what.

Any scheduler backend fills these families (``toposcope slurm exporter`` today; the simulator
and a Kubernetes backend later), so their labels are scheduler-neutral:

- ``scheduler`` names the backend (``slurm``);
- ``partition`` is the scheduler's pool of nodes (a Slurm partition, a Kubernetes queue);
- ``reason`` is one of :data:`PENDING_REASONS`, a small fixed set every backend maps its own
  reasons onto, and ``scheduler_reason`` keeps the backend's own word (Slurm's
  ``Resources``, ``QOSMaxGRESPerUser``...) from a bounded list, ``other`` beyond it;
- ``account`` is the tenant (a Slurm account, a Kubernetes namespace), bounded in its
  characters and to a number per partition (:mod:`toposcope.queue.accounts`): ``(invalid)``,
  ``(none)`` and ``(other)`` are the buckets.

A pending job's ``reason`` is ``topology`` when the scheduler says it waits for resources
while the partition has enough free GPUs for it in total, but no set of nodes it may use
holds its per-node share: the GPUs are free, only split the wrong way.
"""

from __future__ import annotations

from toposcope.catalogue.model import MetricSpec, row

#: the bounded pending-reason taxonomy every scheduler backend maps its reasons onto
PENDING_REASONS: tuple[str, ...] = (
    "resources",
    "topology",
    "quota",
    "priority",
    "dependency",
    "held",
    "other",
)
#: GPU states of ``toposcope_queue_gpus``
GPU_STATES: tuple[str, ...] = ("free", "allocated", "unavailable")
#: job states of ``toposcope_queue_account_jobs``
JOB_STATES: tuple[str, ...] = ("running", "pending")
#: priority factors of ``toposcope_queue_priority_factor_*`` (Slurm's multifactor plugin)
PRIORITY_FACTORS: tuple[str, ...] = (
    "age",
    "assoc",
    "fairshare",
    "jobsize",
    "partition",
    "qos",
    "tres",
)

_PART = "queue"

QUEUE_SPECS: tuple[MetricSpec, ...] = (
    row(
        "toposcope_queue_pending_jobs",
        "gauge",
        ["scheduler", "partition", "reason", "scheduler_reason"],
        "Jobs waiting to start, by partition, reason (resources, topology, quota, priority, "
        "dependency, held, other) and the scheduler's own reason.",
        part=_PART,
    ),
    row(
        "toposcope_queue_pending_gpus",
        "gauge",
        ["scheduler", "partition", "reason"],
        "GPUs the pending jobs ask for in all (GPUs per node times nodes), by reason.",
        part=_PART,
    ),
    row(
        "toposcope_queue_pending_oldest_wait_seconds",
        "gauge",
        ["scheduler", "partition", "reason"],
        "How long the longest-waiting pending job of the partition has waited, by reason.",
        "seconds",
        part=_PART,
    ),
    row(
        "toposcope_queue_pending_mean_wait_seconds",
        "gauge",
        ["scheduler", "partition", "reason"],
        "Mean time the partition's pending jobs have waited so far, by reason.",
        "seconds",
        part=_PART,
    ),
    row(
        "toposcope_queue_job_time_left_seconds",
        "gauge",
        ["scheduler", "partition", "workload"],
        "Seconds until the scheduler ends a running job (its end time, start plus time "
        "limit moved on by suspension or a changed limit, minus now; 0 once past it), the "
        "job named by the workload label the node exporters give it (slurm-job-<id>). One "
        "series per running job with a time limit; none for pending jobs or jobs without a "
        "limit. The advisor does not move a job with less time left than job-migration's "
        "min_time_left_seconds.",
        "seconds",
        part=_PART,
    ),
    row(
        "toposcope_queue_gpus",
        "gauge",
        ["scheduler", "partition", "state"],
        "GPUs of the partition's nodes by state: free, allocated to jobs, or unavailable "
        "(on nodes that are down, drained or not responding). A node in two partitions "
        "counts in both.",
        part=_PART,
    ),
    row(
        "toposcope_queue_largest_free_gpu_block",
        "gauge",
        ["scheduler", "partition"],
        "Most free GPUs on any one available node of the partition: the largest single-node "
        "job that could start now.",
        part=_PART,
    ),
    row(
        "toposcope_queue_fragmented_gpus",
        "gauge",
        ["scheduler", "partition"],
        "Free GPUs no pending job of the partition can use: those on available nodes with "
        "fewer free GPUs than the smallest per-node GPU request of the partition's pending "
        "jobs (0 when no job waits for GPUs).",
        part=_PART,
    ),
    row(
        "toposcope_queue_account_jobs",
        "gauge",
        ["scheduler", "partition", "account", "state"],
        "Jobs of an account (tenant) in the partition, by state (running, pending).",
        part=_PART,
    ),
    row(
        "toposcope_queue_account_allocated_gpus",
        "gauge",
        ["scheduler", "partition", "account"],
        "GPUs the account's running jobs hold in the partition.",
        part=_PART,
    ),
    row(
        "toposcope_queue_account_allocated_cpus",
        "gauge",
        ["scheduler", "partition", "account"],
        "CPUs the account's running jobs hold in the partition.",
        part=_PART,
    ),
    row(
        "toposcope_queue_account_pending_gpus",
        "gauge",
        ["scheduler", "partition", "account"],
        "GPUs the account's pending jobs ask for in the partition.",
        part=_PART,
    ),
    row(
        "toposcope_queue_account_oldest_wait_seconds",
        "gauge",
        ["scheduler", "partition", "account"],
        "How long the account's longest-waiting job in the partition has waited among those "
        "that wait for resources, topology or priority (not held, not on a dependency or a "
        "quota of its own).",
        "seconds",
        part=_PART,
    ),
    row(
        "toposcope_queue_account_fair_share_gpus",
        "gauge",
        ["scheduler", "partition", "account"],
        "GPUs the account would hold if the partition's available GPUs were split max-min "
        "fairly among the accounts that want GPUs (held plus asked for by jobs waiting for "
        "resources, topology or priority), weighted by the "
        "scheduler's shares where it has them, equally otherwise.",
        part=_PART,
    ),
    row(
        "toposcope_queue_accounts_folded",
        "gauge",
        ["scheduler", "partition"],
        "Accounts of the partition whose account series are summed under the account (other): "
        "beyond the exporter's limit of accounts per partition (toposcope slurm exporter "
        "--slurm-max-accounts), those with the fewest GPUs held and asked for, then jobs, "
        "then CPUs held (0 when every account has its own series).",
        part=_PART,
    ),
    row(
        "toposcope_queue_accounting_accounts_left_out",
        "gauge",
        ["scheduler"],
        "Accounts the scheduler reported accounting figures for (fairshare, shares, usage "
        "ratios) that are not published: those beyond the exporter's limit of accounts, by "
        "effective usage then shares, and those whose names break the label rule (ratios "
        "cannot be summed into one bucket).",
        part=_PART,
    ),
    row(
        "toposcope_queue_account_fairshare_ratio",
        "gauge",
        ["scheduler", "account"],
        "The scheduler's fair-share factor of the account (Slurm's sshare FairShare: 1 = "
        "used nothing of its share, 0.5 = used exactly its share, 0 = far over it); only "
        "where accounting is configured.",
        "ratio",
        part=_PART,
    ),
    row(
        "toposcope_queue_account_shares_ratio",
        "gauge",
        ["scheduler", "account"],
        "The account's normalised share of the cluster (Slurm's NormShares); only where "
        "accounting is configured.",
        "ratio",
        part=_PART,
    ),
    row(
        "toposcope_queue_account_usage_ratio",
        "gauge",
        ["scheduler", "account"],
        "The account's effective normalised usage of the cluster (Slurm's EffectvUsage); "
        "only where accounting is configured.",
        "ratio",
        part=_PART,
    ),
    row(
        "toposcope_queue_priority_jobs",
        "gauge",
        ["scheduler", "partition", "account"],
        "Pending jobs whose priority factors the scheduler reported (Slurm's sprio), by "
        "partition and account: the weight of the factor means below when combining them; "
        "only where the multifactor priority plugin is configured.",
        part=_PART,
    ),
    row(
        "toposcope_queue_priority_factor_mean",
        "gauge",
        ["scheduler", "partition", "account", "factor"],
        "Mean weighted priority factor (age, assoc, fairshare, jobsize, partition, qos, tres: "
        "the points it adds to a job's priority, Slurm's sprio) over the account's pending "
        "jobs in the partition; only where the multifactor priority plugin is configured.",
        part=_PART,
    ),
    row(
        "toposcope_queue_priority_factor_max",
        "gauge",
        ["scheduler", "partition", "account", "factor"],
        "Largest weighted priority factor (as toposcope_queue_priority_factor_mean) among the "
        "account's pending jobs in the partition; only where the multifactor priority plugin "
        "is configured.",
        part=_PART,
    ),
)
