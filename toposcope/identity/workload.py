"""Who a workload is: its kind, its stable name, and the names users know it by.

One definition for every part that names workloads: the exporter attributes cgroups and
process trees to a :class:`WorkloadIdentity` and publishes it on
``toposcope_workload_info``; the node agent reports its :class:`WorkloadKind` to the
resource-manager API. A kind says what scheduler or service manager owns the workload, so
dashboards and alerts can speak of pods and Slurm jobs rather than cgroup paths.

Values that reach labels come from outside (process environments, the API server, cgroup
directory names): :func:`label_value` keeps only short values of a safe alphabet, so a
hostile or broken value becomes an empty label (Prometheus' "absent") instead of a huge or
garbled series. Slurm's names (users, accounts, partitions), which any user chooses where
Slurm does not enforce accounts, go through :func:`bounded_label_value` instead: the same rule,
but a broken name is published as :data:`INVALID_LABEL_VALUE`, visibly, on the workload series
and the queue families alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class WorkloadKind(StrEnum):
    """What owns a workload, as the ``workload_kind`` label says it (a closed, small set)."""

    #: a Kubernetes pod or one of its containers
    POD = "pod"
    #: a Slurm job (all its steps together)
    SLURM_JOB = "slurm_job"
    #: a Docker or Podman container outside Kubernetes
    CONTAINER = "container"
    #: a systemd service or scope
    SYSTEMD_UNIT = "systemd_unit"
    #: a top-level process tree (the exporter's ``process`` mode)
    PROCESS = "process"
    #: any other cgroup holding processes
    CGROUP = "cgroup"


class QosClass(StrEnum):
    """A pod's Kubernetes QoS class, spelled as the API's ``status.qosClass``."""

    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


#: Longest label value kept from outside (Slurm names, owner names, user names).
MAX_LABEL_VALUE = 128
#: What such a value may hold: names of users, accounts, partitions, Kubernetes objects.
_LABEL_VALUE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+:-]*")


def label_value(value: object, max_length: int = MAX_LABEL_VALUE) -> str:
    """``value`` when it is a short name of letters, digits and ``._@+:-``; else ``""``.

    Used for every label value read from outside, so that a value the exporter cannot vouch
    for is published as absent rather than as a new, unbounded series.
    """
    if not isinstance(value, str) or not 0 < len(value) <= max_length:
        return ""
    return value if _LABEL_VALUE_RE.fullmatch(value) else ""


#: What a non-empty name that breaks :func:`label_value`'s rule is published as (parentheses
#: are outside the rule's alphabet, so no real name can be this).
INVALID_LABEL_VALUE = "(invalid)"


def bounded_label_value(value: str, max_length: int = MAX_LABEL_VALUE) -> str:
    """``value`` when :func:`label_value` keeps it, ``""`` when empty, else
    :data:`INVALID_LABEL_VALUE`.

    For names that anyone may choose and that must stay countable (Slurm's users, accounts
    and partitions): a name with control characters, escape sequences or more than
    ``max_length`` characters becomes one visible bucket rather than a series of its own, and
    is told apart from a name that is simply unknown (empty).
    """
    if not value:
        return ""
    return label_value(value, max_length) or INVALID_LABEL_VALUE


@dataclass(frozen=True)
class WorkloadIdentity:
    """Who a workload is.

    ``name`` is the ``workload`` label, stable for the workload's life and short:

    * Kubernetes container: ``<pod uid>/<container id[:12]>`` (``<pod uid>`` for processes
      in the pod's own cgroup);
    * Docker or Podman container: ``<container id[:12]>``;
    * Slurm job: ``slurm-job-<id>`` (all steps together);
    * systemd unit directly under ``system.slice``: the unit name (``sshd.service``);
    * any other cgroup: its path; process mode: ``pid-<pid of the tree's root>``.

    ``cgroup`` is the cgroup path that stands for the workload (the container scope, the
    job directory, the unit). ``pod``, ``namespace`` and ``container`` are Kubernetes
    *names*, filled only by a mapper that knows them (the runtime state, the kubelet);
    ``pod_uid``, ``container_id`` and ``qos_class`` come from the path, ``owner_kind`` and
    ``owner_name`` (the pod's controller: Deployment, StatefulSet, Job...) from the API
    server when asked. The ``slurm_*`` fields come from the job's cgroup path and its
    processes' environment; every field is ``""`` when unknown.
    """

    name: str
    kind: WorkloadKind
    cgroup: str
    pod: str = ""
    namespace: str = ""
    container: str = ""
    pod_uid: str = ""
    container_id: str = ""
    qos_class: str = ""
    owner_kind: str = ""
    owner_name: str = ""
    unit: str = ""
    slurm_job_id: str = ""
    slurm_user: str = ""
    slurm_account: str = ""
    slurm_partition: str = ""
