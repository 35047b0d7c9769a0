"""Pending jobs' priority factors from ``sprio``, aggregated per partition and account.

Slurm's multifactor priority plugin (``PriorityType=priority/multifactor``) computes each
pending job's priority as the sum of weighted factors: age, association, fair-share, job
size, partition, QOS and TRES (plus the admin's site factor, less the nice value). ``sprio``
lists them for every pending job, once per partition the job waits in. One series per job
would give the metrics the queue's cardinality, so the exporter publishes, per partition and
account, how many jobs were listed and each factor's mean and maximum.

The command is ``sprio -h -o "%i|%r|%A|%B|%F|%J|%P|%Q|%T"``: no header, and the type
specifications of sprio(1) (Slurm 22.05): ``%i`` job id, ``%r`` partition, ``%A`` weighted
age, ``%B`` weighted association, ``%F`` weighted fair-share, ``%J`` weighted job size,
``%P`` weighted partition, ``%Q`` weighted QOS and ``%T`` weighted TRES, which sprio prints
as ``cpu=6,mem=2`` (its entries are summed). sprio gives no account, so a job's account
comes from the queue snapshot read in the same scrape; a row whose job is no longer pending
there (it started or ended between the two reads) is left out. A row whose cells do not
parse is skipped with a log line naming it, so one odd job cannot hide every other's.

The fair-share factor needs slurmdbd (without it it is 0); age, job size, partition, QOS and
CPU/memory TRES factors work without accounting. Weights for GPU TRES need slurmdbd too
(slurmctld refuses ``PriorityWeightTRES=GRES/gpu=...`` without it).
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from toposcope.catalogue.queue_metrics import PRIORITY_FACTORS
from toposcope.identity.workload import bounded_label_value
from toposcope.slurm.commands import SlurmCommands
from toposcope.slurm.queue import QueueSnapshot

LOG = logging.getLogger("toposcope.slurm.priority")

#: sprio's type specifications for the factors, in the order of ``PRIORITY_FACTORS``
FACTOR_SPECS: Mapping[str, str] = {
    "age": "%A",
    "assoc": "%B",
    "fairshare": "%F",
    "jobsize": "%J",
    "partition": "%P",
    "qos": "%Q",
    "tres": "%T",
}
#: the ``-o`` format: job id, partition, then the weighted factors
SPRIO_FORMAT = "|".join(("%i", "%r", *(FACTOR_SPECS[f] for f in PRIORITY_FACTORS)))
#: the most sprio rows read in one scrape
MAX_ROWS = 100_000
#: the most rows whose parse failure is logged one by one in one scrape
MAX_LOGGED = 5


@dataclass(frozen=True)
class PriorityRow:
    """One sprio row: a pending job in one partition, with its weighted factors."""

    job_id: int
    partition: str
    factors: tuple[float, ...]


@dataclass(frozen=True)
class PriorityAggregate:
    """The factors of an account's pending jobs in one partition: count, means, maxima."""

    partition: str
    account: str
    jobs: int
    means: tuple[float, ...]
    maxima: tuple[float, ...]


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not finite")
    return value


def _tres(text: str) -> float:
    """The sum of a weighted TRES cell such as ``cpu=6,mem=2`` (empty: 0)."""
    total = 0.0
    for entry in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = entry.partition("=")
        if not sep or not name:
            raise ValueError(f"TRES entry {entry!r} is not name=value")
        total += _number(value)
    return total


def _row(line: str) -> PriorityRow:
    cells = [cell.strip() for cell in line.split("|")]
    if len(cells) != 2 + len(PRIORITY_FACTORS):
        raise ValueError(f"{len(cells)} cells, not {2 + len(PRIORITY_FACTORS)}")
    job_id, partition, *values = cells
    if not job_id.isdigit() or not partition:
        raise ValueError(f"job id {job_id[:20]!r} or partition {partition[:40]!r} is malformed")
    factors = tuple(
        _tres(value) if name == "tres" else _number(value or "0")
        for name, value in zip(PRIORITY_FACTORS, values, strict=True)
    )
    return PriorityRow(int(job_id), bounded_label_value(partition), factors)


def parse_sprio(text: str) -> list[PriorityRow]:
    """The rows of ``sprio -h -o SPRIO_FORMAT``; unparsable rows are skipped and logged."""
    rows: list[PriorityRow] = []
    skipped = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        if len(rows) >= MAX_ROWS:
            LOG.warning("sprio: more than %d rows; the rest are left out", MAX_ROWS)
            break
        try:
            rows.append(_row(line))
        except ValueError as exc:
            skipped += 1
            if skipped <= MAX_LOGGED:
                LOG.warning("sprio: skipped row %r: %s", line[:120], exc)
    if skipped > MAX_LOGGED:
        LOG.warning("sprio: skipped %d rows in all", skipped)
    return rows


def _accounts(snapshot: QueueSnapshot) -> dict[tuple[str, int], str]:
    """``(partition, job id) -> account label`` of the snapshot's pending jobs, folded as the
    snapshot's account families are.
    """
    return {
        (queue.name, job.job.job_id): snapshot.account_label(queue.name, job.job.account)
        for queue in snapshot.partitions
        for job in queue.pending
    }


def aggregate(rows: Iterable[PriorityRow], snapshot: QueueSnapshot) -> list[PriorityAggregate]:
    """Per partition and account: how many of ``rows`` there are, each factor's mean and max.

    A row is counted only where its job waits in its partition in ``snapshot``; its account
    is labelled (and folded into ``(other)``) as the snapshot's account families label it.
    """
    accounts = _accounts(snapshot)
    groups: dict[tuple[str, str], list[tuple[float, ...]]] = defaultdict(list)
    for row in rows:
        account = accounts.get((row.partition, row.job_id))
        if account is not None:
            groups[(row.partition, account)].append(row.factors)
    return [
        PriorityAggregate(
            partition=partition,
            account=account,
            jobs=len(factors),
            means=tuple(sum(column) / len(factors) for column in zip(*factors, strict=True)),
            maxima=tuple(max(column) for column in zip(*factors, strict=True)),
        )
        for (partition, account), factors in sorted(groups.items())
    ]


def read_priorities(commands: SlurmCommands) -> list[PriorityRow]:
    """Every pending job's weighted factors from ``sprio``."""
    return parse_sprio(commands.run("sprio", "-h", "-o", SPRIO_FORMAT))
