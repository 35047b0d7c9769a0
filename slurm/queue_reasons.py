"""Slurm's pending reasons mapped onto the catalogue's bounded taxonomy.

Slurm says why a job waits in its ``state_reason`` (``Resources``, ``Priority``,
``QOSMaxGRESPerUser``...; the list is Slurm's ``job_state_reason`` enum). The queue metrics
carry two labels for it: ``reason``, one of
:data:`~toposcope.catalogue.queue_metrics.PENDING_REASONS`, and ``scheduler_reason``, Slurm's
own word when it is one :data:`KNOWN_REASONS` lists or one of Slurm's limit reasons (``QOS*``,
``Assoc*``, ``Max*Per*``), else ``other``, so that neither label can grow without bound.

``topology`` is never Slurm's word: the queue model (:mod:`toposcope.slurm.queue`) gives it to
jobs waiting on ``resources`` whose GPUs are free but split the wrong way.
"""

from __future__ import annotations

import re

#: Slurm's reasons toposcope maps by name, with their category
KNOWN_REASONS: dict[str, str] = {
    "Resources": "resources",
    "ReqNodeNotAvail": "resources",
    "NodeDown": "resources",
    "Licenses": "resources",
    "BurstBufferResources": "resources",
    "Priority": "priority",
    "Dependency": "dependency",
    "DependencyNeverSatisfied": "dependency",
    "JobHeldUser": "held",
    "JobHeldAdmin": "held",
    "BeginTime": "held",
    "PartitionTimeLimit": "quota",
    "PartitionNodeLimit": "quota",
    "AccountNotAllowed": "quota",
    "JobArrayTaskLimit": "quota",
    "PartitionDown": "other",
    "PartitionInactive": "other",
    "Reservation": "other",
    "BadConstraints": "other",
    "InvalidAccount": "other",
    "InvalidQOS": "other",
    "Cleaning": "other",
    "PowerUpNode": "other",
    "Configuring": "other",
    "None": "other",
}
#: Slurm's limit reasons (QOS and association limits), named by a pattern
LIMIT_REASON = re.compile(r"(?:QOS|Assoc|Max)[A-Za-z]{1,60}")
#: the ``scheduler_reason`` of anything else
OTHER = "other"


def categorize(slurm_reason: str) -> tuple[str, str]:
    """``(reason, scheduler_reason)`` labels for Slurm's ``state_reason``.

    Unknown words give ``("other", "other")``; limit reasons keep their own name under
    ``quota``.
    """
    category = KNOWN_REASONS.get(slurm_reason)
    if category is not None:
        return category, slurm_reason
    if LIMIT_REASON.fullmatch(slurm_reason):
        return "quota", slurm_reason
    return OTHER, OTHER
