"""Multi-node jobs on Kubernetes: the running pods of one JobSet, PyTorchJob, LeaderWorkerSet
group or Kueue pod group, as placements on the fabric (:mod:`toposcope.fabric.spread`).

A pod belongs to a job by the first of the job labels (:data:`DEFAULT_JOB_LABELS`, or those
given as ``KIND=KEY[,KEY...]``) whose keys it all carries: the values of those keys, joined
by ``-``, name the job (a LeaderWorkerSet's ``name`` and ``group-index``: one group of leader
and workers is one job). A pod with none of them belongs to its controller (the owner
reference with ``controller: true``, as the exporter finds pods' owners) when that is one of
the multi-node kinds of :data:`OWNER_KINDS`. Only ``Running`` pods bound to a node count, and
a job counts once its pods run on two nodes or more. GPUs are the pod's containers' limits
of :data:`GPU_RESOURCES`; which GPU indices a pod got is not in the pod, so rail alignment is
left unknown. The job's ``workload`` label is ``<namespace>:<kind>:<name>``, its
``partition`` the Kueue queue (``kueue.x-k8s.io/queue-name``) where it has one.

Everything read is checked: names by the Kubernetes rules before they become labels, label
keys by Kubernetes' key rule, GPU limits as small whole numbers; a malformed pod is a
:class:`~toposcope.errors.ConfigError` naming its index and field.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toposcope.errors import ConfigError
from toposcope.fabric.spread import JobPlacement, NodeShare
from toposcope.identity.names import is_node_name, is_object_name
from toposcope.identity.workload import bounded_label_value

#: the ``scheduler`` label of Kubernetes jobs
SCHEDULER = "kubernetes"
#: the label naming a pod's Kueue LocalQueue (the job's ``partition``)
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: the extended resources counted as GPUs
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
#: controller kinds whose pods form one multi-node job
OWNER_KINDS = frozenset(
    {
        "JobSet",
        "LeaderWorkerSet",
        "PyTorchJob",
        "MPIJob",
        "TFJob",
        "JAXJob",
        "XGBoostJob",
        "PaddleJob",
        "TrainJob",
        "RayCluster",
    }
)
#: the longest ``workload`` label (a namespace, a kind and a name, each up to 63 characters)
MAX_WORKLOAD = 256
_KIND = re.compile(r"[A-Z][A-Za-z0-9]{0,62}")
_LABEL_KEY = re.compile(
    r"(?:[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?)*/)?"
    r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_COUNT = re.compile(r"[0-9]{1,4}")


@dataclass(frozen=True)
class JobLabel:
    """A job kind and the pod label keys whose values name one of its jobs."""

    kind: str
    keys: tuple[str, ...]


DEFAULT_JOB_LABELS: tuple[JobLabel, ...] = (
    JobLabel("JobSet", ("jobset.sigs.k8s.io/jobset-name",)),
    JobLabel(
        "LeaderWorkerSet",
        ("leaderworkerset.sigs.k8s.io/name", "leaderworkerset.sigs.k8s.io/group-index"),
    ),
    JobLabel("PyTorchJob", ("training.kubeflow.org/job-name",)),
    JobLabel("Workload", ("kueue.x-k8s.io/pod-group-name",)),
)


def parse_job_label(text: str) -> JobLabel:
    """``KIND=KEY[,KEY...]`` (``JobSet=jobset.sigs.k8s.io/jobset-name``) as a job label."""
    kind, _, keys = text.partition("=")
    if _KIND.fullmatch(kind) is None:
        raise ConfigError(f"job label {text[:80]!r}: {kind[:64]!r} is not a kind (JobSet)")
    parts = tuple(keys.split(","))
    for key in parts:
        if len(key) > 316 or _LABEL_KEY.fullmatch(key) is None:
            raise ConfigError(f"job label {text[:80]!r}: {key[:80]!r} is not a label key")
    return JobLabel(kind, parts)


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _labels(metadata: Mapping[str, Any], where: str) -> dict[str, str]:
    labels = _mapping(metadata.get("labels"), f"{where}.metadata.labels")
    out: dict[str, str] = {}
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ConfigError(f"{where}.metadata.labels: keys and values must be text")
        out[key] = value
    return out


def _identity(
    metadata: Mapping[str, Any], labels: Mapping[str, str], job_labels: Sequence[JobLabel]
) -> tuple[str, str] | None:
    """(kind, name) of the job a pod belongs to, or ``None``."""
    for job in job_labels:
        values = [labels.get(key) for key in job.keys]
        if all(value and _LABEL_VALUE.fullmatch(value) for value in values):
            return job.kind, "-".join(str(value) for value in values)
    owners = metadata.get("ownerReferences")
    for owner in owners if isinstance(owners, list) else ():
        if not isinstance(owner, Mapping) or owner.get("controller") is not True:
            continue
        kind, name = owner.get("kind"), owner.get("name")
        if kind in OWNER_KINDS and isinstance(name, str) and is_object_name(name):
            return str(kind), name
    return None


def _gpus(spec: Mapping[str, Any], where: str) -> int:
    containers = spec.get("containers")
    total = 0
    for number, container in enumerate(containers if isinstance(containers, list) else ()):
        resources = _mapping(
            _mapping(container, f"{where}.spec.containers[{number}]").get("resources"),
            f"{where}.spec.containers[{number}].resources",
        )
        limits = _mapping(resources.get("limits"), f"{where}.spec.containers[{number}].limits")
        for resource in GPU_RESOURCES:
            value = limits.get(resource)
            if value is None:
                continue
            if _COUNT.fullmatch(str(value)) is None:
                raise ConfigError(
                    f"{where}.spec.containers[{number}].resources.limits.{resource}: "
                    f"{str(value)[:40]!r} is not a whole number of GPUs"
                )
            total += int(str(value))
    return total


def job_placements(
    pods: Iterable[object], job_labels: Sequence[JobLabel] = DEFAULT_JOB_LABELS
) -> list[JobPlacement]:
    """The multi-node jobs among ``pods`` (Pod objects as ``kubectl get pods -o json``
    gives them), by workload name.
    """
    jobs: dict[tuple[str, str, str], dict[str, int]] = {}
    queues: dict[tuple[str, str, str], str] = {}
    for index, pod in enumerate(pods):
        where = f"pods[{index}]"
        body = _mapping(pod, where)
        metadata = _mapping(body.get("metadata"), f"{where}.metadata")
        spec = _mapping(body.get("spec"), f"{where}.spec")
        status = _mapping(body.get("status"), f"{where}.status")
        node = spec.get("nodeName")
        if status.get("phase") != "Running" or not node:
            continue
        namespace = metadata.get("namespace") or "default"
        if not isinstance(node, str) or not is_node_name(node):
            raise ConfigError(f"{where}.spec.nodeName: {str(node)[:80]!r} is not a node name")
        if not isinstance(namespace, str) or not is_object_name(namespace):
            raise ConfigError(f"{where}.metadata.namespace: {str(namespace)[:80]!r} is not valid")
        labels = _labels(metadata, where)
        identity = _identity(metadata, labels, job_labels)
        if identity is None:
            continue
        key = (namespace, *identity)
        per_node = jobs.setdefault(key, {})
        per_node[node] = per_node.get(node, 0) + _gpus(spec, where)
        queue = labels.get(QUEUE_LABEL, "")
        if queue and _LABEL_VALUE.fullmatch(queue):
            queues.setdefault(key, queue)
    placements: list[JobPlacement] = []
    for key, per_node in sorted(jobs.items()):
        if len(per_node) < 2:
            continue
        shares = tuple(NodeShare(node, gpus) for node, gpus in per_node.items())
        workload = bounded_label_value(":".join(key), MAX_WORKLOAD)
        placements.append(JobPlacement(SCHEDULER, queues.get(key, ""), workload, shares))
    return placements
