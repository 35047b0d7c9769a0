"""The ``account`` label of the queue families: a bounded name, and at most N per partition.

A scheduler's account names reach the ``account`` label of the ``toposcope_queue_account_*``
and ``toposcope_queue_priority_*`` families. Where the scheduler does not enforce accounts
(Slurm without ``AccountingStorageEnforce=associations``), any user names any account when
submitting (``sbatch -A``), so the label is bounded twice, by every backend alike (the Slurm
queue exporter and the simulator):

- its characters: a name :func:`~toposcope.identity.workload.bounded_label_value` does not
  keep (control characters, escape sequences, over 128 characters) is published as
  ``(invalid)``, and work that names no account as :data:`NO_ACCOUNT`;
- its cardinality: per partition, the ``limit`` accounts with the most GPUs (held plus asked
  for), then the most jobs (running plus pending), then the most CPUs held, keep their label;
  the others are summed under :data:`OTHER_ACCOUNT`, and the backend publishes how many were
  folded there. One ranking serves every account family of the partition, so an account is
  folded in all of them or in none, and each family's total is unchanged.

The bucket labels are in parentheses, outside the name rule's alphabet, so a bucket never
mixes with a real account.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from toposcope.identity.workload import bounded_label_value

#: the account label of work that names no account
NO_ACCOUNT = "(none)"
#: the account label of the accounts beyond a partition's limit, summed
OTHER_ACCOUNT = "(other)"
#: how many accounts per partition keep their own label unless told otherwise
DEFAULT_MAX_ACCOUNTS = 100
#: the largest limit accepted (the queue would then be read for nothing else)
MAX_MAX_ACCOUNTS = 10_000


@dataclass(frozen=True)
class AccountLabels:
    """The label each account of one partition is published under, and how many account
    labels were folded into :data:`OTHER_ACCOUNT`.
    """

    labels: Mapping[str, str]
    folded: int

    def label(self, account: str) -> str:
        """The label of ``account``; an account not ranked here counts under ``(other)``."""
        return self.labels.get(account, OTHER_ACCOUNT)


def account_labels(weights: Mapping[str, Sequence[float]], limit: int) -> AccountLabels:
    """Labels of the accounts of one partition, keyed by the scheduler's own account names.

    ``weights`` gives each account's ranking figures, most significant first (GPUs, jobs,
    CPUs); accounts whose names share a label (several invalid names) are ranked by their
    figures summed. The ``limit`` labels ranked highest (ties by label, so that a scrape is
    reproducible) are kept; the others become :data:`OTHER_ACCOUNT`.
    """
    if limit < 1:
        raise ValueError(f"the account limit must be at least 1, not {limit}")
    named: dict[str, str] = {}
    totals: dict[str, list[float]] = {}
    for account, figures in weights.items():
        label = bounded_label_value(account) or NO_ACCOUNT
        named[account] = label
        total = totals.setdefault(label, [0.0] * len(figures))
        for index, figure in enumerate(figures):
            total[index] += figure
    ranked = sorted(totals, key=lambda label: (*(-f for f in totals[label]), label))
    kept = set(ranked[:limit])
    return AccountLabels(
        labels={a: label if label in kept else OTHER_ACCOUNT for a, label in named.items()},
        folded=len(ranked) - len(kept),
    )
